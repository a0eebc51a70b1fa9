"""Compute each value once: a node that repeats an earlier one reads the earlier result.

Note: common subexpressions, as ``torch.jit`` eliminates them.
  Traced code repeats itself where the source does: BigBird slices the same block of keys
  in three places (``key[:, :, 0]``), builds the same ``new_ones`` mask twice per layer and
  computes ``seq_len // block`` a dozen times; a pooling model takes the same ``x[:, :1]``
  in each block. Each repeat is a Python call of the generated code. :func:`eliminate`
  keeps the first of two nodes that run the same op on the same arguments (literals equal
  and of the same type, values the same after earlier eliminations) and has every reader
  of the second read the first's results instead.

  Two such nodes give the same results only if nothing changes between them, so a node
  is a candidate only when:

  * its op is pure: not random, not in place, no guard, no state read, no grad-mode read
    or switch, no custom autograd function, nothing :data:`dead_code.EFFECTS` lists, no op
    the set does not know;
  * no tensor it reads, and no tensor its results may share memory with, is ever written in
    place in the graph (through any view: the alias groups of runtime/dead_code.py, where
    an op that may return a view of any of its tensors, ``einsum`` included, joins them);
    where the graph may write an input or state, every input and state value is one group
    (the caller may pass them sharing memory: runtime/caller_memory.py);
  * its results are not returned by the graph (a caller would get one tensor twice where
    the trace returned two).

  A switch of grad mode between two nodes makes them differ (one tracks gradients), so
  the nodes seen before a ``set_grad_enabled`` are never matched after it. The results
  are bit for bit those of the full graph: the same kernel on the same inputs, once.

  The generated code eliminates only in the function for calls without autograd, in graphs
  that never turn autograd on (:func:`grad_stays_off`; runtime/codegen.py): under
  autograd, a node read twice sums its two gradients before it passes them on, where two
  nodes pass each on and the sum comes later -- the same gradient, not the same bits.
"""

from __future__ import annotations

import dataclasses

import torch

from ..ir import Graph, Node, Ref, refs_in
from ..ir import ops as opset
from ..ir.analysis import output_ids
from ..ir.program import fold_literal, map_literal
from . import caller_memory
from .dead_code import ALIASING, EFFECTS

# Structural ops whose results are not a function of their arguments' values at that point
# alone (a read of the caller's grad mode or of state) or that decide.
_NOT_PURE = opset.DYNAMIC_READS | frozenset(
    "prim.guard prim.state prim.autograd_function set_grad_enabled".split()
)
# Ops that may return a view of any of their tensor arguments, not only the first.
_MAY_VIEW_ANY = caller_memory.MAY_VIEW_ANY


def grad_stays_off(graph: Graph) -> bool:
    """Whether a call without autograd stays without it through ``graph``: every grad-mode
    switch turns it off or puts back a mode read in the graph (``torch.no_grad()`` around a
    rotary embedding records both), never turns it on."""
    modes = {v.id for n in graph.nodes if n.op == "prim.grad_enabled" for v in n.outputs}
    for node in graph.nodes:
        if node.op == "set_grad_enabled":
            mode = node.args[0] if len(node.args) == 1 and not node.kwargs else True
            if mode is not False and not (isinstance(mode, Ref) and mode.id in modes):
                return False
    return True


def _pure(node: Node) -> bool:
    if node.op in _NOT_PURE or node.op in EFFECTS or not node.outputs:
        return False
    if node.kwargs.get("requires_grad", False) is not False:
        return False  # a new leaf of autograd each time
    info = opset.info(node.op)
    return info is not None and not (info.flags & {"random", "inplace"} or opset.draws_random(node))


