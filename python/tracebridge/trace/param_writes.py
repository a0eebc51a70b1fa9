"""Parameters the traced code writes in place: copied before the first write, put back
when the recording or check that wrote them ends.

Note: why a parameter is copied on its first write, not before every run.
  Code that moves a parameter in forward (an EMA teacher, DINO's center as a trainable
  ``nn.Parameter``, ``self.w.data.mul_(0.5)``) is run many times by a trace -- the
  recording, the check's recording and eager calls, check inputs, a compile's warm-up --
  where eager use ran it once. Left moved, the model is not as the user had it, and a
  program traced from it serves every call shifted. Copying every weight before each run
  would double a large model's memory for a case most models never meet; so the tracer,
  which sees every op of a recording, calls :func:`before_write` before an op that writes
  into a parameter's memory (the parameter, a view of it, its ``.data``), and the
  parameter is copied then, once for every :func:`block` under way (trace/capture.py's
  ``preserved``), which puts it back when it ends. A parameter once written is remembered
  (for as long as it lives): later blocks -- the checks' eager calls, which no tracer
  watches -- copy it when they begin. A write the tracer did not see (an eager run before
  any recording) is found by the parameter's version counter when the block ends: it
  cannot be undone there, it is warned of by name, and the parameter is copied from then
  on.
"""

from __future__ import annotations

import contextlib
import weakref

import torch

# One dict per block under way: id(parameter) -> (parameter, its copy).
_BLOCKS: list[dict[int, tuple]] = []
# The parameters traced code was seen writing: id -> parameter (gone when it dies).
_WRITTEN: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _copy(param: torch.Tensor) -> tuple:
    with torch._C.DisableTorchFunction():
        return param, param.detach().clone()


@contextlib.contextmanager
def block(params: list[torch.Tensor]):
    """Run a block; then put back each parameter that was written in it and copied (by
    :func:`before_write`, or here, at the start, where code was seen writing it before).
    Yields the dict of copies: after the block, the ids of the parameters put back."""
    copies: dict[int, tuple] = {}
    for param in params:
        if id(param) in _WRITTEN and id(param) not in copies:
            copies[id(param)] = _copy(param)
    _BLOCKS.append(copies)
    try:
        yield copies
    finally:
        del _BLOCKS[next(i for i, b in enumerate(_BLOCKS) if b is copies)]  # not ==: tensors
        with torch.no_grad(), torch._C.DisableTorchFunction():
            for param, copy in copies.values():
                # Every copy goes back: a write through ``.data`` moves no version counter
                # of the parameter's.
                if param.shape == copy.shape:
                    param.copy_(copy)
                else:  # ``set_`` gave it another tensor's storage and shape
                    param.set_(copy)


def before_write(param: torch.Tensor) -> None:
    """``param`` is about to be written: copy it for every block under way that has no
    copy yet, and remember it."""
    _WRITTEN[id(param)] = param
    made = None
    for copies in _BLOCKS:
        if id(param) not in copies:
            made = made or _copy(param)
            copies[id(param)] = made


def note_unseen(params: list[torch.Tensor]) -> None:
    """Parameters found written where no copy was made: copied by later blocks."""
    for param in params:
        _WRITTEN[id(param)] = param
