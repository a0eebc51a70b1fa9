"""Linears that read one input run as one linear over their weights concatenated.

Note: fewer ops per call, as ``torch.jit.optimize_for_inference``'s "concat linear" pass.
  Attention projects one input three times (``q_proj(x)``, ``k_proj(x)``, ``v_proj(x)``),
  a gated MLP twice (``gate_proj(x)``, ``up_proj(x)``), cross-attention twice (the
  encoder's states to keys and values). Each is a Python call of torch, its argument
  parsing, a GEMM and a new tensor. :func:`fuse` rewrites such a group, in the graph for
  calls without autograd, as::

      w = cat([w_q, w_k, w_v])      # folded: once per state version (runtime/folding.py)
      b = cat([b_q, b_k, b_v])      # likewise
      y = linear(x, w, b)           # where the first linear stood
      q, k, v = split_with_sizes(y, [n_q, n_k, n_v], -1)   # views of y

  and the view ops that split heads on each piece then collapse with the split into one
  ``as_strided`` per result (runtime/views.py): 1 linear and 3 views where there were 3
  linears and 6 views. The concatenated weights are static values, so the fold caches
  them keyed on the state tensors' identity, version and data pointer: ``load_state_dict``,
  ``.to()``, an optimizer's in-place step and ``p.data = w`` concatenate them again.

  A group is linears (no keywords but ``bias``) whose results a view op reads (the
  heads' ``view``: a piece no view reads would cost the split's call, about what the
  linear saved, as for a gated MLP's gate and up), that read the same input value, whose
  weights (and biases, all present or all absent) are state read directly, of one traced
  dtype and ``in_features``, with no write, grad-mode switch or custom function between
  the first and the last of them (a write could change the input, or a weight, in
  between). Each result is a piece of a wider buffer, not dense memory of its own, so a
  linear joins a group only where nothing can tell: its result and every value that may
  share its memory (:data:`_FOLLOWS`; ``contiguous`` copies a piece, so it ends the walk)
  are not returned, not written in place, not read for their strides or contiguity, not
  given to ``as_strided`` or a custom function; and ``Tensor.view`` reads only the
  linear's result itself, to split its last dimension: every leading size is the input's
  own (``x.size(i)``) or ``-1``, and the trailing ones are literals whose product is the
  traced width -- such a view is valid for any strides of the leading dimensions. Other
  ops compute the same values from a piece: elementwise ops lay out their results in the
  strides' order, which a piece shares with a dense result.

  Not exact in the last bit: one GEMM over the concatenated weights may sum in another
  order than three narrower ones (within the verify tolerance of eager; the same in a
  reloaded artifact as in the traced one, since both run this code). Weights converted
  to other dtypes after tracing: the concatenation refuses them as each linear would
  (:func:`concat_weights`). Under autocast the call runs as traced: the concatenation
  is then computed on every call (runtime/folding.py), a copy of every weight that cost
  five times the call it saved (autocast keeps each weight's cast for the region).

  A call of the rewritten code that raises runs again as traced (``Method``), where the
  graph has no effect that running twice would repeat; weights of other widths than
  traced (assigned after tracing: two changed by opposite amounts keep the split's sum)
  raise :class:`WeightsChanged` from the folded concatenation, before any op runs, and
  always run again as traced; so does a call under a torch function mode (:class:`AsTraced`),
  which would otherwise see one linear where eager calls three.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from ..ir import Graph, Node, Ref, pytree, refs_in
from ..ir import ops as opset
from ..ir.analysis import output_ids
from ..ir.program import Value
from . import folding
from .folding import _ALIASING
from .views import VIEW_OPS

# Ops whose result may share memory with (and so keep the strides of) their first
# argument: the walk from a linear's result follows them. ``contiguous`` copies a piece.
_FOLLOWS = (_ALIASING | VIEW_OPS) - {"Tensor.contiguous"}
# Readers that would see a piece's strides, or may fail on them.
_STRIDE_READERS = frozenset(
    """as_strided prim.stride prim.storage_offset prim.is_contiguous prim.is_contiguous_as
    view_as_complex view_as_real
    prim.autograd_function Tensor.view_as Tensor.unfold""".split()
)
# Structural reads that see only sizes, dtype or device.
_SHAPE_PRIMS = frozenset("prim.size prim.numel prim.dtype prim.device prim.len".split())
# Nodes no group may span: writes are found by the op table's flag.
_BARRIERS = frozenset({"set_grad_enabled", "prim.autograd_function"})
_autocast = torch._C._is_any_autocast_enabled
_function_modes = torch._C._len_torch_function_stack
_dispatch_modes = torch._C._len_torch_dispatch_stack


class AsTraced(RuntimeError):
    """A call the concatenated linears must not serve: raised by the folded concatenation,
    before any op of the call runs (it is computed first), so the call runs again as
    traced (``Method``). Under a torch function mode, which sees each call of the code
    (a mode may act on one projection's weight), the concatenation is computed on every
    call (runtime/folding.py) and raises this."""


class WeightsChanged(AsTraced):
    """The weights of a group no longer have the widths it was traced with: the split's
    literal sizes would hand each projection rows of another (two widths changed by
    opposite amounts keep the sum)."""


# Linears join a group only where their weights are small. The gain is one Python call
# of torch per linear saved (a few microseconds); at widths of 512 and more the GEMM is
# the cost, and one GEMM over the concatenated weights was measured slower than three
# narrower ones (width 768, 4 tokens, float32, one thread on a 2 MiB-L2 x86 CPU: 1.78 ms
# against 1.39 ms; /work/coord/review4/x_gemm_direct.py of this session's review).
SMALL_WEIGHT_ELEMENTS = 256 * 256


def concat_weights(
    tensors: list[torch.Tensor], dim: int = 0, rows: tuple[int, ...] | None = None
) -> torch.Tensor:
    """The weights (or biases) of a group, concatenated along their first dimension.

    Weights of different dtypes are refused, as the separate linears refuse them (every
    one reads the same input, of one dtype). ``rows``: the traced widths; a tensor of
    another raises :class:`WeightsChanged`. Under a torch function mode or autocast,
    :class:`AsTraced`: the call runs the code as traced (see the module Note).

    >>> concat_weights([torch.ones(2, 3), torch.zeros(1, 3)]).shape
    torch.Size([3, 3])
    """
    if _function_modes() or _dispatch_modes() or _autocast():
        raise AsTraced("linear: under a torch function or dispatch mode or autocast, run as traced")
    if rows is not None and [t.shape[0] if t.dim() else -1 for t in tensors] != list(rows):
        raise WeightsChanged(
            "linear: the projections of one input now have "
            f"{[tuple(t.shape) for t in tensors]} weights, traced with widths {list(rows)}"
        )
    first = tensors[0].dtype
    if any(t.dtype != first for t in tensors):
        kinds = ", ".join(str(t.dtype).replace("torch.", "") for t in tensors)
        raise RuntimeError(
            f"linear: the projections of one input have weights of dtypes {kinds}; "
            "mat1 and mat2 must have the same dtype (convert the model as a whole: "
            "model.to(dtype))"
        )
    return torch.cat(tensors, dim)


@dataclass
class ConcatNode(Node):
    """A ``cat`` node that :func:`fuse` made: the generated code runs it through
    :func:`concat_weights` with the traced widths ``rows`` (runtime/codegen.py,
    ``CodeGen.callable_for``)."""

    rows: tuple[int, ...] = ()


@dataclass
class _Linear:
    index: int
    node: Node
    input: int  # value id
    weight: int  # value id of a state read
    bias: int | None
    width: int  # out_features, as traced


def _linear(index: int, node: Node, state: dict[int, object]) -> _Linear | None:
    """The parts of a ``linear`` node whose weight (and bias) are state reads."""
    if node.op != "linear" or set(node.kwargs) - {"bias"} or len(node.outputs) != 1:
        return None
    if len(node.args) not in (2, 3) or (len(node.args) == 3 and "bias" in node.kwargs):
        return None
    x, weight = node.args[:2]
    bias = node.args[2] if len(node.args) == 3 else node.kwargs.get("bias")
    if not isinstance(x, Ref) or not isinstance(weight, Ref) or weight.id not in state:
        return None
    if bias is not None and not (isinstance(bias, Ref) and bias.id in state):
        return None
    w = state[weight.id]
    if w.kind != "Tensor" or not w.shape or len(w.shape) != 2:
        return None
    if not all(type(d) is int for d in w.shape):
        return None
    if bias is not None:
        b = state[bias.id]
        if b.kind != "Tensor" or b.shape != [w.shape[0]] or b.dtype != w.dtype:
            return None
    out = node.outputs[0]
    if out.kind != "Tensor" or out.dtype != w.dtype:
        return None
    return _Linear(index, node, x.id, weight.id, bias.id if bias is not None else None, w.shape[0])


class _Facts:
    """What :func:`fuse` reads of a graph."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.values = {v.id: v for v in graph.inputs}
        self.producer: dict[int, int] = {}
        self.readers: dict[int, list[int]] = {}
        self.state: dict[int, object] = {}
        for index, node in enumerate(graph.nodes):
            for value in node.outputs:
                self.values[value.id] = value
                self.producer[value.id] = index
                if node.op == "prim.state":
                    self.state[value.id] = value
            for ref in refs_in((node.args, node.kwargs)):
                readers = self.readers.setdefault(ref.id, [])
                if not readers or readers[-1] != index:
                    readers.append(index)
        self.returned = output_ids(graph)

    def size_of(self, ref, tensors: set[int], dim: int, rank: int) -> bool:
        """Whether ``ref`` is ``t.size(dim)`` (or ``t.shape[dim - rank]``) of one of
        ``tensors``."""
        if not isinstance(ref, Ref) or ref.id not in self.producer:
            return False
        node = self.graph.nodes[self.producer[ref.id]]
        if node.op != "prim.size" or node.kwargs or len(node.args) != 2:
            return False
        tensor, d = node.args
        return (
            isinstance(tensor, Ref)
            and tensor.id in tensors
            and type(d) is int
            and d in (dim, dim - rank)
        )


def _splits_last(facts: _Facts, node: Node, lin: _Linear) -> bool:
    """Whether ``node`` (a ``Tensor.view`` of ``lin``'s result) keeps every leading
    dimension and splits the last one only (see the module Note)."""
    sizes = node.args[1:]
    if len(sizes) == 1 and isinstance(sizes[0], (list, tuple)):
        sizes = list(sizes[0])
    if node.kwargs or not sizes:
        return False
    x = facts.values.get(lin.input)
    if x is None or x.kind != "Tensor" or x.shape is None:
        return False
    rank = len(x.shape)
    if rank <= 1:
        return True  # the result is one dimension of stride 1: a dense piece
    lead, trail = list(sizes[: rank - 1]), list(sizes[rank - 1 :])
    if len(lead) != rank - 1 or not trail:
        return False
    own = {lin.input, lin.node.outputs[0].id}
    free = [i for i, s in enumerate(lead) if not facts.size_of(s, own, i, rank)]
    if not free:
        # Every leading size is the input's: where the view is valid at all, the trailing
        # sizes multiply to the width, and split it.
        return all(
            type(s) is int or (isinstance(s, Ref) and facts.values[s.id].kind == "int")
            for s in trail
        )
    if len(free) > 1 or lead[free[0]] != -1 or type(lead[free[0]]) is not int:
        return False
    if any(type(s) is not int or s <= 0 for s in trail):
        return False
    product = 1
    for s in trail:
        product *= s
    # The -1 is the input's own size where the trailing sizes make the traced width (a
    # weight of another width later: the split refuses it, and the call runs as traced).
    return product == lin.width


def _piece_safe(facts: _Facts, lin: _Linear) -> bool:
    """Whether nothing can tell ``lin``'s result from a piece of a wider buffer."""
    graph = facts.graph
    start = lin.node.outputs[0].id
    seen, todo = {start}, [start]
    while todo:
        value = todo.pop()
        if value in facts.returned:
            return False
        for index in facts.readers.get(value, ()):
            node = graph.nodes[index]
            first = node.args[0] if node.args else None
            reads_first = isinstance(first, Ref) and first.id == value
            if opset.is_inplace(node.op) or "out" in node.kwargs:
                return False
            if node.op in _STRIDE_READERS:
                return False
            if node.op == "Tensor.view" and not (
                value == start and reads_first and _splits_last(facts, node, lin)
            ):
                return False
            if node.op.startswith("prim.") and node.op not in _SHAPE_PRIMS:
                return False
            if not node.op.startswith("prim.") and opset.info(node.op) is None:
                return False
            if reads_first and node.op in _FOLLOWS:
                for out in node.outputs:
                    if out.id not in seen:
                        seen.add(out.id)
                        todo.append(out.id)
    return True


def _viewed(facts: _Facts, lin: _Linear) -> bool:
    """Whether ``lin``'s result is read by a view op (the heads' ``view``): its piece
    then joins the split in one tree of views (runtime/views.py). A piece that only
    other ops read costs the split's call, about what the linear saved (a gated MLP's
    gate and up projections, measured on torch 2.13, one thread)."""
    readers = facts.readers.get(lin.node.outputs[0].id, ())
    return any(facts.graph.nodes[i].op in VIEW_OPS for i in readers)


def _writes(node: Node) -> bool:
    return node.op in _BARRIERS or opset.is_inplace(node.op) or "out" in node.kwargs


def groups(graph: Graph) -> list[list[_Linear]]:
    """The groups of linears :func:`fuse` runs as one (see the module Note), each in
    graph order, two or more."""
    facts = _Facts(graph)
    found: list[list[_Linear]] = []
    open_groups: dict[tuple, list[_Linear]] = {}
    for index, node in enumerate(graph.nodes):
        if _writes(node):
            for group in open_groups.values():
                if len(group) > 1:
                    found.append(group)
            open_groups.clear()  # nothing groups across a write or a mode switch
            continue
        lin = _linear(index, node, facts.state)
        if lin is None or not _viewed(facts, lin) or not _piece_safe(facts, lin):
            continue
        weight = facts.state[lin.weight]
        if weight.shape[0] * weight.shape[1] > SMALL_WEIGHT_ELEMENTS:
            continue  # its GEMM, not the call, is the cost: see SMALL_WEIGHT_ELEMENTS
        key = (lin.input, weight.dtype, weight.shape[1], lin.bias is None)
        open_groups.setdefault(key, []).append(lin)
    found.extend(g for g in open_groups.values() if len(g) > 1)
    return sorted(found, key=lambda g: g[0].index)


def fuse(graph: Graph) -> Graph:
    """``graph``, or a copy where each group of :func:`groups` runs as one linear over its
    concatenated weights, split into its results (the module Note)."""
    found = groups(graph)
    if not found:
        return graph
    facts = _Facts(graph)
    ids = itertools.count(
        1 + max([v.id for v in graph.inputs] + [v.id for n in graph.nodes for v in n.outputs])
    )
    before: dict[int, list[Node]] = {}  # index of a group's first linear -> what runs there
    gone: set[int] = set()
    for group in found:
        first = group[0]
        # The state reads of the later linears move up (they read nothing).
        parts = {v for lin in group for v in (lin.weight, lin.bias) if v is not None}
        moved = sorted(
            facts.producer[v]
            for v in parts
            if facts.producer[v] > first.index and facts.producer[v] not in gone
        )
        gone.update(moved, (lin.index for lin in group))
        made = [graph.nodes[i] for i in dict.fromkeys(moved)]
        weight = facts.values[first.weight]
        width = sum(lin.width for lin in group)
        w = Value(next(ids), "Tensor", weight.dtype, [width, weight.shape[1]])
        rows = tuple(lin.width for lin in group)
        made.append(_concat([lin.weight for lin in group], w, first.node.loc, rows))
        args = [Ref(first.input), Ref(w.id)]
        if first.bias is not None:
            b = Value(next(ids), "Tensor", weight.dtype, [width])
            made.append(_concat([lin.bias for lin in group], b, first.node.loc, rows))
            args.append(Ref(b.id))
        out = first.node.outputs[0]
        shape = [*out.shape[:-1], width] if out.shape else None
        wide = Value(next(ids), "Tensor", out.dtype, shape)
        made.append(Node("linear", args, {}, [wide], pytree.LEAF, first.node.loc))
        pieces = [lin.node.outputs[0] for lin in group]
        spec = {"t": "tuple", "c": [pytree.LEAF for _ in pieces]}
        split = [Ref(wide.id), [lin.width for lin in group], -1]
        made.append(Node("split_with_sizes", split, {}, pieces, spec, first.node.loc))
        before[first.index] = made
    nodes: list[Node] = []
    for index, node in enumerate(graph.nodes):
        nodes.extend(before.get(index, ()))
        if index not in gone:
            nodes.append(node)
    fused = graph.with_nodes(nodes)
    # Only where the concatenations are folded: computed on every call, they would cost
    # more than the linears they save (a graph that writes into state, say).
    fold = folding.plan(fused, True, True)
    concats = {i for i, n in enumerate(fused.nodes) if isinstance(n, ConcatNode)}
    if fold is None or not concats <= set(fold.nodes):
        return graph
    return fused


def _concat(ids: list[int], made: Value, loc, rows: tuple[int, ...]) -> Node:
    return ConcatNode("cat", [[Ref(i) for i in ids], 0], {}, [made], pytree.LEAF, loc, rows)


# Ops that change something a second run would change again: running statistics, a
# weight renormalised by ``max_norm``, a custom function's own effects.
_EFFECTS = frozenset("batch_norm native_batch_norm instance_norm embedding embedding_bag".split())


def concatenates(graph: Graph) -> bool:
    """Whether :func:`fuse` made ``graph`` run linears as one."""
    return any(isinstance(node, ConcatNode) for node in graph.nodes)


def rerunnable(graph: Graph) -> bool:
    """Whether a call of ``graph`` that raised part way may run again from the start with
    the same result as a first run: no write in place, no random op, no effect."""
    for node in graph.nodes:
        info = opset.info(node.op)
        if node.op in _EFFECTS or node.op == "prim.autograd_function" or "out" in node.kwargs:
            return False
        if info is not None and info.flags & {"random", "inplace"} or opset.draws_random(node):
            return False
    return True
