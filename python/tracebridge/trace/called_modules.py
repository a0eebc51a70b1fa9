"""The ``nn.Module``s a traced *function* calls (``def predict(x): return model(x)``, with
``model`` a global): a function's trace knows no module of its own, yet these modules'
state and modes decide what it computed.

* Their buffers move on every run of the code (a batch norm in training mode), and tracing
  runs the code several times (the check, the size-1 variants): :class:`KeptBuffers` puts
  them back as the recording, the user's one call, left them.
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
def noted():
    """The modules called inside the block, in call order, each once."""
    seen: dict[int, torch.nn.Module] = {}

    def note(module, args):
        seen.setdefault(id(module), module)

    handle = _torch_module.register_module_forward_pre_hook(note)
    called: list[torch.nn.Module] = []
    try:
        yield called
    finally:
        handle.remove()
        called.extend(seen.values())


class KeptBuffers:
    """The buffers of some modules as they are now; :meth:`restore` puts their values
    back (in place: the modules hold them)."""

    def __init__(self, modules: list[torch.nn.Module]):
        found: dict[int, torch.Tensor] = {}
        for module in modules:
            for buffer in module.buffers():
                if buffer is not None and not buffer.is_meta:
                    found.setdefault(id(buffer), buffer)
        with torch.no_grad():
            self._kept = [(b, b.detach().clone()) for b in found.values()]

    def restore(self) -> None:
        with torch.no_grad():
            for buffer, copy in self._kept:
                if buffer.shape == copy.shape and not torch.equal(buffer, copy):
                    buffer.copy_(copy)
