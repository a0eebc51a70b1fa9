"""Mixed precision: ``torch.autocast`` regions become explicit casts in the graph.

Note: why casts, not region ops. Autocast is not a call the recording mode sees (entering
it sets thread-local flags; only ``torch.export``'s own mode is told), and its effect is
per op: a "lower precision" op (``linear``, ``matmul``, ``conv2d``) casts its floating
inputs to the autocast dtype, an "fp32" op casts them to float32, a "promote" op to the
widest. In every case the op then computes in the dtype of its result, so recording a
``Tensor.to(x, dtype)`` of each floating input whose dtype differs from the result's
reproduces autocast exactly, with ops that already exist in every op-set version: the file
runs in the same dtypes as eager code, in any runtime and in R, without autocast state.

Which ops did autocast change? The op runs again on meta copies of its arguments, where
autocast does not apply (its dispatch keys are per backend, and meta has none): a
different result dtype, or an error (``linear`` of bfloat16 and float32 inputs), says that
autocast cast the inputs. Ops whose result dtype is the natural one are left as recorded,
so an op that mixes dtypes by design (``batch_norm`` of a bfloat16 input with float32
weights) keeps its float32 weights, as under autocast.

Note: the caller's autocast is not the code's. An autocast region open around
``tracebridge.trace`` (an inference script's ``with torch.autocast(...)``) belongs to the
call, not to the traced code: its casts baked into the graph would serve every later call
in its dtype, and a call outside autocast would return bfloat16 where eager returns
float32. So it is set aside while the code is recorded (:func:`set_aside`): the graph holds
the uncast ops, as a trace made outside autocast does, and on each call the caller's
autocast applies to them, as to eager code (the runtime runs a call under autocast as
traced: runtime/folding.py ``_autocast``). One file is then right inside and outside
autocast. What the code reads of the caller's autocast (``torch.is_autocast_enabled``,
``torch.get_autocast_dtype``) answers as the caller's region would, and is guarded
(trace/autocast_state.py); a region the code opens itself is made explicit as casts
(above), and the caller's autocast for its device is guarded to be one that would not
cast its ops again otherwise. Code that assumes what autocast changes (``.float()`` gave
its float32 input back when recorded without it) fails the check of such a recording:
``trace`` then records it in the caller's autocast (:func:`kept`), its casts explicit,
guarded to be called under that autocast only.
"""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING, Any

import torch
from torch.utils._pytree import tree_map

from ..ir import pytree
from ..ir.ops import AUTOCAST_DEVICE_TYPES
from ..ir.program import DTYPE_NAMES, Ref

if TYPE_CHECKING:  # the tracer imports this module
    from .tracer import Tracer

CAST_OP = "Tensor.to"


def active() -> bool:
    """Whether an autocast region is open in this thread, for any device."""
    return torch._C._is_any_autocast_enabled()


def cast_inputs(
    tracer: Tracer, func, args: tuple, kwargs: dict, enc_args: list, enc_kwargs: dict, result
) -> tuple[list, dict]:
    """The encoded arguments of an op that ran under autocast, with a recorded cast in
    front of each floating input that autocast converted (unchanged outside autocast)."""
    if not active():
        return enc_args, enc_kwargs
    target = _result_dtype(result)
    if target is None or not _differs(args, kwargs, target):
        return enc_args, enc_kwargs
    if not _autocast_changed(func, args, kwargs, target):
        return enc_args, enc_kwargs
    loc = tracer.location()
    cast = [_cast(tracer, a, e, target, loc) for a, e in zip(args, enc_args)]
    cast_kw = {k: _cast(tracer, kwargs[k], e, target, loc) for k, e in enc_kwargs.items()}
    return cast, cast_kw


def _tensors(obj):
    """Every tensor inside ``obj`` (nested lists, tuples and dicts)."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _tensors(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _tensors(item)


def _floating(obj) -> list[torch.Tensor]:
    return [t for t in _tensors(obj) if t.is_floating_point()]


def _result_dtype(result) -> torch.dtype | None:
    """The one floating dtype of the op's tensor results (None: none, or several)."""
    dtypes = {t.dtype for t in _floating(result)}
    return dtypes.pop() if len(dtypes) == 1 else None


def _differs(args: tuple, kwargs: dict, target: torch.dtype) -> bool:
    return any(t.dtype != target for t in _floating((list(args), kwargs)))


def _on_meta(obj):
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("meta")
    if isinstance(obj, (list, tuple)):
        items = [_on_meta(x) for x in obj]
        return items if isinstance(obj, list) else type(obj)(items)
    if isinstance(obj, dict):
        return {k: _on_meta(v) for k, v in obj.items()}
    return obj


def _autocast_changed(func, args: tuple, kwargs: dict, target: torch.dtype) -> bool:
    """Whether the op, run without autocast, gives another result dtype (or fails).

    Meta kernels check shapes, not always dtypes (``matmul`` of bfloat16 and float32 runs
    on meta and fails on every real device): where meta accepts inputs of mixed floating
    dtypes, the op runs once more on copies of the real inputs with autocast off, to tell
    an op that mixes dtypes by design (``batch_norm``) from one that only autocast lets
    through."""
    with torch._C.DisableTorchFunction():
        try:
            plain = func(*_on_meta(args), **_on_meta(kwargs))
        except Exception:  # noqa: BLE001 - mixed dtypes that only autocast reconciles
            return True
    if _result_dtype(plain) != target:
        return True
    if len({t.dtype for t in _floating((list(args), kwargs))}) < 2:
        return False
    return _fails_without_autocast(func, args, kwargs)


