"""``x.contiguous().reshape(...)`` as one reshape, in calls without autograd.

Note: ``contiguous`` then ``reshape`` copies once and costs two calls.
  Hugging Face attention merges heads with ``attn_output.transpose(1, 2).contiguous()``
  and then ``.reshape(b, s, -1)`` (or ``.view``) in every layer: ``contiguous`` copies the
  transposed tensor, ``reshape`` views the copy. ``reshape`` alone copies the very same
  elements into the same contiguous layout when it cannot view (``clone`` in the
  contiguous format, then a view), views ``x`` when ``x`` is contiguous (as
  ``contiguous`` returns ``x`` then), and views a non-contiguous ``x`` that it can view with
  strides that are then not contiguous either: the generated code copies that one with
  ``contiguous``. So it writes ``r = x.reshape(...)`` and
  ``r = r if r.is_contiguous() else r.contiguous()`` (about 0.5 us less, torch 2.13):
  the same values, sizes and strides, a copy where there was a copy. What differs is only
  which tensor is whose view (``_base``), so only where nothing can tell:
  * the ``contiguous`` (no memory format) result is read by that reshape or view alone and
    not returned;
  * no node writes in place into the result, ``x`` or any view of them, and none of them
    is returned (alias groups of runtime/cse.py);
  * only in the function for calls without autograd whose graph never turns gradients on
    (``CodeGen.no_autograd``), and only a plain ``torch.Tensor`` outside modes and
    autocast (``_plain``, runtime/scalars.py): a subclass or a mode sees both calls.
  ``tests/python/test_contiguous.py`` holds both forms to the same results.

  Older Hugging Face layers read the sizes of the copy between the two calls
  (``x = x.permute(0, 2, 1, 3).contiguous(); x.view(x.size()[:-2] + (d,))``):
  :func:`read_shapes_before` makes those reads read ``x`` (a copy has the sizes of what it
  copies) where no node writes in place into ``x`` or a view of it, so the pair is found.
"""

from __future__ import annotations

import dataclasses

from ..ir import Graph, Ref, refs_in
from ..ir.analysis import output_ids
from . import cse
from .same_shape import sizes_of

CONTIGUOUS = "Tensor.contiguous"


def pairs(graph: Graph) -> dict[int, int]:
    """``index of a reshape or view -> index of the contiguous it reads`` for the pairs
    that run as one reshape (the module Note)."""
    groups, written = cse._written_groups(graph)
    outputs = set(output_ids(graph))
    returned = {groups.find(v) for v in outputs}
    readers: dict[int, list[int]] = {}
    for index, node in enumerate(graph.nodes):
        for ref in refs_in((node.args, node.kwargs)):
            readers.setdefault(ref.id, []).append(index)
    found: dict[int, int] = {}
    for index, node in enumerate(graph.nodes):
        if node.op != CONTIGUOUS or node.kwargs or len(node.args) != 1:
            continue
        if len(node.outputs) != 1 or not isinstance(node.args[0], Ref):
            continue
        made = node.outputs[0].id
        reads = readers.get(made, [])
        if made in outputs or len(reads) != 1:
            continue
        reader = graph.nodes[reads[0]]
        if sizes_of(reader) is None or reader.args[0] != Ref(made):
            continue
        if any(r == Ref(made) for r in refs_in((reader.args[1:], reader.kwargs))):
            continue
        group = groups.find(reader.outputs[0].id)
        if group in written or group in returned:
            continue
        found[reads[0]] = index
    return found


# Reads whose value is the same for a tensor and its copy.
_SIZE_READS = frozenset({"prim.size", "prim.numel", "prim.len"})


def read_shapes_before(graph: Graph) -> Graph:
    """``graph`` with each size read of a ``contiguous`` result reading the tensor that
    ``contiguous`` copies instead (the same sizes), where nothing writes in place into
    that tensor or a view of it (which could change its sizes); ``graph`` itself where
    there is none."""
    groups, written = cse._written_groups(graph)
    source: dict[int, Ref] = {}  # contiguous result -> the tensor it copies
    for node in graph.nodes:
        if node.op != CONTIGUOUS or node.kwargs or len(node.args) != 1:
            continue
        tensor = node.args[0]
        copies = len(node.outputs) == 1 and isinstance(tensor, Ref)
        if copies and groups.find(tensor.id) not in written:
            source[node.outputs[0].id] = tensor
    if not source:
        return graph
    nodes = []
    for node in graph.nodes:
        first = node.args[0] if node.args else None
        if node.op in _SIZE_READS and isinstance(first, Ref) and first.id in source:
            node = dataclasses.replace(node, args=[source[first.id], *node.args[1:]])
        nodes.append(node)
    return graph.with_nodes(nodes)
