"""The caller's autocast, as the traced code sees it: ``torch.is_autocast_enabled(d)`` and
``torch.get_autocast_dtype(d)`` read in the code, and the ``torch.autocast`` regions the
code opens, become assumptions on the caller's autocast checked on every call (op-set 8:
``prim.autocast_enabled``, ``prim.autocast_dtype``).

Note: what a call under another autocast would get wrong, and the guard that stops it.
The caller's autocast is set aside while recording and applies to the graph's ops on
each call (trace/autocast.py). Two things the graph cannot replay:

* a read of the caller's autocast state: the branch it decided, or the dtype it chose, is
  fixed in the graph. It answers what the caller's region answered (the state set aside),
  and is guarded to be the same on every call;
* a region the code opens itself: its casts are explicit in the graph (autocast.py), but
  the caller's autocast also applies to its ops, which in eager code the region shields.
  Under a caller's region for the same device type in the same dtype, every op is cast
  alike either way; under any other (another dtype, or a region of the code's own that
  turns autocast off, as LLaMA's rotary embedding does), the ops inside would be cast
  where eager's are not. So the caller's autocast for that device is guarded: as it was
  when traced, if the code's region agrees with it, else off. The dtype is guarded too: a
  region that names none takes the caller's.

Inside a region of the code's own, reads for its device answer for the region, on every
call: no guard. Called by the patched functions of trace/patches.py (only for the user's
code: torch reads the state for itself, in ``torch.autocast.__enter__``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from . import autocast

if TYPE_CHECKING:  # the tracer imports this module's callers
    from .tracer import Tracer


_READS = {  # op: (value kind, guard kind, the function the code called)
    "prim.autocast_enabled": ("bool", "branch", "torch.is_autocast_enabled"),
    "prim.autocast_dtype": ("dtype", "value", "torch.get_autocast_dtype"),
}
_READ_HINT = (
    " (read by the traced code: call it under the autocast it was traced under, or trace "
    "it under this one)"
)


def _guard(tracer: Tracer, op: str, device: str, expect, why: str, loc) -> None:
    """Guard, once per expectation, that the caller's ``op`` for ``device`` is ``expect``."""
    key = (op, device, expect)
    if key in tracer.autocast_guards:
        return
    tracer.autocast_guards.add(key)
    kind, guard_kind, name = _READS[op]
    ref = tracer._value_node(op, kind, [device], loc)
    tracer.guard(ref, expect, f"{name}({device!r}){why}", guard_kind, loc)


def _device_type(device) -> str:
    """``"cuda:0"`` read as ``"cuda"``, as torch reads it."""
    return device.split(":")[0] if isinstance(device, str) else device


def _callers(tracer: Tracer, device: str):
    """The caller's (enabled, dtype) for ``device`` where a read asks about the caller;
    None inside a region of the code's own for that device (it answers for the region)
    or for a device type autocast does not know."""
    if device in tracer.autocast_regions:
        return None
    return autocast.callers(device)


def _read(tracer: Tracer, op: str, device: str, real):
    """The caller's answer to the read ``op`` (from its (enabled, dtype) state), guarded;
    ``real`` (torch's answer now) where the read asks no caller."""
    device = _device_type(device)
    caller = _callers(tracer, device)
    if caller is None:
        return real
    answer = caller[_STATE_INDEX[op]]
    _guard(tracer, op, device, answer, _READ_HINT, tracer.location())
    return answer


_STATE_INDEX = {"prim.autocast_enabled": 0, "prim.autocast_dtype": 1}


def read_enabled(tracer: Tracer, device: str, real: bool) -> bool:
    """``torch.is_autocast_enabled(device)`` in the user's code (``real``: torch's answer
    now, with the caller's region set aside)."""
    return _read(tracer, "prim.autocast_enabled", device, real)


def read_dtype(tracer: Tracer, device: str, real: torch.dtype) -> torch.dtype:
    """``torch.get_autocast_dtype(device)`` in the user's code."""
    return _read(tracer, "prim.autocast_dtype", device, real)


def ambient_guards(tracer: Tracer) -> None:
    """In a recording that keeps the caller's autocast (autocast.py, ``kept``), guard at
    the start of the graph that the caller's autocast is, on every call, what it is now
    for each device type it is on for: the graph holds its casts."""
    if not autocast.keeping():
        return
    for device, (enabled, dtype) in autocast.state().items():
        if not enabled:
            continue
        why = (
            " (tracebridge.trace ran under this autocast, and the code assumes what it "
            "changes, so its casts are in the trace: call it under "
            f"torch.autocast({device!r}, dtype={dtype}), or trace it outside autocast to "
            "call it outside)"
        )
        _guard(tracer, "prim.autocast_enabled", device, True, why, None)
        _guard(tracer, "prim.autocast_dtype", device, dtype, why, None)


def region_entered(tracer: Tracer, region) -> None:
    """The traced code entered ``region`` (a ``torch.autocast``), already in force."""
    device = region.device
    caller = autocast.callers(device)
    if caller is not None:  # nested regions too: one that turns autocast off differs
        enabled, dtype = caller
        agrees = bool(enabled and region._enabled and region.fast_dtype == dtype)
        how = f"torch.autocast({device!r}, dtype={region.fast_dtype}, enabled={region._enabled})"
        remedy = (
            "call it under the autocast it was traced under, or trace it outside autocast "
            "to call it outside"
            if agrees
            else f"call it outside autocast for {device!r}"
        )
        why = (
            f" (the traced code opens {how} here: under another autocast for {device!r} a "
            f"call would cast the ops inside it where eager code does not; {remedy})"
        )
        loc = tracer.location()
        _guard(tracer, "prim.autocast_enabled", device, agrees, why, loc)
        _guard(tracer, "prim.autocast_dtype", device, dtype, why, loc)
    tracer.autocast_regions.append(device)


def region_left(tracer: Tracer, region) -> None:
    """The traced code left ``region``."""
    regions = tracer.autocast_regions
    if region.device in regions:
        del regions[len(regions) - 1 - regions[::-1].index(region.device)]
