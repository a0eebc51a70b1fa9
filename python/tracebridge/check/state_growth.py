"""Check a module whose calls change its state on calls unlike the example: state kept
for the longest (or shortest, or largest-valued) input seen.

Why: a forward that keeps what it saw (``if n > self.cached: self.register_buffer("freq",
table(n)); self.cached = n``, as Hugging Face's dynamic-NTK rotary embedding does) gives a
later call what the longest call before it computed. The checks run every call from the
state the user gave, and check/repeated.py's second call has the example's sizes, which
grow nothing more: all agree, while a traced call after a longer one is silently wrong
(an outside prober: a Llama traced at length 24, called at 32 then 24, differed by 4e-4;
with explicit ``position_ids`` the key is their largest value). So where the example's
call changes the module's Python state (what check/repeated.py detects, and buffers
registered anew), the code and the trace are each run on another call and then on the
example, from the same state (:func:`_other_calls`: each dimension group twice and half
as long, each numeric input past its largest value), and must agree. A cache whose values
do not depend on its length (a cosine table sliced ``[:n]``) agrees and passes; one that
does is refused, naming the attributes. (torch.jit.trace is wrong here too.)
"""

from __future__ import annotations

import torch

from ..errors import GuardError
from ..ir import pytree
from ..ir.pytree import is_tensor
from ..trace.capture import preserved
from .compare import compare_outputs, fresh
from .dims import _groups, _grown


def _dim0_groups(leaves: list[torch.Tensor]) -> list[list[tuple[int, int]]]:
    """Dimension 0 of the tensors, grouped by its size (the batch, and a second input of
    its own length: a context, a memory), as check/dims.py groups the others."""
    groups: dict[int, list[tuple[int, int]]] = {}
    for i, t in enumerate(leaves):
        if t.dim() > 0 and t.shape[0] > 0:
            groups.setdefault(t.shape[0], []).append((i, 0))
    return list(groups.values())


def _other_calls(args, kwargs):
    """Calls unlike the example that a forward keeping state may remember: each dimension
    group twice as long and half as long (a table kept for the longest, or the shortest,
    input seen), and each numeric input shifted past its largest value (positions: a table
    kept for the largest position seen). Each as ``(what, (args, kwargs))``."""
    leaves, spec = pytree.flatten((args, kwargs), is_tensor)
    for group in _dim0_groups(leaves) + _groups(leaves):
        i, d = group[0]
        size = leaves[i].shape[d]
        yield (
            f"dimension {d} of input {i} {2 * size} long",
            pytree.unflatten(_grown(leaves, group, size), spec),
        )
        if size >= 2:
            shorter = list(leaves)
            for j, e in group:
                shorter[j] = leaves[j].detach().narrow(e, 0, size // 2)
            yield f"dimension {d} of input {i} {size // 2} long", pytree.unflatten(shorter, spec)
    for i, t in enumerate(leaves):
        if _counts(t):  # one at a time: token ids past the vocabulary would only raise
            shifted = list(leaves)
            with torch.no_grad():
                shifted[i] = t + (t.abs().max() + 1).to(t.dtype)  # positions, timestamps
            yield f"input {i} past its largest value", pytree.unflatten(shifted, spec)


def _counts(t: torch.Tensor) -> bool:
    """Whether ``t`` holds numbers a call may key kept state on (ints, floats)."""
    return not t.is_complex() and t.dtype is not torch.bool and t.numel() > 0


def _after(fn, first: tuple, then: tuple, module, rng: torch.Tensor):
    """``fn`` called on ``first``, then on ``then`` (what it gives), from the module's state
    and the random numbers ``rng``, all put back after."""
    with preserved(module):
        torch.set_rng_state(rng)
        a, k = fresh(*first)
        fn(*a, **k)
        torch.set_rng_state(rng)
        a, k = fresh(*then)
        return fn(*a, **k)


def check_after_longer(
    eager_fn, traced_method, args, kwargs, tolerance, module, label, changed: list[str]
) -> None:
    """Raise :class:`TracingCheckError` where the code, called on the example after a call
    unlike it, differs from the trace there. ``changed``: what the example's call changes
    of the module's state (check/repeated.py's ``check_repeated`` found it); where nothing,
    nothing is kept to differ by."""
    if module is None or not changed:
        return
    for what, other in _other_calls(args, kwargs):
        # Both run the same two calls from the same state and random numbers: the trace
        # repeats the writes it recorded (a buffer rebound each call, an average), and
        # where those are what the state holds, both agree.
        rng = torch.get_rng_state()
        try:
            expected = _after(eager_fn, other, (args, kwargs), module, rng)
        except Exception:
            continue  # the code does not take such a call (channels, a fixed width)
        try:
            got = _after(traced_method, other, (args, kwargs), module, rng)
        except GuardError:
            continue  # the trace refuses one of the calls: no wrong answer
        names = ", ".join(changed[:5]) + (", ..." if len(changed) > 5 else "")
        hint = (
            f"\n  the code keeps state that follows the inputs ({names}): after a call with "
            f"{what}, its call on the example gives other results, and a trace holds one "
            "call and never changes that state. Make the kept value depend only on what "
            "the call reads (slice a table made for the longest length you support), or "
            "pass it as an input"
        )
        compare_outputs(expected, got, tolerance, f"{label}, after a call with {what}", hint)
