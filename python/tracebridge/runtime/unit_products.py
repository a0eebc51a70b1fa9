"""Guards that a product of one tensor's sizes is not 1, skipped where one read decides.

Note: why. PyTorch's norms check in Python that each channel (group, instance) has more
than one value: ``F.batch_norm`` in training and ``F.group_norm`` always run
``_verify_batch_size(size)`` (``F.instance_norm``, ``_verify_spatial_size``), which
multiplies sizes and raises ``ValueError`` where the product is 1. The trace records those
reads, products and the guard: about ten statements before every such norm (0.5 us of a
3 us group norm at batch 1, where ``torch.jit`` runs one op). The guard must stay (a call
at one value per group is refused with eager's error), but whether it can fail is decided
by one read where the graph computes

    ``P == 1``, ``P`` a product (``scalar.mul``) of sizes of one tensor ``x``
    (``prim.size(x, d)``), of the literal 1 and of floor divisions of such products by a
    positive literal (``scalar.floordiv``: ``N * C // groups``), each size of ``x`` read
    at most once,

because sizes are never negative, so a product is 1 only where each factor is 1:

* where the product reads every dimension of ``x`` once, ``P == 1`` makes
  ``x.numel()`` at most the product of ``2 * g - 1`` over the floor divisions by ``g``
  (``a // g == 1`` means ``a < 2 * g``); a group norm over 32 groups can fail only for
  ``x.numel() <= 63``;
* otherwise (a batch norm reads no channel count), ``P == 1`` needs each size multiplied
  in directly to be 1: the last of them (a batch norm's width) decides.

:func:`plan` finds such guards, where the nodes computing the product stand together just
before the guard and nothing else reads their values, and the generated code runs them
(reads, products, the guard) only where that one test allows a failure:
``if x.numel() <= 63: <the nodes as recorded>``. Where they run, they are the recorded
nodes, so a refused call raises what it raised before (``ValueError`` with eager's words).
A product the test skips is one the recorded code would have computed to a number other
than 1; skipping it can only spare a refusal of the bounded multiplication of sizes
(runtime/codegen.py) on a tensor with an empty dimension, which eager does not make.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir import Graph, Ref, refs_in


@dataclass(frozen=True)
class UnitProduct:
    """Nodes ``first`` .. ``guard`` of a graph compute ``P == 1`` for ``tensor`` and guard it.

    ``bound``: where the product reads every dimension, the largest ``numel`` at which it
    can be 1 (test ``x.numel() <= bound``); else None and ``dim``: the size that must be 1
    (test ``x.shape[dim] == 1``)."""

    first: int
    guard: int
    tensor: int  # value id of x
    bound: int | None
    dim: int | None


def _single_ref(arg) -> int | None:
    return arg.id if isinstance(arg, Ref) else None


class _Product:
    """The sizes a product expression reads, and what ``== 1`` tells of them."""

    def __init__(self) -> None:
        self.tensor: int | None = None
        self.dims: list[int] = []  # as recorded (may be negative)
        self.direct: list[int] = []  # sizes multiplied in directly (not under a division)
        self.bound = 1  # product of (2 g - 1) over the divisions by g
        self.nodes: set[int] = set()  # indices of the nodes of the expression


def _walk(graph: Graph, producers: dict, value: int, out: _Product, divided: bool) -> bool:
    """Read the expression making ``value`` into ``out``; False where it is not one."""
    index = producers.get(value)
    if index is None:
        return False
    node = graph.nodes[index]
    out.nodes.add(index)
    if node.op == "prim.size":
        if len(node.args) != 2 or node.kwargs:
            return False
        tensor, dim = _single_ref(node.args[0]), node.args[1]
        if tensor is None or type(dim) is not int:
            return False
        if out.tensor is None:
            out.tensor = tensor
        if tensor != out.tensor:
            return False
        out.dims.append(dim)
        if not divided:
            out.direct.append(dim)
        return True
    if node.op == "scalar.mul" and len(node.args) == 2 and not node.kwargs:
        # a literal 1 multiplies in nothing (``_verify_spatial_size`` starts from 1)
        factors = [_single_ref(x) for x in node.args if not (type(x) is int and x == 1)]
        return bool(factors) and all(
            a is not None and _walk(graph, producers, a, out, divided) for a in factors
        )
    if node.op == "scalar.floordiv" and len(node.args) == 2 and not node.kwargs:
        a, g = _single_ref(node.args[0]), node.args[1]
        if divided or a is None or type(g) is not int or g < 1:
            return False  # one level: the dividend is a product of sizes alone
        out.bound *= 2 * g - 1
        return _walk(graph, producers, a, out, True)
    return False


def plan(graph: Graph) -> dict[int, UnitProduct]:
    """The guards of ``graph`` that :class:`UnitProduct` can skip, by their first node."""
    producers: dict[int, int] = {}
    readers: dict[int, list[int]] = {}
    for index, node in enumerate(graph.nodes):
        for value in node.outputs:
            producers[value.id] = index
        for ref in refs_in((node.args, node.kwargs)):
            readers.setdefault(ref.id, []).append(index)
    for ref in refs_in(graph.outputs):
        readers.setdefault(ref.id, []).append(len(graph.nodes))
    ranks = {v.id: len(v.shape) for v in graph.inputs if v.shape is not None}
    for node in graph.nodes:
        for value in node.outputs:
            if value.shape is not None:
                ranks[value.id] = len(value.shape)
    found: dict[int, UnitProduct] = {}
    for index, node in enumerate(graph.nodes):
        if node.op != "prim.guard" or node.kwargs.get("expect") is not False:
            continue
        test = _single_ref(node.args[0]) if len(node.args) == 1 else None
        at = producers.get(test) if test is not None else None
        if at is None or at != index - 1:
            continue
        eq = graph.nodes[at]
        if eq.op != "scalar.eq" or len(eq.args) != 2 or eq.kwargs:
            continue
        left, right = eq.args
        product = _single_ref(left) if right == 1 and type(right) is int else None
        if product is None:
            continue
        expr = _Product()
        if not _walk(graph, producers, product, expr, False) or expr.tensor is None:
            continue
        nodes = expr.nodes | {at}
        first = min(nodes)
        if nodes != set(range(first, index)):
            continue  # other nodes stand among them: left as recorded
        if any(
            r not in nodes and r != index
            for i in nodes
            for v in graph.nodes[i].outputs
            for r in readers.get(v.id, ())
        ):
            continue  # a value of the product is read elsewhere: it must be made
        rank = ranks.get(expr.tensor)
        if rank is None or any(not -rank <= d < rank for d in expr.dims):
            continue
        dims = [d % rank for d in expr.dims]
        if sorted(dims) == list(range(rank)):
            found[first] = UnitProduct(first, index, expr.tensor, expr.bound, None)
        elif expr.direct:
            last = max(d % rank for d in expr.direct)
            found[first] = UnitProduct(first, index, expr.tensor, None, last)
    return found
