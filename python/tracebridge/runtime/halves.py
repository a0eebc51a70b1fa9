"""Two slices that cut one dimension in two, run as one ``split_with_sizes``.

Note: ``x[..., :h]`` and ``x[..., h:]`` cost two indexing calls.
  Rotary embeddings (Llama, Qwen2, Mistral, Gemma, ...) rotate half of each query and key
  in every layer: ``rotate_half`` slices ``x[..., : x.shape[-1] // 2]`` and
  ``x[..., x.shape[-1] // 2 :]``. Each ``Tensor.__getitem__`` parses its index tuple
  (about 1.65 us on torch 2.13, one thread); ``torch.split_with_sizes(x, [h, n - h], -1)``
  makes both views in one call (1.6 us for the two). Both give views of ``x`` with the
  same sizes, strides and storage offsets (a slice is a ``narrow``, and so is each piece of
  a split). The generated code writes such a pair, at the first of the two nodes, as
  ``a, b = split_with_sizes(x, [h, x.shape[d] - h], d) if _plain and type(x) is Tensor
  else (x[..., :h], x[..., h:])``, where:
  * ``h`` is one value, ``x.shape[d] // k`` for a literal ``k >= 1`` (so ``0 <= h <= n``:
    the two pieces cover the dimension exactly, as the slices do, on every shape);
  * the index is ``(..., slice)`` or full slices ``:`` before the slice, which then cuts
    dimension ``d`` (the rank is fixed by the input checks), with no step;
  * neither node is folded, memoised or run by a tree of views, and no node between
    them writes in place (an in-place op, a ``setitem``), which could change ``x``'s
    shape before the second slice (``x`` and ``h`` themselves are defined before both);
  * only in the function for calls without autograd whose graph never turns gradients on
    (``CodeGen.no_autograd``): two slices' gradients are summed into zeros, where
    ``-0.0 + 0.0`` is ``+0.0``, while a split's backward concatenates them (``-0.0``);
  * only a plain ``torch.Tensor`` outside modes and autocast (``_plain``,
    runtime/scalars.py): a subclass or a mode sees the two indexing calls it wrote.
  ``tests/python/test_halves.py`` holds both forms to the same values and views.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir import Graph, Node, Ref

_FULL = slice(None, None, None)


@dataclass(frozen=True)
class Halves:
    """Nodes ``low`` (``x[..., :h]``) and ``high`` (``x[..., h:]``) of one split."""

    low: int
    high: int
    tensor: Ref
    cut: Ref
    dim: int

    @property
    def first(self) -> int:
        return min(self.low, self.high)

    @property
    def second(self) -> int:
        return max(self.low, self.high)


def _sliced(node: Node, ranks: dict[int, int]) -> tuple[Ref, int, slice] | None:
    """``(x, dim, slice)`` for ``getitem(x, index)`` whose index cuts one dimension."""
    if node.op != "getitem" or node.kwargs or len(node.args) != 2 or len(node.outputs) != 1:
        return None
    tensor, index = node.args
    if not isinstance(tensor, Ref) or tensor.id not in ranks or not isinstance(index, tuple):
        return None
    if not index or not isinstance(index[-1], slice) or index[-1].step is not None:
        return None
    rank, lead = ranks[tensor.id], index[:-1]
    if lead == (Ellipsis,):
        dim = rank - 1
    elif all(type(p) is slice and p == _FULL for p in lead):
        dim = len(lead)
    else:
        return None
    return (tensor, dim, index[-1]) if 0 <= dim < rank else None


def _halving(cut: Ref, tensor: Ref, dim: int, makers: dict[int, Node], ranks) -> bool:
    """Whether ``cut`` is ``tensor.shape[dim] // k`` for a literal int ``k >= 1``."""
    node = makers.get(cut.id)
    if node is None or node.op != "scalar.floordiv" or node.kwargs or len(node.args) != 2:
        return False
    size, k = node.args
    if type(k) is not int or k < 1 or not isinstance(size, Ref):
        return False
    size_node = makers.get(size.id)
    if size_node is None or size_node.op != "prim.size" or len(size_node.args) != 2:
        return False
    of, d = size_node.args
    rank = ranks[tensor.id]
    return (
        isinstance(of, Ref)
        and of.id == tensor.id
        and type(d) is int
        and -rank <= d < rank
        and d % rank == dim
    )


def _writes(node: Node) -> bool:
    """Whether ``node`` may write a tensor in place (its shape or its values)."""
    name = node.op.rsplit(".", 1)[-1]
    return name.endswith("_") and not name.endswith("__") or "setitem" in node.op


def find(graph: Graph, skip) -> list[Halves]:
    """The pairs of ``graph``'s nodes that split one dimension in two; ``skip(index)``
    says whether a node runs elsewhere (folded, memoised, a tree of views)."""
    ranks = {v.id: len(v.shape) for v in graph.inputs if v.kind == "Tensor" and v.shape is not None}
    makers: dict[int, Node] = {}
    for node in graph.nodes:
        for out in node.outputs:
            makers[out.id] = node
            if out.kind == "Tensor" and out.shape is not None:
                ranks[out.id] = len(out.shape)
    lows: dict[tuple[int, int, int], int] = {}  # (x, dim, h) -> index of x[..., :h]
    highs: dict[tuple[int, int, int], int] = {}
    for index, node in enumerate(graph.nodes):
        found = None if skip(index) else _sliced(node, ranks)
        if found is None:
            continue
        tensor, dim, part = found
        if part.start is None and isinstance(part.stop, Ref):
            lows.setdefault((tensor.id, dim, part.stop.id), index)
        elif part.stop is None and isinstance(part.start, Ref):
            highs.setdefault((tensor.id, dim, part.start.id), index)
    pairs = []
    for key, low in lows.items():
        high = highs.get(key)
        if high is None:
            continue
        low_node = graph.nodes[low]
        tensor, dim, cut = low_node.args[0], key[1], low_node.args[1][-1].stop
        between = graph.nodes[min(low, high) + 1 : max(low, high)]
        if any(_writes(n) for n in between):
            continue
        if _halving(cut, tensor, dim, makers, ranks):
            pairs.append(Halves(low, high, tensor, cut, dim))
    return pairs
