"""Leave out the nodes whose results nothing needs, as ``torch.jit`` does.

Note: dead code, writes included.
  A traced model often computes more than it returns: Hugging Face's BigBird assembles a
  full attention-probability matrix in every layer (a ``zeros``, sixteen slice writes,
  four ``scatter_`` and the views that feed them) that the layer above drops unless
  ``output_attentions`` is asked for; a helper returns a tuple and the caller keeps one
  element. The trace records all of it, because it runs all of it. :func:`prune` keeps a
  node only if something needs it:

  * it returns a value the graph returns, or one that a kept node reads;
  * it has an effect outside its results: a guard, a random op (the generator's state
    moves), a grad-mode switch, a custom autograd function, an op that updates its
    arguments without saying so in its name (``batch_norm``'s running statistics,
    ``embedding``'s ``max_norm``), or an op the set does not know;
  * it writes in place into a tensor that may be seen: an input, state, a value the
    graph returns or a kept node reads -- or any view of one of these.

  A write is left out only when the tensor it writes was made by the graph itself (a
  factory, ``clone``, ``cat``: :data:`FRESH`), and neither that tensor nor any view of it
  (:data:`ALIASING` ops, and the results of writes, which are their first argument) is
  returned or read by a kept node. So a kept node sees every write it saw before, and
  the results are bit for bit those of the full graph. A left-out op does not run: an
  error it would raise for some shape is not raised (the results are the same), and it
  allocates nothing.
"""

from __future__ import annotations

from ..ir import Graph, Node, Ref, refs_in
from ..ir import ops as opset
from ..ir.analysis import output_ids
from ..ir.ops import VARIADIC_OUTPUTS
from .folding import _ALIASING
from .views import VIEW_OPS

# Nodes kept whatever reads them: they decide, switch a mode or update what they are given.
EFFECTS = frozenset(
    """prim.guard prim.autograd_function set_grad_enabled batch_norm native_batch_norm
    instance_norm embedding embedding_bag""".split()
)
# Ops whose tensor result is new memory, never a view of an argument: a write into it (or
# a view of it) that nothing reads after can be left out.
FRESH = frozenset(
    """zeros ones full empty zeros_like ones_like full_like empty_like Tensor.new_zeros
    Tensor.new_ones Tensor.new_full Tensor.new_empty arange eye clone cat concat
    concatenate stack""".split()
)
# Ops whose results may share memory with their first argument.
ALIASING = _ALIASING | VIEW_OPS


def counts_results(node: Node) -> bool:
    """Whether ``node`` gives a number of results that its call decides (``unbind``,
    ``split``, iterating a tensor): the trace assumed the count it saw, a guard that the
    runtimes check (``_check_count``) whether or not any result is read."""
    spec = node.out_spec
    return node.op in VARIADIC_OUTPUTS and spec is not None and spec.get("t") in ("tuple", "list")


def has_effect(node: Node) -> bool:
    """Whether ``node`` must run whatever reads its results (the module Note's second
    point): a guard, a random op, a mode switch, an op that may write its arguments, an
    op whose count of results is assumed (:func:`counts_results`: a loop over an empty
    batch leaves a node with no results, which only its count makes matter)."""
    if node.op in EFFECTS or counts_results(node):
        return True
    info = opset.info(node.op)
    return info is None or "random" in info.flags or opset.draws_random(node)


def _groups(graph: Graph) -> tuple[dict[int, int], set[int]]:
    """``value id -> id of the tensor whose memory it may share`` (the group's root) for
    the results of views and writes, and the roots made fresh by the graph (:data:`FRESH`)."""
    root: dict[int, int] = {}
    fresh: set[int] = set()
    for node in graph.nodes:
        first = node.args[0] if node.args else None
        shares = isinstance(first, Ref) and (node.op in ALIASING or opset.is_inplace(node.op))
        for value in node.outputs:
            if shares:
                root[value.id] = root.get(first.id, first.id)
            elif node.op in FRESH:
                fresh.add(value.id)
    return root, fresh


def needed(graph: Graph, roots=None) -> set[int]:
    """Indices of the nodes of ``graph`` that its outputs, guards and effects need;
    ``roots(node)`` says which nodes run whatever reads them instead of
    :func:`has_effect` (runtime/size_checks.py leaves guards out)."""
    roots = roots or has_effect
    root, fresh = _groups(graph)
    live: set[int] = set()  # value ids a kept node reads or the graph returns
    seen: set[int] = set()  # roots of the groups with a live member

    def mark(value_id: int) -> None:
        live.add(value_id)
        seen.add(root.get(value_id, value_id))

    for value_id in output_ids(graph):
        mark(value_id)
    kept: set[int] = set()
    changed = True
    while changed:  # a read found later (earlier in the graph) may keep a write: again
        changed = False
        for index in range(len(graph.nodes) - 1, -1, -1):
            if index in kept:
                continue
            node = graph.nodes[index]
            if _keeps(node, live, seen, root, fresh, roots):
                kept.add(index)
                changed = True
                for ref in refs_in((node.args, node.kwargs)):
                    mark(ref.id)
    return kept


def _keeps(node: Node, live: set[int], seen: set[int], root: dict, fresh: set[int], roots) -> bool:
    if roots(node) or any(v.id in live for v in node.outputs):
        return True
    if not opset.is_inplace(node.op):
        return False
    first = node.args[0] if node.args else None
    if not isinstance(first, Ref):
        return True
    group = root.get(first.id, first.id)
    return group not in fresh or group in seen


def prune(graph: Graph) -> Graph:
    """``graph`` without the nodes nothing needs (the module Note); ``graph`` itself when
    every node is needed."""
    kept = needed(graph)
    if len(kept) == len(graph.nodes):
        return graph
    return graph.with_nodes([n for i, n in enumerate(graph.nodes) if i in kept])
