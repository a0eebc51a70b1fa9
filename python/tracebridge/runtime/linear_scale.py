"""A linear whose output is scaled per feature by a value of the state runs scaled weights.

Note: why, and where not.
  Layer scale (CaiT, DeiT III, DINOv2, ConvNeXt in Hugging Face's form) multiplies each
  residual branch by a learned vector after the branch's last linear:
  ``gamma * linear(x, W, b)``, often through an evaluation-mode dropout. The product is
  ``linear(x, W * gamma[:, None], b * gamma)``: the new weights depend on state alone, so
  runtime/folding.py computes them once (kept while the state is the same), and the call
  runs one op where it ran two, the second a pass over the whole activation (deit3 small:
  24 such products a call). ``torch.jit.freeze`` does the same for convolutions
  (``FoldFrozenConvMulOrDiv``), not for linears. Results agree with eager to rounding, as
  a batch norm folded into its convolution does (folding.fuse_conv_bn), so not where the
  product reaches a decision (folding.values_that_decide).

  The scale is taken as a vector of the weight's output features
  (``broadcast_to(gamma, [W.size(0)])``): one that does not broadcast to that (state
  replaced since the trace by a tensor of another shape) raises there. Only where the
  trace saw a scale of at most one dimension, of the product's dtype: then the product
  has the linear's shape and dtype, as eager's does.
"""

from __future__ import annotations

from ..ir import Graph, Node, Ref, pytree, refs_in
from ..ir.analysis import output_ids
from ..ir.program import Value
from . import caller_memory
from .folding import static_ids, values_that_decide

_DROPOUTS = frozenset({"dropout", "alpha_dropout", "feature_dropout"})


def _eval_dropout(node: Node) -> bool:
    """A dropout recorded in evaluation mode (``train`` the literal False): the identity."""
    if node.op not in _DROPOUTS or not node.args or len(node.outputs) != 1:
        return False
    train = node.args[2] if len(node.args) > 2 else node.kwargs.get("train")
    return train is False and set(node.kwargs) <= {"train", "p"}


def _plain_linear(node: Node, state: set[int]) -> bool:
    """``linear(x, W)`` or ``linear(x, W, b)`` with W (and b) read from state."""
    if node.op != "linear" or node.kwargs or len(node.args) not in (2, 3):
        return False
    params = [a for a in node.args[1:] if a is not None]
    return all(isinstance(p, Ref) and p.id in state for p in params)


def _same_dtype(a: Value | None, b: Value | None) -> bool:
    return a is not None and b is not None and a.dtype is not None and a.dtype == b.dtype


def _linear_behind(graph: Graph, ref, producers, readers, returned, state) -> list[int] | None:
    """The indices of the plain linear that ``ref`` is the output of, through evaluation
    dropouts, and of those dropouts (the linear first); None unless each of these values
    is read by the next alone and none is returned."""
    chain: list[int] = []
    while isinstance(ref, Ref):
        at = producers.get(ref.id)
        if at is None or ref.id in returned or len(readers.get(ref.id, [])) != 1:
            return None
        node = graph.nodes[at]
        chain.insert(0, at)
        if _plain_linear(node, state):
            return chain
        if not _eval_dropout(node):
            return None
        ref = node.args[0]
    return None


def fuse(graph: Graph) -> Graph:
    """``graph``, or a copy where each ``mul`` of a plain linear's output (through
    evaluation dropouts) by a static value (:func:`folding.static_ids`) of at most one
    dimension and the product's dtype runs as one linear of scaled weights (module Note)."""
    muls = [i for i, n in enumerate(graph.nodes) if n.op == "mul" and not n.kwargs]
    if not muls:
        return graph
    producers = {v.id: i for i, n in enumerate(graph.nodes) for v in n.outputs}
    values = {v.id: v for n in graph.nodes for v in n.outputs}
    state = {v.id for n in graph.nodes if n.op == "prim.state" for v in n.outputs}
    readers: dict[int, list[int]] = {}
    for index, node in enumerate(graph.nodes):
        for ref in refs_in((node.args, node.kwargs)):
            readers.setdefault(ref.id, []).append(index)
    returned = output_ids(graph)
    static = static_ids(graph)
    fused: dict[int, tuple[list[int], Ref]] = {}  # mul's index -> (linear chain, scale)
    for index in muls:
        node = graph.nodes[index]
        if len(node.args) != 2 or not all(isinstance(a, Ref) for a in node.args):
            continue
        for branch, scale in (node.args, node.args[::-1]):
            chain = _linear_behind(graph, branch, producers, readers, returned, state)
            if chain is None or scale.id not in static:
                continue
            gamma, product = values.get(scale.id), node.outputs[0]
            if gamma is None or gamma.shape is None or len(gamma.shape) > 1:
                continue
            if not _same_dtype(gamma, product) or not _same_dtype(values.get(branch.id), product):
                continue
            if any(caller_memory.stores(graph.nodes[i]) for i in range(chain[0] + 1, index)):
                continue  # the linear would read its input after a write it came before
            fused[index] = (chain, scale)
            break
    if fused:
        decide = values_that_decide(graph)
        fused = {i: f for i, f in fused.items() if graph.nodes[i].outputs[0].id not in decide}
    if not fused:
        return graph
    removed = {i for chain, _ in fused.values() for i in chain}
    next_id = 1 + max([v.id for v in graph.inputs] + [v.id for n in graph.nodes for v in n.outputs])
    nodes: list[Node] = []
    for index, node in enumerate(graph.nodes):
        if index in removed:
            continue  # the linear runs where its product stood
        if index not in fused:
            nodes.append(node)
            continue
        chain, scale = fused[index]
        linear = graph.nodes[chain[0]]
        made: list[Node] = []

        def emit(op, *args, kind="Tensor", _made=made):
            nonlocal next_id
            value = Value(id=next_id, kind=kind)
            next_id += 1
            _made.append(Node(op=op, args=list(args), outputs=[value], out_spec=pytree.LEAF))
            return Ref(value.id)

        weight, bias = linear.args[1], linear.args[2] if len(linear.args) > 2 else None
        features = emit("prim.size", weight, 0, kind="int")
        vector = emit("broadcast_to", scale, [features])
        weight = emit("mul", weight, emit("Tensor.reshape", vector, [-1, 1]))
        if bias is not None:
            bias = emit("mul", bias, vector)
        for extra in made:
            extra.loc = linear.loc
        nodes.extend(made)
        args = [linear.args[0], weight] + ([bias] if bias is not None else [])
        nodes.append(
            Node(op="linear", args=args, outputs=node.outputs, out_spec=node.out_spec, loc=node.loc)
        )
    return graph.with_nodes(nodes)
