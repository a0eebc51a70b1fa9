"""A linear over a matrix runs as the ``addmm`` (or ``mm``) it calls, its weight transposed once.

Note: what ``linear`` does with a matrix, without its dispatch.
  For a 2-D input, ATen's ``linear`` is ``addmm(bias, x, weight.t())`` (``mm(x,
  weight.t())`` without a bias; aten/src/ATen/native/Linear.cpp), so the two give the
  same bits. Called from Python, ``addmm`` with the transposed weight at hand costs about
  0.5 µs less than ``linear`` (2.7 against 3.25 µs, torch 2.13, one thread): no
  ``weight.t()`` view made on every call, one op less to dispatch. Classifier heads, poolers,
  a mixture of experts' router and experts read matrices.

  :func:`rewrite` turns such a linear -- in the graph for calls without autograd
  (``Method._fused_graph``), its weight a matrix read from state, its input traced with
  two dimensions -- into ``wt = t(weight)``, a static value that runtime/folding.py
  computes once per state version, and a :class:`MatrixNode` (``addmm(bias, x, wt)`` or
  ``mm(x, wt)``). The generated code calls it where the input is a plain tensor with two
  dimensions and the weight and bias are plain (a subclass may define linear itself), in
  a call without a torch function mode or autocast, and ``linear(x, t(wt), bias)``
  otherwise (``t(wt)`` is the weight itself, same storage and strides):
  any other input gets ``linear``'s own result or error. Where the transposes would not be
  folded (a graph that returns a weight), nothing is rewritten; nor where the graph folds
  nothing else and has fewer than :data:`ALONE` such linears (a fold's own call, about
  1 µs, would cost what they save: a ViT's head). Under autograd the weight's
  transpose would be made on every call (folding does not cache what requires grad), so
  the graph with autograd keeps its linears.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from ..ir import Graph, Node, Ref, pytree
from ..ir.program import Value
from . import folding

ALONE = 3  # linears worth a fold of their own (a graph that folds nothing else)


@dataclass
class MatrixNode(Node):
    """An ``addmm(bias, x, wt)`` or ``mm(x, wt)`` that stands for ``linear(x, weight,
    bias)`` with ``wt = weight.t()`` folded. Its refs are its arguments only, so a pass
    that renames them (runtime/cse.py) renames everything the code reads."""

    @property
    def input(self) -> Ref:
        return self.args[1] if self.op == "addmm" else self.args[0]

    @property
    def transposed(self) -> Ref:
        return self.args[-1]

    @property
    def bias(self) -> Ref | None:
        return self.args[0] if self.op == "addmm" else None


def _parts(node: Node, state: set[int], ranks: dict[int, int]):
    """``(x, weight, bias)`` of a linear this module rewrites, or None."""
    if node.op != "linear" or len(node.outputs) != 1 or set(node.kwargs) - {"bias"}:
        return None
    if len(node.args) not in (2, 3) or (len(node.args) == 3 and "bias" in node.kwargs):
        return None
    x, weight = node.args[:2]
    bias = node.args[2] if len(node.args) == 3 else node.kwargs.get("bias")
    if not isinstance(x, Ref) or ranks.get(x.id) != 2:
        return None
    if not isinstance(weight, Ref) or weight.id not in state or ranks.get(weight.id) != 2:
        return None  # a vector weight is matmul's mv, not mm
    if bias is not None and not (isinstance(bias, Ref) and bias.id in state):
        return None
    return x, weight, bias


def rewrite(graph: Graph) -> Graph:
    """``graph``, or a copy where each linear over a matrix with a weight read from state
    runs as a :class:`MatrixNode` over its folded transpose (module Note)."""
    state = {v.id for n in graph.nodes if n.op == "prim.state" for v in n.outputs}
    values = {v.id: v for v in graph.inputs}
    values.update({v.id: v for n in graph.nodes for v in n.outputs})
    ranks = {i: len(v.shape) for i, v in values.items() if v.shape is not None}
    found = {i: p for i, n in enumerate(graph.nodes) if (p := _parts(n, state, ranks))}
    if not found:
        return graph
    ids = itertools.count(1 + max(values))
    nodes: list[Node] = []
    for index, node in enumerate(graph.nodes):
        if index not in found:
            nodes.append(node)
            continue
        x, weight, bias = found[index]
        shape = values[weight.id].shape
        wt = Value(next(ids), "Tensor", values[weight.id].dtype, list(reversed(shape or [])))
        nodes.append(
            Node("t", [weight], {}, [wt], pytree.LEAF, node.loc)  # folded: once per version
        )
        transposed = Ref(wt.id)
        op, args = ("addmm", [bias, x, transposed]) if bias is not None else ("mm", [x, transposed])
        nodes.append(MatrixNode(op, args, {}, node.outputs, node.out_spec, node.loc))
    rewritten = graph.with_nodes(nodes)
    # Only where the transposes are folded: made on every call, they would cost what the
    # linears save (a graph that returns a weight, or writes into state, folds nothing).
    fold = folding.plan(rewritten, True, True)
    transposes = {i for i, n in enumerate(rewritten.nodes) if isinstance(n, MatrixNode)}
    transposes = {i - 1 for i in transposes}  # each MatrixNode's transpose stands before it
    if fold is None or not transposes <= set(fold.nodes):
        return graph
    # A fold of its own costs a call about what two linears save (a ViT's one head).
    if len(found) < ALONE and folding.plan(graph, True, True) is None:
        return graph
    return rewritten