class _Groups:
    """Union-find over value ids: values that may share memory are in one group."""

    def __init__(self):
        self.parent: dict[int, int] = {}

    def find(self, value_id: int) -> int:
        root = value_id
        while self.parent.get(root, root) != root:
            root = self.parent[root]
        while self.parent.get(value_id, value_id) != root:  # shorten the path
            self.parent[value_id], value_id = root, self.parent[value_id]
        return root

    def join(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[ra] = rb


# In-place ops that change a tensor's sizes and strides, never an element: the tensor they
# are given is another value after them, but nothing that shares its memory changes.
_RESHAPED_IN_PLACE = caller_memory.RESHAPED_IN_PLACE


def _written_groups(graph: Graph) -> tuple[_Groups, set[int]]:
    """The alias groups of ``graph``'s values and the roots of those written in place, a
    reshape in place counted as a write (for the passes that ask only this)."""
    groups, written, reshaped = _aliases(graph)
    return groups, written | {groups.find(v) for v in reshaped}


def _aliases(graph: Graph) -> tuple[_Groups, set[int], set[int]]:
    """The alias groups of ``graph``'s values, the roots of those written in place, and the
    ids of tensors reshaped in place (``x.unsqueeze_(1)``: ``x`` and the op's result, the
    same object with other sizes; BigBird widens its mask so, and counting that as a write
    of everything the mask shares memory with kept its conversions, ``1 - mask`` and the
    products of every layer from :func:`eliminate`)."""
    groups = _Groups()
    writes: list[int] = []
    reshaped: set[int] = set()
    for node in graph.nodes:
        refs = refs_in((node.args, node.kwargs))
        first = node.args[0] if node.args else None
        info = opset.info(node.op)
        if node.op in _MAY_VIEW_ANY or info is None:
            shared = refs
        elif isinstance(first, Ref) and (node.op in ALIASING or opset.is_inplace(node.op)):
            shared = [first]
        else:
            shared = []
        for value in node.outputs:
            for ref in shared:
                groups.join(value.id, ref.id)
        if node.op in _RESHAPED_IN_PLACE and isinstance(first, Ref):
            reshaped.add(first.id)
            reshaped.update(v.id for v in node.outputs)
        elif opset.is_inplace(node.op) and isinstance(first, Ref):
            writes.append(first.id)
        elif node.op == "prim.size_checks":
            continue  # reads sizes and types only (runtime/size_checks.py)
        elif node.op in EFFECTS or node.op == "prim.autograd_function" or info is None:
            writes.extend(r.id for r in refs)  # running statistics, max_norm, unknown
    _join_outside(graph, groups, reshaped)
    return groups, {groups.find(v) for v in writes}, reshaped


def _join_outside(graph: Graph, groups: _Groups, reshaped: set[int]) -> None:
    """Put every input and state value in one alias group where the graph may write any of
    them (runtime/caller_memory.py): the caller may pass them sharing memory (``f(z, z)``,
    overlapping views, a view of a parameter), so a read of any before the write is not a
    read after it. Graphs that write no input and no state keep their groups and all their
    repeats. A reshape in place of one reshapes the others where they are the same tensor
    object (``f(z, z)``): all of them are counted reshaped."""
    outside = caller_memory.outside_ids(graph)
    if any(v in reshaped for v in outside):
        reshaped.update(outside)
    if not caller_memory.writers(graph):
        return
    for value_id in outside[1:]:
        groups.join(value_id, outside[0])


def _key(obj):
    """A hashable form of a node's arguments: literals by type and value, refs by id."""

    def leaf(x):
        if isinstance(x, Ref):
            return ("ref", x.id)
        return (type(x).__name__, repr(x))

    def container(obj, children):
        return (type(obj).__name__, tuple(children))

    return fold_literal(obj, leaf, container)


def eliminate(graph: Graph) -> Graph:
    """``graph`` with every repeated pure node left out and its readers reading the first
    (the module Note); ``graph`` itself when nothing repeats."""
    groups, written, reshaped = _aliases(graph)
    returned = {groups.find(v) for v in output_ids(graph)}
    same: dict[int, int] = {}  # value id of a left-out result -> the kept one's
    seen: dict[tuple, Node] = {}
    nodes: list[Node] = []

    def renamed(arg):
        return Ref(same[arg.id]) if isinstance(arg, Ref) and arg.id in same else arg

    for node in graph.nodes:
        if same and any(r.id in same for r in refs_in((node.args, node.kwargs))):
            # the node's own class kept (a check node, a matrix node: runtime/size_checks.py,
            # runtime/linear_2d.py), with its arguments renamed
            node = dataclasses.replace(
                node,
                args=map_literal(node.args, renamed),
                kwargs=map_literal(node.kwargs, renamed),
            )
        if node.op == "set_grad_enabled":
            seen.clear()
        if not _candidate(node, groups, written, returned, reshaped):
            nodes.append(node)
            continue
        key = (node.op, _key(node.args), _key(node.kwargs), node.out_spec and repr(node.out_spec))
        first = seen.get(key)
        if first is None or len(first.outputs) != len(node.outputs):
            seen.setdefault(key, node)
            nodes.append(node)
            continue
        for mine, kept in zip(node.outputs, first.outputs):
            same[mine.id] = kept.id
    # The graph's outputs read no left-out result: those of candidates are never returned.
    return graph.with_nodes(nodes) if same else graph


def guarded_dtypes(graph: Graph) -> Graph:
    """``graph`` with each read of a dtype value after a guard that fixes it (``guard v ==
    torch.float32``) reading the literal dtype instead; ``graph`` itself when none does.

    Note: why, and why it is the same.
      Traced code reads dtypes where the source does (``mask.to(hidden_states.dtype)`` in
      every layer of BigBird, ``x.to(q.dtype)`` in attention), and each read is a value of
      its own, recorded with a guard that fixes it: two layers convert the same mask to
      ``v37`` and to ``v272``, which :func:`eliminate` cannot see to be one dtype, so the
      conversion and the whole mask built from it (``1 - mask``, ``new_ones``, products:
      22 nodes in BigBird's second layer) run again. torch.jit records dtypes as
      constants and merges them. Past its guard, ``v37`` *is* ``torch.float32`` (dtypes
      are singletons and the guard raises on any other), so a reader that comes after
      the guard gets the same object either way. Only in code that checks its guards
      (with guards off the guard does not run, and the value is what it is), and only
      for dtypes: an int a guard fixes may be another type equal to it (``3.0 == 3``),
      and a literal size skips the allocation bound that a value's size gets at the call.
    """
    kinds = {v.id: v.kind for n in graph.nodes for v in n.outputs}
    kinds.update({v.id: v.kind for v in graph.inputs})
    fixed: dict[int, torch.dtype] = {}
    nodes: list[Node] = []

    def literal(arg):
        return fixed[arg.id] if isinstance(arg, Ref) and arg.id in fixed else arg

    for node in graph.nodes:
        if fixed and any(r.id in fixed for r in refs_in((node.args, node.kwargs))):
            node = dataclasses.replace(
                node, args=map_literal(node.args, literal), kwargs=map_literal(node.kwargs, literal)
            )
        nodes.append(node)
        if node.op != "prim.guard" or len(node.args) != 1 or not isinstance(node.args[0], Ref):
            continue
        expect = node.kwargs.get("expect")
        if isinstance(expect, torch.dtype) and kinds.get(node.args[0].id) == "dtype":
            fixed[node.args[0].id] = expect
    return graph.with_nodes(nodes) if fixed else graph


def _candidate(
    node: Node, groups: _Groups, written: set[int], returned: set[int], reshaped: set[int]
) -> bool:
    if not _pure(node):
        return False
    if any(r.id in reshaped for r in refs_in((node.args, node.kwargs))):
        return False  # the same tensor with other sizes before and after the reshape
    if any(v.id in reshaped for v in node.outputs):
        return False  # made, then reshaped in place: a later equal node is not it
    touched = [groups.find(r.id) for r in refs_in((node.args, node.kwargs))]
    touched += [groups.find(v.id) for v in node.outputs]
    return not any(g in written for g in touched) and not any(
        groups.find(v.id) in returned for v in node.outputs
    )
