"""A refused call of a traced module whose state changed shape since the trace: the
refusal says so, naming the state.

Note: why. A traced module reads its parameters and buffers from the module as they are
at each call (a state tensor replaced, by ``load_state_dict(assign=True)`` or by code,
is followed: docs/divergence.md). Code that rebuilds a buffer lazily (timm's ConViT:
``if self.rel_indices.shape[1] != N: self.rel_indices = self.get_rel_indices(N)``) was
traced with the buffer as it was, and the trace guards the decision the buffer's shape
made; one eager call of the model afterwards rebuilds the buffer, and every later call of
the trace is refused -- rightly, but with advice about the call's inputs, which are not
the cause. The refusal names each state tensor the graph reads whose shape is not the
traced one, and what to do. (A saved and loaded copy holds the state it was traced with.)
"""

from __future__ import annotations

import torch

from ..errors import GuardError
from ..ir import Graph


def _shape(tensor: torch.Tensor) -> str:
    return f"{str(tensor.dtype).removeprefix('torch.')}[{', '.join(map(str, tensor.shape))}]"


def reshaped(graph: Graph, traced: dict, slots: dict) -> list[str]:
    """``kind 'name' (then -> now)`` for each state tensor ``graph`` reads whose shape or
    dtype now (``slots``: name -> (table, key)) is not the one it was traced with
    (``traced``: name -> StateEntry)."""
    names = {n.args[0] for n in graph.nodes if n.op == "prim.state" and n.args}
    found = []
    for name in sorted(n for n in names if isinstance(n, str)):
        entry, slot = traced.get(name), slots.get(name)
        if entry is None or slot is None or not isinstance(entry.tensor, torch.Tensor):
            continue
        table, key = slot
        now = table.get(key) if isinstance(table, dict) else None
        if not isinstance(now, torch.Tensor):
            continue
        then = entry.tensor
        if now.shape != then.shape or now.dtype != then.dtype:
            found.append(f"{entry.kind} {name!r} ({_shape(then)} when traced, {_shape(now)} now)")
    return found


def explained(exc: GuardError, graph: Graph, traced: dict, slots: dict) -> GuardError | None:
    """``exc`` told with the state that changed since the trace, or None where none did."""
    changed = reshaped(graph, traced, slots)
    if not changed:
        return None
    head = str(exc).split("\n  this call takes another path")[0]
    message = (
        f"{head}\n  the module's state changed since the trace: {'; '.join(changed[:3])}"
        f"{f' and {len(changed) - 3} more' if len(changed) > 3 else ''}. Code run since (an "
        "eager call of the model that rebuilt a table it builds lazily) changed it, and "
        "the trace reads the state as it is now, so the decision it made on the old state "
        "no longer holds: the call's inputs are not the cause. Put the state back as it "
        "was traced, or trace again from the model as it is now (a saved and loaded copy "
        "keeps the state it was traced with)"
    )
    return GuardError(message, guard=exc.guard, location=exc.location, seen=exc.seen)
