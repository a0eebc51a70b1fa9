"""Which ops a compiler backend takes, kept as data (one set per family), not ``if`` chains.

Names are canonical op-set names (see ``tracebridge.opset``); a test checks that every
name here is in the op set, so a typo cannot silently shrink coverage.
"""

from __future__ import annotations

from collections.abc import Callable

from ..ir import Node
from ..ir.ops import RANDOM_OPS

ELEMENTWISE = frozenset(
    """
abs add sub mul div neg reciprocal pow sqrt rsqrt exp expm1 log log1p log2 sin cos tanh
sigmoid relu relu6 leaky_relu elu celu selu gelu silu mish hardtanh hardswish hardsigmoid
softplus erf clamp clamp_min clamp_max minimum maximum where eq ne lt le gt ge logical_not
logical_and logical_or floor ceil round sign square lerp addcmul addcdiv true_divide
rsub Tensor.float Tensor.double
Tensor.half Tensor.type_as Tensor.to
""".split()
)

MATMUL_CONV = frozenset(
    """
matmul mm bmm addmm baddbmm linear conv1d conv2d conv3d conv_transpose1d conv_transpose2d
max_pool1d max_pool2d avg_pool1d avg_pool2d adaptive_avg_pool1d adaptive_avg_pool2d
scaled_dot_product_attention
""".split()
)

REDUCTION = frozenset(
    """
sum mean amax amin prod var std logsumexp softmax log_softmax argmax argmin
""".split()
)

VIEW = frozenset(
    """
Tensor.view Tensor.reshape reshape flatten Tensor.permute permute transpose
Tensor.contiguous unsqueeze squeeze Tensor.expand Tensor.expand_as t cat stack getitem
Tensor.repeat constant_pad_nd
""".split()
)

NORMALISATION = frozenset(
    """
batch_norm layer_norm group_norm instance_norm
""".split()
)

# Host-side shape arithmetic: a compiled graph computes sizes itself, so ``x.view(x.size(0),
# -1)`` stays inside one subgraph instead of splitting it.
SHAPE = frozenset(
    """
prim.size prim.numel scalar.add scalar.sub scalar.mul scalar.floordiv scalar.truediv
scalar.mod scalar.neg scalar.eq scalar.ne scalar.lt scalar.le scalar.gt scalar.ge
""".split()
)

FAMILIES = {
    "elementwise": ELEMENTWISE,
    "matmul/conv": MATMUL_CONV,
    "reduction": REDUCTION,
    "view": VIEW,
    "normalisation": NORMALISATION,
    "shape": SHAPE,
}
SUPPORTED = frozenset().union(*FAMILIES.values())

# Never inside a subgraph: guards are checked by the runtime on every call, state is read by
# the runtime (so ``.to()`` and ``load_state_dict`` are seen) and passed in.
STRUCTURAL = frozenset({"prim.guard", "prim.state"})


def _literal_false(position: int, keyword: str) -> Callable[[Node], bool]:
    def check(node: Node) -> bool:
        value = node.kwargs.get(keyword, node.args[position] if len(node.args) > position else None)
        return value is False

    return check


# Ops supported only under a condition on their literal arguments.
CONDITIONAL: dict[str, Callable[[Node], bool]] = {
    # dropout in evaluation mode (train=False) is the identity; in training it draws numbers.
    "dropout": _literal_false(2, "train"),
}

UNSUPPORTED_DTYPES = frozenset({"complex64", "complex128"})


def supported_whole(node: Node) -> bool:
    """What a whole-graph ``torch.compile`` takes (whole.py): every op of the op set --
    Dynamo captures any public torch call, inductor lowers an aten op or calls its eager
    kernel, and Dynamo itself breaks the graph where an op needs a Python value
    (``.item()``) -- except ops that draw random numbers (compiled RNG draws other numbers
    than eager, so the check and ``torch.manual_seed`` reproducibility would break;
    ``dropout`` with a literal ``train=False`` draws none) and complex results."""
    if node.op in STRUCTURAL:
        return False
    if node.op in RANDOM_OPS and not (node.op in CONDITIONAL and CONDITIONAL[node.op](node)):
        return False
    refuses = FAKE_KERNEL_REFUSES.get(node.op)
    if refuses is not None and refuses(node):
        return False
    return not any(v.dtype in UNSUPPORTED_DTYPES for v in node.outputs)


def _grouped_mm_not_bf16(node: Node) -> bool:
    return any(v.dtype != "bfloat16" for v in node.outputs)


# Ops whose fake (meta) kernel, which Dynamo runs to capture a graph, refuses inputs that
# the eager kernel takes: compiled, the whole graph failed ("RuntimeError when making fake
# tensor call"); left to eager PyTorch, Dynamo breaks the graph there. ``_grouped_mm``
# (transformers' MoE experts, mixtral and qwen2_moe in the zoo): its meta kernel demands
# bfloat16 ("Expected inputs of BF16 type"), the CPU kernel takes float32 (prober24a F4).
FAKE_KERNEL_REFUSES = {"_grouped_mm": _grouped_mm_not_bf16}


def supported_by_set(node: Node, ops: frozenset) -> bool:
    """Whether ``node`` is in ``ops`` (or passes its CONDITIONAL rule) with no complex output."""
    if node.op in STRUCTURAL:
        return False
    if node.op in CONDITIONAL:
        if not CONDITIONAL[node.op](node):
            return False
    elif node.op not in ops:
        return False
    return not any(v.dtype in UNSUPPORTED_DTYPES for v in node.outputs)
