"""How ``example_inputs`` and ``check_inputs`` stand for a call, by torch.jit's rules.

Note: the rules are torch.jit.trace's (torch/jit/_trace.py, ``_trace_impl``, ``make_tuple``
and ``_check_trace``, torch 2.13), so that code written for it runs with only the import
changed:

* a tensor or a dict is the one positional argument (``trace(f, {"a": t})`` calls
  ``f({"a": t})``); a tuple is the positional arguments; any other iterable (a list, a
  generator) is made a tuple;
* where the trace has keyword examples (``example_kwarg_inputs``, or trace_module's
  ``example_inputs_is_kwarg=True``), a dict is the keyword arguments instead, and anything
  else is read as above;
* ``check_inputs`` of ``trace`` is a list with one example per check, each read as the
  example is; that of ``trace_module`` a list of dicts, method name -> example.

Two departures, both refusals or additions, never another reading: ``None`` is no
argument (for a function without parameters; torch.jit fails on it), and a string or an
array (numpy's) is refused with what to pass, where torch.jit would split it into
characters or rows and fail further on.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from ..errors import TraceError


def as_args(example_inputs) -> tuple:
    """The positional arguments that ``example_inputs`` stands for (module Note).

    >>> as_args({"a": 1}), as_args([1, 2])
    (({'a': 1},), (1, 2))
    """
    if example_inputs is None:
        return ()
    if isinstance(example_inputs, (torch.Tensor, dict)):
        return (example_inputs,)
    if isinstance(example_inputs, tuple):
        return example_inputs
    if hasattr(example_inputs, "__array__"):
        raise TraceError(
            f"example_inputs must be a tensor, a dict, or a tuple or list of inputs, not "
            f"{type(example_inputs).__name__} (an array: pass torch.from_numpy(a), or a "
            "tuple of inputs)"
        )
    if isinstance(example_inputs, (str, bytes)) or not isinstance(example_inputs, Iterable):
        raise TraceError(
            f"example_inputs must be a tensor, a dict, or a tuple or list of inputs, not "
            f"{type(example_inputs).__name__}: to trace with one such input v, pass (v,)"
        )
    return tuple(example_inputs)


def as_call(example, keywords: bool) -> tuple[tuple, dict]:
    """``(args, kwargs)`` of one example: with ``keywords`` (the trace has keyword
    examples), a dict is the keyword arguments; otherwise as :func:`as_args`."""
    if keywords and isinstance(example, dict):
        return (), dict(example)
    return as_args(example), {}


def function_checks(check_inputs, keywords: bool) -> list[tuple[tuple, dict]] | None:
    """The calls of ``trace``'s ``check_inputs``, one per entry (None: none given)."""
    if check_inputs is None:
        return None
    return [as_call(entry, keywords) for entry in check_inputs]


def module_checks(check_inputs, methods, keywords: bool, per_method: bool) -> list | None:
    """The calls of the ``check_inputs`` of a module's trace: a list of dicts, method name
    -> ``(args, kwargs)``. ``per_method``: each entry is a dict by method name (as
    ``trace_module`` takes them; an entry that is not a dict serves every method);
    otherwise each entry is the example of ``forward`` (as ``trace`` takes them)."""
    if check_inputs is None:
        return None
    if not per_method:
        return [{"forward": as_call(entry, keywords)} for entry in check_inputs]
    checks = []
    for index, entry in enumerate(check_inputs):
        if not isinstance(entry, dict):
            checks.append({name: as_call(entry, keywords) for name in methods})
            continue
        missing = [name for name in methods if name not in entry]
        if missing:
            raise TraceError(
                f"check_inputs[{index}] has no inputs for method {missing[0]!r}: each entry "
                "of trace_module's check_inputs is a dict of method name -> inputs, with "
                f"the methods traced ({', '.join(methods)})"
            )
        checks.append({name: as_call(entry[name], keywords) for name in methods})
    return checks
