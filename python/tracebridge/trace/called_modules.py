"""The ``nn.Module``s a traced *function* calls (``def predict(x): return model(x)``, with
``model`` a global): a function's trace knows no module of its own, yet these modules'
state and modes decide what it computed.

* Their buffers move on every run of the code (a batch norm in training mode), and tracing
  runs the code several times (the recording, the check, the size-1 variants):
  :class:`KeptBuffers` puts them back as they were before the trace.
* Their modes are in the graph as traced: the traced function keeps the modules whose code
  reads ``self.training``, with their flags (runtime/module_tree.py's ``ModesWatch``), and
  refuses a call once one was switched (``model.eval()`` after tracing in training mode).

A global forward pre-hook notes each module called while the code is recorded.
"""

from __future__ import annotations

import contextlib

import torch
from torch.nn.modules import module as _torch_module


@contextlib.contextmanager
def noted(kept: KeptBuffers | None = None):
    """The modules called inside the block, in call order, each once; ``kept`` (if given)
    keeps each one's buffers as they were before its first call."""
    seen: dict[int, torch.nn.Module] = {}

    def note(module, args):
        if id(module) not in seen:
            seen[id(module)] = module
            if kept is not None:
                kept.add(module)

    handle = _torch_module.register_module_forward_pre_hook(note)
    called: list[torch.nn.Module] = []
    try:
        yield called
    finally:
        handle.remove()
        called.extend(seen.values())


class KeptBuffers:
    """The buffers of some modules as they are now (or, for a module :meth:`add`-ed
    later, as they were then); :meth:`restore` puts their values back (in place: the
    modules hold them)."""

    def __init__(self, modules: list[torch.nn.Module] = ()):
        self._kept: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        for module in modules:
            self.add(module)

    def add(self, module: torch.nn.Module) -> None:
        # (called while the code is recorded: the copies are no ops of the graph)
        with torch._C.DisableTorchFunction():
            for buffer in module.buffers():
                if buffer is not None and not buffer.is_meta and id(buffer) not in self._kept:
                    self._kept[id(buffer)] = (buffer, buffer.detach().clone())

    def restore(self) -> None:
        with torch.no_grad():
            for buffer, copy in self._kept.values():
                if buffer.shape == copy.shape and not torch.equal(buffer, copy):
                    buffer.copy_(copy)
