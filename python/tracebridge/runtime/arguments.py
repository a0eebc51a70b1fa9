"""The same call in fewer words: literal arguments written the way torch parses fastest.

Note: what changes, and why it is exact.
  Each call of a torch op from Python goes through torch's argument parser, whose cost
  grows with what it is given: ``torch.conv2d(x, w, None, (1, 1), (0, 0), (1, 1), 1)``
  parses in about 4.5 us and ``torch.conv2d(x, w)`` in 3.4 (torch 2.13, one thread, a tiny
  tensor); a keyword costs more than a position (``softmax(x, dim=-1)`` 3.0 us,
  ``softmax(x, -1)`` 2.7), a list more than a tuple, a list of equal ints more than one
  int. The generated code calls the same function with the same meaning, written shorter:

  * an argument equal to the parameter's default (the same type, the same value, the
    same sign of zero) is left out, when nothing after it must be given by position;
  * a keyword becomes a position where every position before it is given (a default
    left out before it is written back as that default);
  * a sequence of ``N`` equal ints for a parameter of type ``int[N]`` (a convolution's
    or a pooling's stride, padding, dilation, kernel size; a reduction's ``int[1]``
    dimension) is that int: torch's parser reads one int there as ``N`` copies of it;
  * a literal list of ints for an int-list parameter is a tuple (one constant, not a
    list built on every call), and a list of tensors for a tensor-list parameter a tuple.

  Only ops of :data:`SIGNATURES` are rewritten, each signature written here from the
  overload that the recorded call selects, and only literals change (a value of the
  graph stays as it is, whatever it holds). A call written shorter selects the same
  overload of the op (``tests/python/test_arguments.py`` checks every table entry
  against torch's own schemas and the overload each rewritten call dispatches to), so
  the same kernel runs on the same arguments: bit for bit the interpreter's result, and
  the same error where the interpreter's call fails. A torch function mode or a tensor
  subclass that looks at the arguments of a call sees the shorter form.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..ir import Node, Ref

_REQUIRED = object()  # a parameter without a default this module may write or drop


@dataclass(frozen=True)
class Param:
    """One parameter of an op's Python binding, in order."""

    name: str
    default: object = _REQUIRED  # as written in the shortest form (``1`` for ``[1, 1]``)
    size: int | None = None  # ``int[N]``: one int stands for N equal entries
    ints: bool = False  # an int list: a literal list may be a tuple
    tensors: bool = False  # a tensor list: a literal list may be a tuple
    keyword_only: bool = False

    @property
    def has_default(self) -> bool:
        return self.default is not _REQUIRED


def _conv(n: int) -> tuple[Param, ...]:
    return (
        Param("input"),
        Param("weight"),
        Param("bias", None),
        Param("stride", 1, size=n),
        Param("padding", 0, size=n),
        Param("dilation", 1, size=n),
        Param("groups", 1),
    )


def _max_pool(n: int) -> tuple[Param, ...]:
    # stride's default is [] (the kernel size): never written nor dropped here
    return (
        Param("input"),
        Param("kernel_size", size=n),
        Param("stride", size=n),
        Param("padding", 0, size=n),
        Param("dilation", 1, size=n),
        Param("ceil_mode", False),
    )


def _avg_pool(n: int) -> tuple[Param, ...]:
    params = (
        Param("input"),
        Param("kernel_size", size=n),
        Param("stride", size=n),
        Param("padding", 0, size=n),
        Param("ceil_mode", False),
        Param("count_include_pad", True),
    )
    return params if n == 1 else (*params, Param("divisor_override", None))


def _reduction() -> tuple[Param, ...]:
    # the ``dim`` overload (``int[1]? dim``); a call without dim selects another one
    return (
        Param("input"),
        Param("dim", size=1, ints=True),
        Param("keepdim", False),
        Param("dtype", None, keyword_only=True),
    )


def _softmax() -> tuple[Param, ...]:
    return (Param("input"), Param("dim"), Param("dtype", None))


