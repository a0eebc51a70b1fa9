"""A buffer the traced code assigns anew (``self.running_mean = (1 - m) * self.running_mean
+ m * mean``), recorded as a write into that buffer.

Note: why a write. Eager code that rebinds a buffer leaves the new tensor on the module,
and the next call reads it: a hand-written batch norm or an exponential moving average
keeps its statistics this way. A trace reads each buffer through the module's table on
every call, and an assignment is not an op: recorded as it ran, the graph computed the new
statistics and dropped them, so every later call read the first ones, silently. Where the
new tensor has the old one's shape, dtype and device, the assignment is recorded as
``old.copy_(new)`` at the end of the graph: every read before it (which read the old
tensor) still does, and the next call reads the new values through the same table, as
eager's next call does. A buffer rebuilt at another shape (a rotary table grown for a longer
sequence) is left as before: the graph computes the new table from the call's sizes.

Every assignment of a tensor to a buffer name goes through ``register_buffer``, which calls
PyTorch's global buffer-registration hooks: one is installed while the code runs.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import TYPE_CHECKING

import torch
from torch.nn.modules import module as _torch_module

from ..errors import TraceError, TracerWarning

if TYPE_CHECKING:
    from .tracer import Tracer


@contextlib.contextmanager
def watched(tracer: Tracer):
    """While the traced code runs, note each buffer of the traced state it assigns anew;
    :func:`record_writes` then records the writes."""
    rebound: dict[tuple[int, str], tuple] = {}

    def note(module, name, value):
        old = module._buffers.get(name)
        entry = tracer._state.get(id(old)) if old is not None else None
        if entry is not None and entry[1] == "buffer" and entry[2] is old:
            rebound.setdefault((id(module), name), (module, name, old))

    def note_parameter(module, name, value):
        old = module._parameters.get(name)
        entry = tracer._state.get(id(old)) if old is not None else None
        if entry is not None and value is not old:
            where = tracer.location() or "an unknown location"
            rebound.setdefault(("parameter",), (name, entry[0], where))

    handles = [
        _torch_module.register_module_buffer_registration_hook(note),
        _torch_module.register_module_parameter_registration_hook(note_parameter),
    ]
    try:
        yield rebound
    finally:
        for handle in handles:
            handle.remove()


def record_writes(rebound: dict) -> None:
    """Record ``old.copy_(new)`` for each buffer assigned anew at its own shape, dtype and
    device (run inside the recording, after the traced code returned). A parameter
    assigned anew is refused: each call would change the weights (a file may not write
    them), and a trace would serve the first call's forever."""
    parameter = rebound.pop(("parameter",), None)
    if parameter is not None:
        name, state_name, where = parameter
        raise TraceError(
            f"the traced code assigns a new nn.Parameter to {name!r} (state {state_name!r}) "
            f"at {where}: each eager call changes the module's weights, which a trace "
            "cannot repeat (it would serve the first call's weights on every call). Update "
            "the weights outside the traced call (an optimizer step, load_state_dict), or "
            "keep the changing value in a buffer"
        )
    for module, name, old in rebound.values():
        new = module._buffers.get(name)
        if new is None or new is old or not isinstance(new, torch.Tensor):
            continue
        with warnings.catch_warnings():
            # The new tensor's sizes may be traced (a mean over the batch): comparing them
            # guards them, as the write needs, and is no decision of the user's to warn of.
            warnings.simplefilter("ignore", TracerWarning)
            same = (new.shape, new.dtype, new.device) == (old.shape, old.dtype, old.device)
        if not same:
            continue
        with torch.no_grad() if not new.requires_grad else contextlib.nullcontext():
            old.copy_(new)
