"""Writes into tensors that PyTorch makes without asking ``__torch_function__``: refused
before they run.

Note: why they must be refused here. The tracer sees an op through torch's function
mode. ``Tensor.set_`` given a tensor and ``torch.utils.swap_tensors`` skip that mode:
they ran unseen, so the graph lacked them. ``x.set_(y); return x + 1`` traced at two
rows served ``ones(2) + 1`` on every call, where eager gave ``y + 1``. A parameter
written that way was left changed after the trace, and the copy that puts written
parameters back (trace/param_writes.py) never heard of the write. Neither op can be held
by a saved graph (they replace what a tensor object is, not its values). So while a
tracer records in this thread, both raise before anything is changed.
"""

from __future__ import annotations

import torch

from ..errors import UnsupportedOpError
from .helpers import active_tracer
from .patches import BUILTIN_PATCHES

_original_set = torch.Tensor.set_
_original_swap = torch._C._swap_tensor_impl


def _refuse(what: str, tracer) -> None:
    raise UnsupportedOpError(
        f"cannot record {what} at {tracer.location() or 'unknown location'}: it replaces "
        "what a tensor object holds (its storage, shape and strides) in place, which no "
        "saved graph can hold, and PyTorch runs it out of the tracer's sight; compute a new "
        "tensor and use it instead (for a parameter or buffer, assign the new values with "
        "copy_ under torch.no_grad(), which is recorded), or move it out of the traced code"
    )


def _recording(tracer) -> bool:
    return tracer is not None and tracer.is_active()


def _traced_set(self, *args, **kwargs):
    tracer = active_tracer()
    if _recording(tracer):
        _refuse("Tensor.set_", tracer)
    return _original_set(self, *args, **kwargs)


def _traced_swap(t1, t2):
    tracer = active_tracer()
    if _recording(tracer):
        _refuse("torch.utils.swap_tensors", tracer)
    return _original_swap(t1, t2)


BUILTIN_PATCHES.add(torch.Tensor, "set_", _traced_set)
# swap_tensors (torch/utils/__init__.py) reads this C function from torch._C at each call,
# so replacing it there holds wherever swap_tensors was imported from.
BUILTIN_PATCHES.add(torch._C, "_swap_tensor_impl", _traced_swap)