def _fails_without_autocast(func, args: tuple, kwargs: dict) -> bool:
    """Whether ``func`` fails on copies of its real inputs with autocast off; the copies
    keep in-place updates (batch norm statistics) off the traced model, and the RNG
    states are put back, so that tracing leaves everything as it was."""
    copies = tree_map(
        lambda x: x.detach().clone() if isinstance(x, torch.Tensor) else x, (list(args), kwargs)
    )
    cuda = sorted({t.device.index or 0 for t in _tensors(copies[0]) if t.is_cuda})
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch._C.DisableTorchFunction())
        stack.enter_context(torch.no_grad())
        stack.enter_context(torch.random.fork_rng(devices=cuda))
        stack.enter_context(_switched_off())
        try:
            func(*copies[0], **copies[1])
        except Exception:  # noqa: BLE001 - any failure: only autocast made it run
            return True
    return False


# The device types whose autocast a trace may run under (``torch.is_autocast_enabled``
# takes a device type since torch 2.4); prim.autocast_enabled reads no other.
_AUTOCAST_DEVICES = AUTOCAST_DEVICE_TYPES

# torch's own functions, not the ones the tracer patches in for the user's code.
_is_enabled = torch._C.is_autocast_enabled
_dtype_of = torch._C.get_autocast_dtype
_set_enabled = torch._C.set_autocast_enabled


def state() -> dict[str, tuple[bool, torch.dtype]]:
    """The autocast state of this thread: per device type, (enabled, dtype)."""
    return {d: (_is_enabled(d), _dtype_of(d)) for d in _AUTOCAST_DEVICES}


@contextlib.contextmanager
def _switched_off():
    """Autocast off for every device type, put back after. Not ``torch.autocast``: the
    tracer watches that class for the regions the traced code opens."""
    enabled = [d for d in _AUTOCAST_DEVICES if _is_enabled(d)]
    for device in enabled:
        _set_enabled(device, False)
    try:
        yield
    finally:
        for device in enabled:
            _set_enabled(device, True)


class _Callers(threading.local):
    def __init__(self):
        self.stack: list[dict[str, tuple[bool, torch.dtype]]] = []
        self.kept = False  # record in the caller's autocast (:func:`kept`)


_callers = _Callers()  # per thread: the caller's autocast of each recording in progress


@contextlib.contextmanager
def set_aside():
    """Record without the caller's autocast (see the module's second note); the state
    it had stays readable through :func:`callers`. Inside :func:`kept`, record in it."""
    if _callers.kept:
        yield
        return
    outer = _callers.stack[0] if _callers.stack else state()
    _callers.stack.append(outer)  # a nested recording answers for the same caller
    try:
        with _switched_off():
            yield
    finally:
        _callers.stack.pop()


@contextlib.contextmanager
def kept():
    """Record in the caller's autocast, its casts explicit in the graph, and guard on each
    call that the caller's autocast is the same (trace/autocast_state.py,
    ``ambient_guards``): for code that autocast changes in a way a trace made without it
    cannot follow (``x.float()`` gave ``x`` back when traced, and under autocast it
    converts a bfloat16 ``x``). Such a trace serves calls under that autocast only."""
    before = _callers.kept
    _callers.kept = True
    try:
        yield
    finally:
        _callers.kept = before


def keeping() -> bool:
    """Whether recordings now keep the caller's autocast (:func:`kept`)."""
    return _callers.kept


def callers(device: str) -> tuple[bool, torch.dtype] | None:
    """The caller's autocast for ``device`` while a recording set it aside (None for a
    device type autocast does not know, or outside a recording)."""
    if not _callers.stack:
        return None
    return _callers.stack[0].get(device)


def _cast(tracer: Tracer, arg: Any, encoded: Any, target: torch.dtype, loc: str | None) -> Any:
    """``encoded`` with each floating tensor of another dtype than ``target`` cast to it
    (``arg`` is the call's own argument, walked alongside: same structure)."""
    if isinstance(arg, torch.Tensor):
        if not isinstance(encoded, Ref) or not arg.is_floating_point() or arg.dtype == target:
            return encoded
        value = tracer._new_value("Tensor", arg)
        value.dtype = DTYPE_NAMES[target]
        tracer._emit(CAST_OP, [encoded, target], outputs=[value], out_spec=pytree.LEAF, loc=loc)
        return Ref(value.id)
    if isinstance(arg, (list, tuple)) and isinstance(encoded, (list, tuple)):
        if len(arg) != len(encoded):
            return encoded
        items = [_cast(tracer, a, e, target, loc) for a, e in zip(arg, encoded)]
        return items if isinstance(encoded, list) else tuple(items)
    if isinstance(arg, dict) and isinstance(encoded, dict):
        return {k: _cast(tracer, arg[k], e, target, loc) for k, e in encoded.items()}
    return encoded
