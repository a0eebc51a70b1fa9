"""``math`` functions applied to traced numbers: recorded as scalar ops, or guarded.

Note: why every function of ``math`` is replaced while tracing.
  ``math`` reads a float's double (and an int's value) in C, without asking the object: a
  traced number from ``.item()`` given to ``math.cos`` was a constant of the trace, with no
  guard (a cosine noise schedule on a 0-dim timestep served every timestep the traced one's
  value; check_trace cannot see it, as a 0-dim input has no size to grow). So while a trace
  runs, each function of ``math`` that reads numbers is replaced (trace/patches.py), and a
  call with a traced number among its arguments is

  - recorded, where an op computes it exactly as ``math`` does: ``sqrt``, ``log``,
    ``exp``, ``sin``, ``atan2``, ... (``scalar.*``, op-set 9 for the float functions);
    ``math.log(a, b)`` as ``log(a) / log(b)`` (math's own formula), ``degrees`` and
    ``radians`` as the product with math's constant, ``fabs`` as ``abs(a) * 1.0``;
    ``isnan`` / ``isinf`` / ``isfinite`` as the comparisons that answer them
    (``a != a``; ``a - a != 0``), guarded as a branch on them is;
  - guarded otherwise: each traced argument's value is fixed where the call is made
    (``math.pow``, ``isclose``, ``modf``, ``gamma``, ``comb``, ``fsum`` ...), so that a call
    with another value raises GuardError naming the line. A correct, specialised trace.

  ``math.prod`` is left alone: it multiplies with ``*``, which a traced number records.
  ``cmath``'s functions guard every traced number they read.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..ir import ops as opset
from .numbers import _Traced

if TYPE_CHECKING:
    from .tracer import Tracer

# Recorded as the scalar op of the same name (with this many arguments).
_RECORDED = {
    **dict.fromkeys(("sqrt", "log", "log2", "log10", "exp", "ceil", "floor", "trunc"), 1),
    **dict.fromkeys(opset.MATH_FLOAT_UNARY, 1),
    **dict.fromkeys(opset.MATH_FLOAT_BINARY, 2),
}
# Functions whose arguments are iterables of numbers (read in C, item by item).
_ITERABLES = frozenset({"fsum", "dist", "sumprod"})
# Functions of math that do not read numbers, or read them through Python's operators.
_UNTOUCHED = frozenset({"prod"})


def names(module=math) -> list[str]:
    """The functions of ``math`` (or ``cmath``) replaced while tracing."""
    return sorted(
        n
        for n, f in vars(module).items()
        if callable(f) and not n.startswith("_") and n not in _UNTOUCHED
    )


def call(tracer: Tracer, name: str, original, args: tuple, kwargs: dict):
    """``math.<name>(*args, **kwargs)`` while tracing (the module Note)."""
    if kwargs:  # isclose(a, b, rel_tol=...): guarded, keywords and all
        plain = {k: _guarded(tracer, name, v) for k, v in kwargs.items()}
        return original(*_fixed(tracer, name, args), **plain)
    if name in _ITERABLES:
        args = tuple(list(a) for a in args)  # a generator is read once, here
        return original(*(_fixed(tracer, name, a) for a in args))
    if not any(isinstance(a, _Traced) for a in args):
        return original(*args)
    if _RECORDED.get(name) == len(args):
        return tracer.scalar_op(name, args)
    recorded = _DERIVED.get(name)
    if recorded is not None and len(args) == recorded[0]:
        return recorded[1](tracer, *args)
    return original(*_fixed(tracer, name, args))


def guarded_call(tracer: Tracer, name: str, original, args: tuple, kwargs: dict):
    """``cmath.<name>(...)`` while tracing: no op computes complex numbers, so each traced
    number it reads is guarded to its value (``cmath.sqrt(t.item())``)."""
    plain = {k: _guarded(tracer, name, v) for k, v in kwargs.items()}
    return original(*_fixed(tracer, name, args), **plain)


def _fixed(tracer: Tracer, name: str, values):
    """``values`` with each traced number guarded to its value and given as it."""
    return [_guarded(tracer, name, v) for v in values]


def _guarded(tracer: Tracer, name: str, value):
    if not isinstance(value, _Traced):
        return value
    kind = type(value._concrete()).__name__
    label = name if "." in name else f"math.{name}"
    return tracer.specialize(value, kind, reason=f"read by {label}")


def _log_base(tracer: Tracer, value, base):
    # math.log(a, b) is log(a) / log(b) in CPython (mathmodule.c, math_log_impl).
    return tracer.scalar_op(
        "truediv", (tracer.scalar_op("log", (value,)), tracer.scalar_op("log", (base,)))
    )


def _scaled(factor: float):
    # degrees/radians: CPython multiplies the double by this very constant.
    return lambda tracer, value: tracer.scalar_op("mul", (value, factor))


def _fabs(tracer: Tracer, value):
    return tracer.scalar_op("mul", (tracer.scalar_op("abs", (value,)), 1.0))


def _isnan(tracer: Tracer, value) -> bool:
    return tracer.scalar_compare("ne", value, value)


def _isfinite(tracer: Tracer, value) -> bool:
    # a - a is 0 for every finite number, NaN for an infinity and for NaN.
    return tracer.scalar_compare("eq", tracer.scalar_op("sub", (value, value)), 0)


def _isinf(tracer: Tracer, value) -> bool:
    return not _isfinite(tracer, value) and not _isnan(tracer, value)


_DERIVED = {  # name -> (number of arguments, how it is recorded)
    "log": (2, _log_base),
    "degrees": (1, _scaled(180.0 / math.pi)),
    "radians": (1, _scaled(math.pi / 180.0)),
    "fabs": (1, _fabs),
    "isnan": (1, _isnan),
    "isfinite": (1, _isfinite),
    "isinf": (1, _isinf),
}
