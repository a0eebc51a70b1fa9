"""Which nodes may write memory the caller gives: an input, state, or a view of either.

Note: the caller decides what shares memory.
  Alias analysis inside a graph follows views from a value to its base, so two inputs, or
  an input and a buffer, look apart. At call time they need not be: ``f(z, z)``, two
  overlapping views of one tensor, an input that is a view of a parameter, a buffer passed
  as an input. A write into any of them (or into a view of one) may change all of them.
  The rewrites that run a read of an input or of state at another place than its own --
  once for two reads (runtime/cse.py), at the start of the call (runtime/folding.py), where
  its first reader stands (runtime/memo.py), where a batch norm stood (``fuse_conv_bn``) --
  must not move it across such a write. :func:`first_write` gives the first node that may
  do one; graphs that write no input and no state (a model in evaluation mode: the common
  case) have none, and keep every rewrite.
"""

from __future__ import annotations

from ..check.state_writes import VIEW_OPS, WRITTEN_ARGUMENTS
from ..ir import Graph, Node, Ref, refs_in
from ..ir import ops as opset

# Ops that may return a view of any of their tensor arguments, not only the first.
MAY_VIEW_ANY = frozenset({"einsum", "broadcast_tensors", "meshgrid", "prim.autograd_function"})
# Ops that change a tensor's sizes and strides in place, never an element.
RESHAPED_IN_PLACE = frozenset(
    "Tensor.unsqueeze_ Tensor.squeeze_ Tensor.t_ Tensor.transpose_".split()
)
# The flag under which an op of WRITTEN_ARGUMENTS writes them (its running statistics):
# with the literal False it writes nothing (a batch norm in evaluation mode).
_WRITES_WHEN = {
    "batch_norm": "training",
    "native_batch_norm": "training",
    "instance_norm": "use_input_stats",
}
# Ops outside the in-place set that write nothing (effects of another kind, or checks).
_NO_STORE = frozenset(
    {"prim.guard", "set_grad_enabled", "prim.size_checks", "embedding", "embedding_bag"}
)


def stores(node: Node) -> list[Ref]:
    """The tensors ``node`` may write elements of: the first argument of an op in place,
    the running statistics of a norm in training (:data:`WRITTEN_ARGUMENTS`), every
    tensor of an op the set does not know or of a custom autograd function. ``embedding``
    writes nothing (a ``max_norm`` is its own ``embedding_renorm_``)."""
    first = node.args[0] if node.args else None
    if node.op in RESHAPED_IN_PLACE or node.op in _NO_STORE:
        return []
    info = opset.info(node.op)
    if info is None or node.op == "prim.autograd_function":
        return list(refs_in((node.args, node.kwargs)))
    if opset.is_inplace(node.op):
        return [first] if isinstance(first, Ref) else []
    if node.op not in WRITTEN_ARGUMENTS:
        return []
    if _argument(node, info.arg_names, _WRITES_WHEN.get(node.op, "")) is False:
        return []
    written = [_argument(node, info.arg_names, name) for name in WRITTEN_ARGUMENTS[node.op]]
    return [r for r in written if isinstance(r, Ref)]


def _argument(node: Node, arg_names: tuple, name: str):
    """The argument ``name`` of ``node``, by keyword or by position (None where absent)."""
    if name in node.kwargs:
        return node.kwargs[name]
    for position, names in enumerate(arg_names):
        if name in names and position < len(node.args):
            return node.args[position]
    return None


def outside_ids(graph: Graph) -> list[int]:
    """The values whose memory the caller gives: the inputs and each read of state."""
    ids = [v.id for v in graph.inputs]
    ids += [n.outputs[0].id for n in graph.nodes if n.op == "prim.state" and n.outputs]
    return ids


def writers(graph: Graph) -> list[int]:
    """Indices of the nodes of ``graph`` that may write an input, state, or anything that
    may share memory with one (a view of it, the result of a write into it), in order."""
    outside = set(outside_ids(graph))
    found = []
    for index, node in enumerate(graph.nodes):
        if any(r.id in outside for r in stores(node)):
            found.append(index)
        refs = refs_in((node.args, node.kwargs))
        first = node.args[0] if node.args else None
        if node.op in MAY_VIEW_ANY or opset.info(node.op) is None:
            shares = any(r.id in outside for r in refs)
        elif node.op in VIEW_OPS or opset.is_inplace(node.op):
            shares = any(r.id in outside for r in refs_in(first))
        else:
            shares = False
        if shares:
            outside.update(v.id for v in node.outputs)
    return found


def unversioned_state(graph: Graph) -> set[int]:
    """The reads of state (``prim.state`` values) that a node of ``graph`` may write
    without moving their version: the running statistics a norm in training writes
    (:data:`WRITTEN_ARGUMENTS`: ATen's kernel writes them below autograd), through a view
    too, and whatever a custom autograd function is passed (its graph may hold such a
    norm). A value kept across calls from one of them, keyed on its version, would outlive
    the write (runtime/folding.py and runtime/memo.py keep none)."""
    roots: dict[int, frozenset[int]] = {
        n.outputs[0].id: frozenset({n.outputs[0].id})
        for n in graph.nodes
        if n.op == "prim.state" and n.outputs
    }
    found: set[int] = set()
    for node in graph.nodes:
        if node.op in WRITTEN_ARGUMENTS or node.op == "prim.autograd_function":
            for ref in stores(node):
                found |= roots.get(ref.id, frozenset())
        refs = refs_in((node.args, node.kwargs))
        first = node.args[0] if node.args else None
        if node.op in MAY_VIEW_ANY or opset.info(node.op) is None:
            shared = frozenset().union(*(roots.get(r.id, frozenset()) for r in refs))
        elif node.op in VIEW_OPS or opset.is_inplace(node.op):
            shared = frozenset().union(*(roots.get(r.id, frozenset()) for r in refs_in(first)))
        else:
            continue
        if shared:
            roots.update((v.id, shared) for v in node.outputs)
    return found


def first_write(graph: Graph) -> int:
    """The index of the first node of ``graph`` that may write memory the caller gives
    (:func:`writers`); ``len(graph.nodes)`` where none does."""
    found = writers(graph)
    return found[0] if found else len(graph.nodes)
