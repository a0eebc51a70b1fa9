"""Elementwise ops that write their result into a tensor nothing else will read.

Note: why a dead operand may take the result, and when.
  An op run from Python allocates its result: ``torch.relu(x)`` costs about 1.2 us and
  ``x.relu_()`` 0.7 (torch 2.13, one thread, a small tensor); ``gelu`` 8.0 and ``gelu_``
  6.9; ``torch.add(a, b)`` 1.26 and ``a.add_(b)`` 0.90. torch.jit's interpreter pays the
  allocation too, but not the Python around it, so this is where generated code catches up
  on the activations, residual adds and norms of every model.

  The generated code for calls without autograd (``CodeGen.no_autograd``) runs an
  elementwise op of :data:`UNARY` or :data:`BINARY` in place on its first operand when:

  * that operand was made by an op of :data:`FRESH` in this code (not folded, memoised or
    read from state, an input or a view), which always returns new, dense memory, so no
    other tensor shares it; the op at hand is its last reader, every reader before it
    read it without keeping it or making a view of it (a norm, a linear, a size read:
    ``x + attn(norm(x))`` writes into ``x``), and it is not returned -- nothing can see
    the write;
  * at the call, the operand is a plain tensor of the traced floating dtype and the call
    runs outside any torch function or dispatch mode and autocast (``_plain``), and the
    second operand is a number, or a plain tensor (or a Parameter, whose torch function is
    disabled) of that dtype too (``a.add_(b)`` of a
    float32 ``a`` and a float64 ``b`` gives float32, ``a + b`` float64): the in-place
    op then computes the same
    elements with the same kernel into memory of the same layout as the result the op
    would allocate (a dense tensor's), so the bits are the interpreter's;
  * for a binary op, the traced result has the first operand's shape. A call where the
    other operand would make the result larger or of a wider dtype (a file whose shapes
    do not hold, say) is refused by the in-place op before it writes anything, and the
    code then runs the op as recorded (``except RuntimeError``), with its result or its
    error. A floating kernel raises nothing once it runs (no division check).

  Otherwise the op runs as recorded.
"""

from __future__ import annotations

import torch

from ..ir import Graph, Ref, refs_in
from ..ir import ops as opset
from ..ir.analysis import output_ids

# Ops whose result is always a tensor of its own, dense and unaliased.
FRESH = frozenset(
    """add sub mul div matmul linear conv1d conv2d conv3d layer_norm group_norm softmax
    log_softmax gelu silu relu sigmoid tanh hardswish hardsigmoid rsqrt neg exp pow
    batch_norm embedding bmm baddbmm addmm mm where cat mean sum max_pool2d avg_pool2d
    sqrt erf abs reciprocal log log1p expm1 sin cos clamp_min elu""".split()
)
# Ops that read a tensor without keeping it or a view of it: an operand they read before
# may still be written by its last reader.
_KEEP_NOTHING = (
    FRESH
    | opset.TENSOR_FLAG_READS
    | frozenset(
        """scaled_dot_product_attention prim.size prim.numel prim.dtype prim.device
        prim.stride prim.storage_offset prim.is_contiguous prim.is_contiguous_as""".split()
    )
)
_nn = torch._C._nn
# op -> its in-place form (one operand; a keyword of the op passes on as it is)
UNARY = {
    "relu": torch.Tensor.relu_,
    "gelu": _nn.gelu_,
    "silu": _nn.silu_,
    "sigmoid": torch.Tensor.sigmoid_,
    "tanh": torch.Tensor.tanh_,
    "hardswish": _nn.hardswish_,
    "hardsigmoid": _nn.hardsigmoid_,
    "rsqrt": torch.Tensor.rsqrt_,
    "neg": torch.Tensor.neg_,
    "exp": torch.Tensor.exp_,
    "sqrt": torch.Tensor.sqrt_,
    "erf": torch.Tensor.erf_,
    "abs": torch.Tensor.abs_,
    "reciprocal": torch.Tensor.reciprocal_,
    "log": torch.Tensor.log_,
    "log1p": torch.Tensor.log1p_,
    "expm1": torch.Tensor.expm1_,
    "sin": torch.Tensor.sin_,
    "cos": torch.Tensor.cos_,
    "elu": _nn.elu_,
}
_UNARY_KEYWORDS = {"gelu": {"approximate"}}
BINARY = {
    "add": torch.Tensor.add_,
    "sub": torch.Tensor.sub_,
    "mul": torch.Tensor.mul_,
    "div": torch.Tensor.div_,
    "pow": torch.Tensor.pow_,
    "clamp_min": torch.Tensor.clamp_min_,
}
OPS = FRESH | set(UNARY) | set(BINARY)  # the ops plan() looks at
_FLOATING = frozenset({"float16", "bfloat16", "float32", "float64"})


