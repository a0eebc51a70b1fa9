"""Check that a module's second call agrees with its trace: state that Python code keeps.

Why: the checks run the code from the state the user gave (``capture.preserved`` puts
everything back after each run), so a forward that changes a Python attribute of its
module -- a call counter, a lazily computed scale (``if not self.initialized: ...``), a
value kept for the next call -- looks right in every check, while every later eager
call differs from the trace, which holds the values of the traced call. (In-place writes
to buffers are recorded and repeated by the trace: they are not this.) Where the first
eager call changes such an attribute, the code and the trace are each called twice from
the same state (the second time with the example's values moved: a scale the first call
computed from its data then differs) and the second results must agree; where they do
not, the trace is refused, naming the attributes.
"""

from __future__ import annotations

import torch

from ..errors import GuardError
from ..trace import memo_tables, python_state
from ..trace.capture import preserved
from .compare import compare_outputs, fresh, rolled

_PLAIN = (bool, int, float, complex, str, bytes, type(None))
_MISSING = object()


def _same(a, b) -> bool:
    if a is b:
        return True
    if isinstance(a, _PLAIN) and type(a) is type(b):
        return a == b or (a != a and b != b)  # NaN kept as NaN
    if isinstance(a, tuple) and type(a) is type(b) and len(a) == len(b):
        return all(_same(x, y) for x, y in zip(a, b))
    return False


def _snapshot(module: torch.nn.Module) -> list[tuple[str, torch.nn.Module, dict, dict]]:
    """Each module's attributes, with the contents of its containers (lists, dicts of any
    kind, sets, deques, numpy arrays) as they are now (a call that appends to
    ``self.seen`` keeps the same list object)."""
    kinds = python_state.container_kinds()
    return [
        (
            name,
            mod,
            dict(vars(mod)),
            {
                k: kept
                for k, v in vars(mod).items()
                if isinstance(v, kinds) and (kept := python_state.kept_contents(v)) is not None
            },
        )
        for name, mod in module.named_modules()
    ]


def _changed(snapshot) -> list[str]:
    """``path.attribute`` of every plain attribute a call set to another value, and of every
    tensor attribute it set (tables of parameters, buffers and sub-modules left out:
    their writes are recorded)."""
    changed = []
    for name, mod, before, items in snapshot:
        for key, value in vars(mod).items():
            if key.startswith("_") and key in ("_parameters", "_buffers", "_modules"):
                continue
            if isinstance(value, torch.nn.Module):
                continue
            if isinstance(value, torch.Tensor):
                # A tensor set by the call (a lazily computed scale, a state kept for the
                # next call) is read by the next eager call, while the trace computes it
                # again; one the call left as it was (a cache) is traced where it is used.
                if before.get(key, _MISSING) is not value:
                    changed.append(f"{name}.{key}" if name else key)
                continue
            if (
                key not in before
                or not _same(before[key], value)
                or (key in items and python_state.contents_changed(value, items[key]))
            ):
                changed.append(f"{name}.{key}" if name else key)
    return changed


def buffers_of(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``path.name -> tensor`` of every buffer of the module tree, as it is now."""
    return {
        f"{path}.{key}" if path else key: tensor
        for path, mod in module.named_modules()
        for key, tensor in mod._buffers.items()
        if tensor is not None
    }


def check_repeated(eager_fn, traced_method, args, kwargs, tolerance, module, label) -> list[str]:
    """Raise :class:`TracingCheckError` where a call of the module changes a plain Python
    attribute and a second call of the code differs from a second call of the trace.
    Returns what the example's call changed of the module's state: those attributes, and
    the buffers it registered anew (check/state_growth.py goes on from there)."""
    if module is None:
        return []  # a function's globals are not put back: the other checks see them
    snapshot = _snapshot(module)
    buffers = buffers_of(module)
    # and the plain objects it holds, its classes' attributes (trace/python_state.py)
    reachable = python_state.Reachable(module)
    # The second call takes other values (the same shapes): state the first call computed
    # from its data (a lazily set scale) then differs from what the trace computes.
    second = rolled(args, kwargs) or (args, kwargs)
    with preserved(module):
        a, k = fresh(args, kwargs)
        eager_fn(*a, **k)
        changed = _changed(snapshot) + reachable.changed()
        # (a buffer registered anew: its writes are recorded, but what it was built for
        # may be kept, which state_growth.py checks)
        rebound = [name for name, t in buffers_of(module).items() if buffers.get(name) is not t]
        if not changed:
            return rebound
        # A memo the first call filled would hand the second call its first value, where
        # the trace computes it again: the second call misses too (trace/memo_tables.py).
        memo_filled = memo_tables.missed_next()
        a, k = fresh(*second)
        expected = eager_fn(*a, **k)
    hit = None
    if memo_filled:
        # ... and where the second call finds what the first stored, as eager's does: a
        # value the code changed after storing it (an accumulator by size written in
        # place, ``t = memo[n]; t.add_(1)``) then differs from what the trace computes.
        with preserved(module):
            for call_args in ((args, kwargs), second):
                a, k = fresh(*call_args)
                hit = eager_fn(*a, **k)
    try:
        with preserved(module):
            for call_args in ((args, kwargs), second):
                a, k = fresh(*call_args)
                got = traced_method(*a, **k)
    except GuardError:
        return changed + rebound  # the trace refuses the second call: no wrong answer
    names = ", ".join(changed[:5]) + (", ..." if len(changed) > 5 else "")
    hint = (
        f"\n  each call of the code changes Python attribute(s) of the module ({names}) "
        "that its results depend on; a trace holds the values of the traced call and "
        "cannot repeat such a change. Keep that state in a buffer updated in place with "
        "tensor operations (register_buffer; the trace records those writes), or pass it "
        "as an input"
    )
    if memo_filled:
        hint += (
            "; a memo the code fills by size hands later calls what the call that filled "
            "it computed, where the trace computes the value on every call: make the "
            "memo's value read only its key (not a counter, nor len() of the memo)"
        )
    compare_outputs(expected, got, tolerance, f"{label}, called a second time", hint)
    if hit is not None:
        hint += (
            "; the code changes a value its memo holds after storing it (written in place: "
            "an accumulator by size), so a later call that finds it gets the changed value "
            "where the trace computes it afresh: change a copy (`.clone()`), or keep the "
            "running value in a buffer"
        )
        label = f"{label}, called a second time (finding what the first call stored)"
        compare_outputs(hit, got, tolerance, label, hint)
    return changed + rebound
