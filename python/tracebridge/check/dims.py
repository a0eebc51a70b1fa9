"""Check that a trace holds at other sizes of every input dimension, not only the batch.

Why: a traced size is a Python ``int`` subclass (trace/numbers.py), so arithmetic whose
left operand is a plain ``float`` -- ``-math.log(10000.0) / d_model``, ``0.5 * n``,
``2.0 + n`` -- runs in ``float``'s own C code, which reads the int's value and never asks
the traced number: the result is the example's float, baked into the graph with no guard.
Nothing in Python can intercept that operation, so the check finds what it made: the
code and the trace are run at another size of each dimension (one at a time), and where
the code accepts that size and the trace answers, they must agree. A dimension the trace
does not generalise over either refuses the call (a guard: fine) or is caught here and
refused at trace time, naming the node whose constant changed.

The batch dimension is verify.py's ``_check_perturbed`` (which also refuses a trace that
fails where the code runs); here a failing trace is left alone, as a failure is no
silently wrong answer.
"""

from __future__ import annotations

import torch

from ..errors import GuardError, TracingCheckError
from ..ir import Graph, pytree
from ..ir.pytree import is_tensor
from ..source import source_line
from ..trace.capture import preserved
from .compare import compare_outputs, fresh

MAX_GROUPS = 6  # dimensions tried per check: a model with many inputs is not run 50 times
_NOT_RUN = object()


def _groups(leaves: list[torch.Tensor]) -> list[list[tuple[int, int]]]:
    """(leaf, dim) groups to grow together: dimension ``d >= 1`` of every tensor whose
    size there equals the first one's (a sequence length that tokens, masks, queries and
    keys share grows in all of them at once, as the code expects)."""
    groups: list[list[tuple[int, int]]] = []
    seen: set[tuple[int, int]] = set()
    for i, t in enumerate(leaves):
        for d in range(1, t.dim()):
            if (i, d) in seen or t.shape[d] == 0:
                continue
            size = t.shape[d]
            group = [
                (j, d)
                for j, u in enumerate(leaves)
                if u.dim() > d and u.shape[d] == size and (j, d) not in seen
            ]
            seen.update(group)
            groups.append(group)
    return groups[:MAX_GROUPS]


def _grown(leaves: list[torch.Tensor], group: list[tuple[int, int]], by: int) -> list[torch.Tensor]:
    """The inputs with each (leaf, dim) of ``group`` ``by`` longer: its first slices
    repeated, so that values stay valid for the code (token ids in range, masks still
    masks)."""
    out = list(leaves)
    for i, d in group:
        t = leaves[i].detach()
        grown = torch.cat([t] * (1 + by // t.shape[d]) + [t.narrow(d, 0, by % t.shape[d])], d)
        out[i] = grown.requires_grad_(leaves[i].requires_grad and grown.is_floating_point())
    return out


def check_other_sizes(
    eager_fn, traced_method, reference: Graph, args, kwargs, tolerance, module, retrace
) -> None:
    """Run the code and the trace with each non-batch dimension grown by one; raise
    :class:`TracingCheckError` where both run and their outputs differ."""
    leaves, spec = pytree.flatten((args, kwargs), is_tensor)
    for group in _groups(leaves):
        i, d = group[0]
        size = leaves[i].shape[d]
        expected = _NOT_RUN
        # One longer first; where the code needs a multiple (heads, pairs of channels, a
        # patch size), twice as long, which keeps every divisor of the example's size.
        for by in (1, size) if size > 1 else (1,):
            new_args, new_kwargs = pytree.unflatten(_grown(leaves, group, by), spec)
            try:
                with preserved(module):
                    a, k = fresh(new_args, new_kwargs)
                    expected = eager_fn(*a, **k)
                break
            except Exception:
                continue  # the code does not take this size (channels, a fixed width)
        if expected is _NOT_RUN:
            continue
        try:
            with preserved(module):
                a, k = fresh(new_args, new_kwargs)
                got = traced_method(*a, **k)
        except GuardError:
            continue  # the trace refuses this size: no wrong answer
        except Exception:
            continue  # a failure is no silently wrong answer (see the module's note)
        label = f"with dimension {d} of input {i} grown from {size} to {size + by}"
        try:
            compare_outputs(expected, got, tolerance, label, "")
        except TracingCheckError as exc:
            raise TracingCheckError(
                _baked(reference, retrace, new_args, new_kwargs, str(exc))
            ) from None


def _baked(reference: Graph, retrace, args, kwargs, what: str) -> str:
    """The refusal, naming the first node whose literal differs at the other size."""
    message = f"the trace does not generalise to other sizes, though the code does: {what}"
    try:
        graph = retrace(*fresh(args, kwargs))
    except Exception:
        graph = None
    node = _first_changed_literal(reference, graph) if graph is not None else None
    if node is None:
        return (
            f"{message}\n  a Python number computed from a size (a float on the left of "
            "the operator, as in `2.0 / n`, or a size read through numpy or math.*) is kept "
            "as the example's value; pass check_trace=False if the model only supports "
            "these sizes"
        )
    where = f"{node.loc}: {source_line(node.loc)}".rstrip(": ") if node.loc else "?"
    return (
        f"{message}\n  node {node.op} at {where} holds a number computed from a size "
        "with the example's value: Python computes `float op size` (`2.0 / n`, `0.5 * n`, "
        "`1.0 - n`) without the traced size, so the trace keeps its result. Put the size "
        "first (`n ** -1 * 2.0`, `n * 0.5`), convert it first (`float(n)`), or use a tensor "
        "op; or pass check_trace=False if the model only supports these sizes"
    )


def _literals(obj) -> list:
    """The plain numbers among a node's arguments, in order (references left out)."""
    if isinstance(obj, (list, tuple)):
        return [x for item in obj for x in _literals(item)]
    if isinstance(obj, dict):
        return [x for key in sorted(obj) for x in _literals(obj[key])]
    if isinstance(obj, float) or (isinstance(obj, int) and not isinstance(obj, bool)):
        return [obj]
    return []


def _first_changed_literal(reference: Graph, other: Graph):
    """The first node of ``reference`` whose numeric literals differ from the same node of
    ``other`` (the same code traced at another size), where both graphs have the same ops."""
    if len(reference.nodes) != len(other.nodes):
        return None
    for a, b in zip(reference.nodes, other.nodes):
        if a.op != b.op:
            return None
        if _literals((a.args, a.kwargs)) != _literals((b.args, b.kwargs)):
            return a
    return None