def plan(graph: Graph, elsewhere, passes_on=lambda node: False) -> dict[int, str]:
    """Index -> the traced dtype of its first operand, for each node of ``graph`` that may
    run in place (see the Note); ``elsewhere(index)`` says whether a node runs in other
    code than its own statement (folded, memoised, a tree of views, a merged pair);
    ``passes_on(node)`` whether the code gives a node's first argument as its result (a
    dropout in evaluation mode): its result is that value under another name."""
    producers = {}
    values = {v.id: v for v in graph.inputs}
    same: dict[int, int] = {}  # a value passed on -> the value it is
    for index, node in enumerate(graph.nodes):
        first = node.args[0] if node.args else None
        single = isinstance(first, Ref) and len(node.outputs) == 1
        if single and not elsewhere(index) and passes_on(node):
            same[node.outputs[0].id] = same.get(first.id, first.id)
            continue
        for value in node.outputs:
            producers[value.id] = index
            values[value.id] = value
    readers: dict[int, list[int]] = {}
    for index, node in enumerate(graph.nodes):
        if node.outputs and node.outputs[0].id in same:
            continue  # not a reader: its result is read as the value itself
        for ref in refs_in((node.args, node.kwargs)):
            readers.setdefault(same.get(ref.id, ref.id), []).append(index)
    returned = {same.get(i, i) for i in output_ids(graph)}
    found = {}
    for index, node in enumerate(graph.nodes):
        if elsewhere(index) or len(node.outputs) != 1 or not node.args:
            continue
        if node.op in UNARY:  # literals after the tensor (elu's alpha) pass on as they are
            if refs_in((node.args[1:], node.kwargs)):
                continue
            if not set(node.kwargs) <= _UNARY_KEYWORDS.get(node.op, set()):
                continue
        elif node.op in BINARY:
            if len(node.args) != 2 or node.kwargs:
                continue
        else:
            continue
        first = node.args[0]
        if not isinstance(first, Ref):
            continue
        first = Ref(same.get(first.id, first.id))
        if first.id in returned:
            continue
        if not _last_and_only_holder(graph, index, readers.get(first.id, []), elsewhere):
            continue
        maker = producers.get(first.id)
        if maker is None or elsewhere(maker) or graph.nodes[maker].op not in FRESH:
            continue
        if len(graph.nodes[maker].outputs) != 1:
            continue
        operand, result = values[first.id], node.outputs[0]
        if operand.kind != "Tensor" or operand.dtype not in _FLOATING:
            continue
        if result.dtype != operand.dtype or result.shape != operand.shape:
            continue
        found[index] = operand.dtype
    return found


def _last_and_only_holder(graph: Graph, index: int, readers: list[int], elsewhere) -> bool:
    """Whether node ``index`` reads a value last, and every other reader before it read it
    without keeping it or a view of it (an op of :data:`_KEEP_NOTHING` that runs as its own
    statement): after ``index`` nothing can see the value."""
    if not readers or max(readers) != index:
        return False
    others = [i for i in readers if i != index]
    return all(graph.nodes[i].op in _KEEP_NOTHING and not elsewhere(i) for i in others)
