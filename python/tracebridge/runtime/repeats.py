"""Hugging Face's ``repeat_kv`` (index, expand, reshape) as one ``repeat_interleave``, in
calls without autograd.

Note: grouped-query attention repeats each key and value head ``n_rep`` times.
  Llama, Qwen2, Mistral and Gemma do it with ``x[:, :, None, :, :].expand(b, h, n_rep, s,
  d).reshape(b, h * n_rep, s, d)``: three calls (5.7 us on a small tensor, torch 2.13,
  one thread), where ``torch.repeat_interleave(x, n_rep, 1)`` makes the same tensor in one
  (3.7 us): ``out[:, i] = x[:, i // n_rep]`` either way, a new contiguous tensor. The
  reshape copies only where it cannot view the expanded tensor, and it views it when the
  merged dimensions need no copy: ``h`` is 1, ``x``'s head stride is 0, or the tensor is
  empty. So the generated code tests those, with the sizes the graph read already, and
  runs the three calls then:
  ``if _plain and type(x) is Tensor and h * n > n and b and s and d and x.stride(1): r =
  repeat_interleave(x, n, 1)``, else the three calls. Only where:
  * the index is ``(:, :, None, :, :)`` of a 4-dimensional ``x``, the expand's sizes are
    ``x``'s own sizes (read from ``x`` by the graph) with a literal int ``n >= 2`` in
    the new dimension, and the reshape's are ``x``'s with ``h * n`` (or ``n * h``) for
    the heads;
  * the index and expand results are read by the next node alone and not returned, and
    none of the three is folded, memoised or run by a tree of views;
  * the result asks for at most what the expand's size check (runtime/checked_ops.py)
    allows at the widest element (``b * h * n * s * d * 16 <= ALLOC_BYTES``), else the
    checked calls run and refuse as before;
  * only in the function for calls without autograd whose graph never turns gradients on
    (``CodeGen.no_autograd``): the gradients of an expand and of ``repeat_interleave``
    are summed in other orders.
  ``tests/python/test_repeats.py`` holds both forms to the same results.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir import Graph, Node, Ref, refs_in
from ..ir.analysis import output_ids

_FULL = slice(None, None, None)
_INDEX = (_FULL, _FULL, None, _FULL, _FULL)


@dataclass(frozen=True)
class Repeat:
    """Nodes ``index``, ``expand`` and ``reshape`` of one ``repeat_kv`` of ``tensor``."""

    index: int
    expand: int
    reshape: int
    tensor: Ref
    times: int
    sizes: tuple  # the reshape's sizes (b, h * n, s, d), values alive at the reshape


def _sizes(node: Node) -> list | None:
    if node.kwargs or len(node.args) < 2 or not isinstance(node.args[0], Ref):
        return None
    if len(node.args) == 2 and isinstance(node.args[1], (tuple, list)):
        return list(node.args[1])
    return list(node.args[1:])


def find(graph: Graph, skip) -> list[Repeat]:
    """The ``repeat_kv`` runs of ``graph``; ``skip(index)`` says whether a node runs
    elsewhere (folded, memoised, a tree of views)."""
    makers: dict[int, Node] = {}
    readers: dict[int, list[int]] = {}
    ranks: dict[int, int] = {v.id: len(v.shape) for v in graph.inputs if v.shape is not None}
    for index, node in enumerate(graph.nodes):
        for ref in refs_in((node.args, node.kwargs)):
            readers.setdefault(ref.id, []).append(index)
        for out in node.outputs:
            makers[out.id] = node
            if out.shape is not None:
                ranks[out.id] = len(out.shape)
    returned = set(output_ids(graph))

    def only_reader(value_id: int) -> int | None:
        reads = readers.get(value_id, [])
        return reads[0] if len(reads) == 1 and value_id not in returned else None

    def size_of(ref, tensor: Ref, dim: int) -> bool:
        node = makers.get(ref.id) if isinstance(ref, Ref) else None
        return (
            node is not None
            and node.op == "prim.size"
            and len(node.args) == 2
            and node.args[0] == tensor
            and node.args[1] in (dim, dim - 4)
        )

    def next_of(value_id: int, op: str, rank: int):
        """The one node reading ``value_id``, if it is ``op`` on it with ``rank`` sizes:
        (its index, its sizes), else None."""
        at = only_reader(value_id)
        node = graph.nodes[at] if at is not None else None
        if node is None or node.op != op or skip(at):
            return None
        sizes = _sizes(node)
        if sizes is None or len(sizes) != rank or node.args[0] != Ref(value_id):
            return None
        return at, sizes

    found = []
    for index, node in enumerate(graph.nodes):
        if node.op != "getitem" or skip(index) or len(node.args) != 2 or node.kwargs:
            continue
        tensor, key = node.args
        if not isinstance(tensor, Ref) or ranks.get(tensor.id) != 4 or key != _INDEX:
            continue
        if type(key) is not tuple or len(node.outputs) != 1:
            continue
        expanded = next_of(node.outputs[0].id, "Tensor.expand", 5)
        if expanded is None:
            continue
        at, (b, h, times, s, d) = expanded
        if type(times) is not int or times < 2:
            continue
        if not all(size_of(r, tensor, i) for r, i in ((b, 0), (h, 1), (s, 2), (d, 3))):
            continue
        reshaped = next_of(graph.nodes[at].outputs[0].id, "Tensor.reshape", 4)
        if reshaped is None:
            continue
        last, merged = reshaped
        if merged[0] != b or merged[2] != s or merged[3] != d or not isinstance(merged[1], Ref):
            continue
        product = makers.get(merged[1].id)
        if product is None or product.op != "scalar.mul" or product.kwargs:
            continue
        if list(product.args) not in ([h, times], [times, h]):
            continue
        found.append(Repeat(index, at, last, tensor, times, tuple(merged)))
    return found
