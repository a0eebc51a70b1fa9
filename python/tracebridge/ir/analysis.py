"""Graph analyses, computed in one place: who defines and uses each value, and when a value
is last needed. Code generation (freeing values), partitioning (cut points) and shape
probing all read these instead of walking the graph themselves.
"""

from __future__ import annotations

from .program import Graph, Value, refs_in


def value_table(graph: Graph) -> dict[int, Value]:
    """``value id -> Value`` for every input and node output of ``graph``."""
    table = {value.id: value for value in graph.inputs}
    for node in graph.nodes:
        for value in node.outputs:
            table[value.id] = value
    return table


def definitions(graph: Graph) -> dict[int, int]:
    """``value id -> index of the node that defines it`` (-1 for graph inputs)."""
    where = {value.id: -1 for value in graph.inputs}
    for index, node in enumerate(graph.nodes):
        for value in node.outputs:
            where[value.id] = index
    return where


def uses(graph: Graph) -> dict[int, list[int]]:
    """``value id -> indices of the nodes that read it``, in order (outputs not counted)."""
    readers: dict[int, list[int]] = {}
    for index, node in enumerate(graph.nodes):
        for ref in refs_in((node.args, node.kwargs)):
            readers.setdefault(ref.id, [])
            if not readers[ref.id] or readers[ref.id][-1] != index:
                readers[ref.id].append(index)
    return readers


def state_reads(graph: Graph) -> dict[int, str]:
    """``value id -> state name`` for each value a ``prim.state`` node of ``graph`` reads."""
    return {
        n.outputs[0].id: n.args[0]
        for n in graph.nodes
        if n.op == "prim.state" and n.outputs and n.args and isinstance(n.args[0], str)
    }


def output_ids(graph: Graph) -> set[int]:
    """The ids of the values the graph returns."""
    return {ref.id for ref in refs_in(graph.outputs)}


def last_uses(graph: Graph) -> dict[int, list[int]]:
    """``node index -> values whose last use is that node`` (a value defined and never
    used dies at its own node). Returned values never die. As in eager code, a value's
    memory goes back to the allocator as soon as nothing needs it: without this, large
    batches keep every intermediate alive and run slower than eager."""
    last: dict[int, int] = {}
    for index, node in enumerate(graph.nodes):
        for value in node.outputs:
            last[value.id] = index
        for ref in refs_in((node.args, node.kwargs)):
            last[ref.id] = index
    for value in graph.inputs:
        last.setdefault(value.id, -1)
    kept = output_ids(graph)
    dead: dict[int, list[int]] = {}
    for value_id, index in last.items():
        if value_id not in kept and index >= 0:
            dead.setdefault(index, []).append(value_id)
    return dead


def needs_grad_off(graph: Graph) -> bool:
    """Whether ``graph`` guards that autograd is off (a module's fused path, traced without
    autograd: trace/library.py): it refuses every call made with autograd. Whether it is
    the fused graph kept beside one traced with autograd is :func:`fused_without_autograd`."""
    reads = {v.id for n in graph.nodes if n.op == "prim.grad_enabled" for v in n.outputs}
    return any(
        node.op == "prim.guard"
        and node.kwargs.get("expect") is False
        and any(ref.id in reads for ref in refs_in(node.args))
        for node in graph.nodes
    )


def fused_without_autograd(graph: Graph, first: Graph) -> bool:
    """Whether ``graph``, a specialisation of ``first``, is the graph a call without
    autograd records (api.py's ``_without_autograd``): it guards that autograd is off where
    ``first`` does not. A trace made without autograd guards it in every graph, its size-1
    specialisations included: those are specialisations for sizes, tried after ``first``."""
    return needs_grad_off(graph) and not needs_grad_off(first)