# op -> the parameters of the overload its recorded calls select (see the module Note).
SIGNATURES: dict[str, tuple[Param, ...]] = {
    "conv1d": _conv(1),
    "conv2d": _conv(2),
    "conv3d": _conv(3),
    "linear": (Param("input"), Param("weight"), Param("bias", None)),
    "layer_norm": (
        Param("input"),
        Param("normalized_shape", ints=True),
        Param("weight", None),
        Param("bias", None),
        Param("eps", 1e-05),
        Param("cudnn_enable", True),
    ),
    "max_pool1d": _max_pool(1),
    "max_pool2d": _max_pool(2),
    "max_pool3d": _max_pool(3),
    "avg_pool1d": _avg_pool(1),
    "avg_pool2d": _avg_pool(2),
    "avg_pool3d": _avg_pool(3),
    "adaptive_avg_pool1d": (Param("input"), Param("output_size", size=1)),
    "adaptive_avg_pool2d": (Param("input"), Param("output_size", size=2)),
    "adaptive_avg_pool3d": (Param("input"), Param("output_size", size=3)),
    "group_norm": (
        Param("input"),
        Param("num_groups"),
        Param("weight", None),
        Param("bias", None),
        Param("eps", 1e-05),
        Param("cudnn_enabled", True),
    ),
    "mean": _reduction(),
    "sum": _reduction(),
    "softmax": _softmax(),
    "log_softmax": _softmax(),
    "gelu": (Param("input"), Param("approximate", "none", keyword_only=True)),
    "scaled_dot_product_attention": (
        Param("query"),
        Param("key"),
        Param("value"),
        Param("attn_mask", None),
        Param("dropout_p", 0.0),
        Param("is_causal", False),
        Param("scale", None, keyword_only=True),
        Param("enable_gqa", False, keyword_only=True),
    ),
    "flatten": (Param("input"), Param("start_dim", 0), Param("end_dim", -1)),
    # Scalars: 1.0 is left out where the file writes 1.0 (an int 1 stays); elu computes
    # in the tensor's floating type either way, and refuses integer tensors either way
    "elu": (Param("input"), Param("alpha", 1.0), Param("scale", 1.0), Param("input_scale", 1.0)),
    "cat": (Param("tensors", tensors=True), Param("dim", 0)),
    "embedding": (
        Param("weight"),
        Param("indices"),
        Param("padding_idx", -1),
        Param("scale_grad_by_freq", False),
        Param("sparse", False),
    ),
}


def _same_literal(value, default) -> bool:
    """Whether the literal ``value`` is ``default``: the same type and value (``True`` is
    not ``1``), and for floats the same sign of zero (NaN is never a default)."""
    if default is None or value is None:
        return value is default
    if type(value) is not type(default) or value != default:
        return False
    return type(value) is not float or math.copysign(1.0, value) == math.copysign(1.0, default)


def _int_literals(value) -> bool:
    return all(type(e) is int for e in value)


def _form(param: Param, value):
    """``value`` (a literal or a value of the graph) as the shortest literal with the same
    meaning for ``param``."""
    if isinstance(value, Ref) or not isinstance(value, (list, tuple)):
        return value
    sized = param.size is not None and len(value) == param.size and _int_literals(value)
    if sized and len(set(value)) == 1:
        return value[0]
    if param.ints and type(value) is list and _int_literals(value):
        return tuple(value)
    if param.tensors and type(value) is list:
        return tuple(value)
    return value


def shorter(node: Node) -> tuple[list, dict] | None:
    """``(args, kwargs)`` for ``node``'s call written shorter with the same meaning (see
    the module Note), or None where its op has no signature here or its arguments do not
    bind to it (a keyword this module does not know, one position too many): the call is
    then written as the file records it.

    >>> from tracebridge.ir import Node, Ref
    >>> shorter(Node("conv2d", [Ref(0), Ref(1), None, (1, 1), (1, 1), (1, 1), 1], {}))
    ([Ref(id=0), Ref(id=1), None, 1, 1], {})
    """
    params = SIGNATURES.get(node.op)
    if params is None:
        return None
    positional = [p for p in params if not p.keyword_only]
    if len(node.args) > len(positional):
        return None
    bound = {p.name: a for p, a in zip(positional, node.args)}
    names = {p.name for p in params}
    for key, value in node.kwargs.items():
        if key not in names or key in bound:
            return None  # an alias (``self``), or a call torch itself would refuse
        bound[key] = value
    for param in params:
        if param.name in bound:
            value = _form(param, bound[param.name])
            if param.has_default and _same_literal(value, param.default):
                del bound[param.name]
            else:
                bound[param.name] = value
    present = [i for i, p in enumerate(positional) if p.name in bound]
    args = []
    for param in positional[: present[-1] + 1] if present else []:
        if param.name in bound:
            args.append(bound[param.name])
        elif param.has_default:
            args.append(param.default)
        else:
            return None  # a required position missing: torch's error, from the file's call
    kwargs = {p.name: bound[p.name] for p in params if p.keyword_only and p.name in bound}
    if any(not p.has_default and p.name not in bound for p in positional):
        return None
    return args, kwargs
