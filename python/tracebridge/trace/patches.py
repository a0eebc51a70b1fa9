"""Builtins that must see traced sizes: ``len``, ``range``, ``math.*``, ``torch.is_grad_enabled``.

The patches live behind one object, :data:`BUILTIN_PATCHES`, whose lifetime is the
``recording`` block: installed when the first thread starts tracing, removed when the
last one stops; the patched functions look for a tracer of their own thread, so other
threads see the originals' behaviour.
"""

from __future__ import annotations

import builtins
import contextlib
import math
import threading
from typing import TYPE_CHECKING

import torch

from ..source import called_from_user_code as _called_from_user_code
from .numbers import _Traced

if TYPE_CHECKING:  # the tracer imports this module
    from .tracer import Tracer

# --- builtins that need to see traced sizes ----------------------------------------------

_original_len = builtins.len
_original_range = builtins.range
_patch_lock = threading.Lock()
_patch_depth = 0  # how many threads are tracing: the builtins stay patched while any is


class _ActiveTracers(threading.local):
    def __init__(self):
        self.stack: list[Tracer] = []


_tracers = _ActiveTracers()  # per thread: another thread's len() is never recorded


def _traced_len(obj):
    active = _tracers.stack
    if active and isinstance(obj, torch.Tensor) and obj.dim() > 0:
        return active[-1].size_of(obj, 0)
    return _original_len(obj)


class _TracedRangeMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, _original_range)


class _traced_range(metaclass=_TracedRangeMeta):  # noqa: N801 - stands in for builtins.range
    """``range`` while tracing: a traced bound fixes the loop's length, so guard on it."""

    def __new__(cls, *args):
        active = _tracers.stack
        if active and any(isinstance(a, _Traced) for a in args):
            tracer = active[-1]
            plain = []
            for a in args:
                if isinstance(a, _Traced):
                    tracer.guard(
                        tracer.scalar_ref(a), a._concrete(), a._desc, "loop", tracer.location()
                    )
                    tracer.warn(
                        f"a Python loop over the traced size {a._desc} is unrolled "
                        f"for {a._concrete()}; calls with another size raise GuardError"
                    )
                    plain.append(a._concrete())
                else:
                    plain.append(a)
            return _original_range(*plain)
        return _original_range(*args)


# math functions read an int's value in C without a hook: while tracing, the ones code
# applies to sizes (math.sqrt(head_dim), math.log2(n)) record a scalar op instead.
_MATH_OPS = ("sqrt", "log", "log2", "log10", "exp", "ceil", "floor", "trunc")
_original_math = {name: getattr(math, name) for name in _MATH_OPS}
_original_is_grad_enabled = torch.is_grad_enabled


def _traced_math(name: str):
    original = _original_math[name]

    def traced(*args):
        active = _tracers.stack
        if active and any(isinstance(a, _Traced) for a in args):
            return active[-1].scalar_op(name, args)
        return original(*args)

    traced.__name__ = name
    traced.__doc__ = original.__doc__
    return traced


def _traced_is_grad_enabled() -> bool:
    """``torch.is_grad_enabled()`` in the user's code is a decision: guard on it."""
    mode = _original_is_grad_enabled()
    active = _tracers.stack
    if active and _called_from_user_code():
        tracer = active[-1]
        loc = tracer.location()
        ref = tracer._value_node("prim.grad_enabled", "bool", loc=loc)
        tracer.guard(ref, mode, "torch.is_grad_enabled()", "branch", loc)
    return mode


_TRACED_MATH = {name: _traced_math(name) for name in _MATH_OPS}


def _patch(on: bool) -> None:
    builtins.len = _traced_len if on else _original_len
    builtins.range = _traced_range if on else _original_range
    for name in _MATH_OPS:
        setattr(math, name, _TRACED_MATH[name] if on else _original_math[name])
    torch.is_grad_enabled = _traced_is_grad_enabled if on else _original_is_grad_enabled


@contextlib.contextmanager
def recording(tracer: Tracer):
    """Activate ``tracer`` in this thread: its mode, and the traced ``len``, ``range``,
    ``math.*`` and ``torch.is_grad_enabled`` (per thread: other threads see the originals'
    behaviour, as the patched functions look for a tracer of their own thread)."""
    global _patch_depth
    _tracers.stack.append(tracer)
    with _patch_lock:
        _patch_depth += 1
        _patch(True)
    try:
        with tracer.mode:
            yield
    finally:
        _tracers.stack.pop()
        with _patch_lock:
            _patch_depth -= 1
            if _patch_depth == 0:
                _patch(False)
