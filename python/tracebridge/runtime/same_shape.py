"""A reshape or view to the shape a tensor already has: tested inline, in calls without
autograd, where nothing could tell the tensor from its view.

Note: ``attn_output.reshape(b, -1, s, d)`` of a tensor that has that shape already.
  Hugging Face's ``sdpa_attention_forward`` reshapes the attention's output to the shape
  it has, in every layer; PyTorch returns a new view of it (about 1 us of argument
  parsing and view making, torch 2.13, one thread). The generated code writes such a node
  as ``x if _plain and type(x) is Tensor and x.shape == (b, x.shape[1], s, d) and b and s
  and d else x.reshape(b, -1, s, d)`` (the ``-1`` is the size it would be inferred as,
  which it is whenever the other sizes match and none is 0; with a 0 the call runs, and
  raises as eager does). The tensor itself stands for a view of itself with its own sizes
  and strides, which is the same but for identity and ``_base``. So only where nothing can
  tell them apart:
  * ``x`` is a fresh result of an op of the graph (not an input, state, a view, a write or
    a custom function's result): it does not require gradients in a call without
    autograd, and it is not a view, as its view would be one;
  * the tensor had that shape when traced (a reshape that changed it then would rarely
    find the shape test true: it keeps the call alone);
  * no node writes in place into ``x``, the result or any view of them, and none of them
    is returned (alias groups of runtime/cse.py);
  * only in the function for calls without autograd whose graph never turns gradients on
    (``CodeGen.no_autograd``), and only a plain ``torch.Tensor`` outside modes and
    autocast (``_plain``, runtime/scalars.py): a subclass or a mode sees the call.
  ``tests/python/test_same_shape.py`` holds both forms to the same results.
"""

from __future__ import annotations

from ..ir import Graph, Node, Ref
from ..ir import ops as opset
from ..ir.analysis import output_ids
from . import cse
from .dead_code import ALIASING

OPS = frozenset({"Tensor.reshape", "Tensor.view"})
_NOT_FRESH = frozenset({"prim.state", "prim.autograd_function"})


def sizes_of(node: Node) -> list | None:
    """The sizes a reshape or view asks for (ints and int values), or None."""
    if node.op not in OPS or node.kwargs or len(node.args) < 2 or len(node.outputs) != 1:
        return None
    if len(node.args) == 2 and isinstance(node.args[1], (tuple, list)):
        sizes = list(node.args[1])
    else:
        sizes = list(node.args[1:])
    if not sizes or not isinstance(node.args[0], Ref):
        return None
    for size in sizes:
        if not (isinstance(size, Ref) or (type(size) is int and size >= -1)):
            return None
    if sum(1 for s in sizes if s == -1 and type(s) is int) > 1:
        return None
    if -1 in [s for s in sizes if type(s) is int] and 0 in [s for s in sizes if type(s) is int]:
        return None  # -1 next to a 0 never holds a size: the call raises
    return sizes


def candidates(graph: Graph) -> set[int]:
    """Indices of the reshapes and views of ``graph`` that may be written as a shape test
    (the module Note); the caller checks the sizes' kinds."""
    groups, written = cse._written_groups(graph)
    returned = {groups.find(v) for v in output_ids(graph)}
    makers: dict[int, Node] = {}
    shapes = {v.id: v.shape for v in graph.inputs}
    for node in graph.nodes:
        for out in node.outputs:
            makers[out.id] = node
            shapes[out.id] = out.shape
    found = set()
    for index, node in enumerate(graph.nodes):
        if sizes_of(node) is None:
            continue
        tensor = node.args[0]
        traced = shapes.get(tensor.id)
        if traced is None or list(traced) != list(node.outputs[0].shape or ()):
            continue  # another shape when traced: the test would fail on most calls
        maker = makers.get(tensor.id)
        if maker is None or maker.op in _NOT_FRESH or maker.op in ALIASING | cse._MAY_VIEW_ANY:
            continue
        info = opset.info(maker.op)
        if info is None or opset.is_inplace(maker.op) or maker.op.startswith("prim."):
            continue
        group = groups.find(node.outputs[0].id)
        if group in written or group in returned or groups.find(tensor.id) != group:
            continue
        found.add(index)
    return found
