"""Library helpers written for tracers, answered with traced numbers while tracebridge traces.

Note: transformers' ``torch_int`` and ``torch_float``.
  transformers converts sizes with ``torch_int(x)`` and ``torch_float(x)``: under
  torch.jit.trace, whose sizes are 0-dim tensors, they keep the value traced
  (``x.to(torch.int64)``); otherwise they return ``int(x)`` / ``float(x)``. CPython copies
  what ``__int__`` returns into a plain int, so for a traced number ``int()`` can only guard
  its value: DPT's ``torch_int(sequence_length ** 0.5)`` fixed the patch grid to the
  example's image size where torch.jit.trace stays general. While tracebridge traces, the
  two helpers give traced numbers instead: a ``SymInt`` as it is and a ``SymFloat``
  truncated (what ``int`` does) by a recorded scalar op; ``torch_float`` the converse.
  Every ``from ...utils import torch_int`` holds the same function object, so its code is
  swapped for the trace's duration (``patch``, with the builtins' patches); a thread that
  is not tracing, and an argument that is not a traced number, run the library's own code.
"""

from __future__ import annotations

import sys
import types

from .numbers import SymFloat, SymInt, _Traced

_TRANSFORMERS = "transformers.utils.generic"
_own_code: dict[str, types.FunctionType] = {}  # helper name -> the library's own function
_swapped: dict[types.FunctionType, types.CodeType] = {}  # library function -> its code


def active_tracer():
    """The tracer recording in this thread, or None."""
    from .patches import _tracers  # patches installs this module: import late

    stack = _tracers.stack
    return stack[-1] if stack else None


def traced_torch_int(x):
    """``torch_int`` while tracing: a traced number stays traced."""
    tracer = active_tracer()
    if tracer is not None and isinstance(x, _Traced):
        return x if isinstance(x, SymInt) else tracer.scalar_op("trunc", (x,))
    return _own_code["torch_int"](x)


def traced_torch_float(x):
    """``torch_float`` while tracing: a traced number stays traced."""
    tracer = active_tracer()
    if tracer is not None and isinstance(x, _Traced):
        return x if isinstance(x, SymFloat) else tracer.scalar_op("mul", (x, 1.0))
    return _own_code["torch_float"](x)


# The code the library's functions run while tracing: it runs with the library module's
# globals, so it imports what it calls.
def _torch_int_code(x):
    from tracebridge.trace.helpers import traced_torch_int

    return traced_torch_int(x)


def _torch_float_code(x):
    from tracebridge.trace.helpers import traced_torch_float

    return traced_torch_float(x)


_HELPERS = {"torch_int": _torch_int_code, "torch_float": _torch_float_code}


def patch(on: bool) -> None:
    """Swap the helpers' code in (``on``) or back; a library not imported is left alone."""
    module = sys.modules.get(_TRANSFORMERS)
    if on and module is None:
        return
    for name, replacement in _HELPERS.items():
        function = getattr(module, name, None) if module is not None else None
        if on:
            if not isinstance(function, types.FunctionType) or function in _swapped:
                continue
            code = function.__code__
            if code.co_freevars or code.co_argcount != 1:
                continue  # not the helper this module knows: leave it
            _own_code[name] = types.FunctionType(code, function.__globals__, name)
            _swapped[function] = code
            function.__code__ = replacement.__code__
    if not on:
        for function, code in list(_swapped.items()):
            function.__code__ = code
        _swapped.clear()
