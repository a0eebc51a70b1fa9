"""What generated code and the interpreter share: op lookup, guard failures, checks."""

from __future__ import annotations

import torch

from ..errors import GuardError, TraceError
from ..ir import DTYPES, Graph, Node
from ..ir import ops as opset
from ..source import source_line

PRIM_EXPRESSIONS = {
    # op -> format of a Python expression over its first argument
    "prim.size": "{0}.shape[{1}]",
    "prim.numel": "{0}.numel()",
    "prim.dtype": "{0}.dtype",
    "prim.device": "{0}.device",
    "prim.item": "{0}.item()",
    "prim.tolist": "{0}.tolist()",
    "prim.bool": "bool({0})",
    "prim.int": "int({0})",
    "prim.float": "float({0})",
    "prim.len": "len({0})",
    "prim.grad_enabled": "torch.is_grad_enabled()",
    "prim.stride": "{0}.stride({1})",
    "prim.requires_grad": "{0}.requires_grad",
    "prim.is_contiguous": "{0}.is_contiguous()",
}
PRIM_FUNCTIONS = {
    "prim.size": lambda t, d: t.shape[d],
    "prim.numel": lambda t: t.numel(),
    "prim.dtype": lambda t: t.dtype,
    "prim.device": lambda t: t.device,
    "prim.item": lambda t: t.item(),
    "prim.tolist": lambda t: t.tolist(),
    "prim.bool": bool,
    "prim.int": int,
    "prim.float": float,
    "prim.len": len,
    "prim.grad_enabled": torch.is_grad_enabled,
    "prim.stride": lambda t, d: t.stride(d),
    "prim.requires_grad": lambda t: t.requires_grad,
    "prim.is_contiguous": lambda t: t.is_contiguous(),
}
SCALAR_SYMBOLS = {
    "scalar.add": "+",
    "scalar.sub": "-",
    "scalar.mul": "*",
    "scalar.truediv": "/",
    "scalar.floordiv": "//",
    "scalar.mod": "%",
    "scalar.pow": "**",
    "scalar.eq": "==",
    "scalar.ne": "!=",
    "scalar.lt": "<",
    "scalar.le": "<=",
    "scalar.gt": ">",
    "scalar.ge": ">=",
    "scalar.and": "&",
    "scalar.or": "|",
    "scalar.lshift": "<<",
    "scalar.rshift": ">>",
    "scalar.xor": "^",
}


def op_function(name: str):
    """The callable for op ``name``; a name outside the op set is a clear error."""
    if name in PRIM_FUNCTIONS:
        return PRIM_FUNCTIONS[name]
    try:
        return opset.impl_of(name)
    except KeyError:
        raise TraceError(
            f"op {name!r} is not in tracebridge's op set (version {opset_version()}); the "
            "artifact was made by a newer tracebridge or is corrupt"
        ) from None


def opset_version() -> int:
    from ..ir import OPSET_VERSION

    return OPSET_VERSION


def _short_repr(value, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 5] + " ...]"


def guard_message(node: Node, seen, operands=None) -> str:
    what = node.kwargs.get("what", "a traced value")
    expect = node.kwargs.get("expect")
    kind = node.kwargs.get("kind", "value")
    loc = node.loc or "unknown location"
    line = source_line(node.loc)
    where = f"{loc}" + (f": {line}" if line else "")
    if kind == "branch" and isinstance(expect, bool):
        head = f"the trace assumed that {what} is {expect}, but now it is {seen}"
    elif kind == "loop":
        head = f"the trace unrolled a Python loop for {what} == {expect!r}, but now it is {seen!r}"
    elif kind == "count":
        head = f"the trace assumed {what} gives {expect} results, but now it gives {seen}"
    else:
        head = (
            f"the trace assumed {what} == {_short_repr(expect)}, but now it is {_short_repr(seen)}"
        )
    if operands:
        head += " (now: " + ", ".join(f"{d} = {v}" for d, v in operands) + ")"
    return (
        f"{head}\n  assumption made at {where}\n  this call takes another path than the "
        "traced one: trace again with inputs like this one, or remove the Python-level "
        "decision from the traced code"
    )


def raise_guard(node: Node, seen, operands=None):
    raise GuardError(
        guard_message(node, seen, operands),
        guard=node.kwargs.get("what", ""),
        location=node.loc or "",
        seen=seen,
    )


def count_guard(node: Node, index: int):
    """A synthetic guard node describing an op whose number of results changed."""
    return Node(
        op="prim.guard",
        kwargs={"what": f"{node.op}(...)", "expect": index, "kind": "count"},
        loc=node.loc,
    )


def check_count(result, expected: int, node: Node):
    if len(result) != expected:
        raise_guard(count_guard(node, expected), len(result))
    return result


# The kind of a dtype. A call may change an input's dtype within its kind (float32 to
# float64 after .double()), not across kinds: code often branches on is_floating_point().
DTYPE_KIND = {
    dtype: (
        "f"
        if dtype.is_floating_point
        else "c"
        if dtype.is_complex
        else "b"
        if dtype == torch.bool
        else "i"
    )
    for dtype in DTYPES.values()
}
KIND_WORDS = {"f": "floating-point", "c": "complex", "b": "bool", "i": "integer"}


def kind_of(dtype_name: str | None) -> str | None:
    return DTYPE_KIND.get(DTYPES.get(dtype_name or ""))


def check_inputs(graph: Graph, leaves) -> None:
    """Inputs must be tensors of the traced rank and dtype kind (sizes may vary)."""
    for i, (value, leaf) in enumerate(zip(graph.inputs, leaves)):
        if leaf is None:
            continue
        if not isinstance(leaf, torch.Tensor):
            raise TraceError(
                f"input {i} ({value.name}) must be a tensor, got {type(leaf).__name__}"
            )
        if leaf.dim() != len(value.shape or []):
            raise GuardError(
                f"input {value.name} has {leaf.dim()} dimensions, but the trace was made with "
                f"{len(value.shape or [])} ({value.type_str()}); pass a tensor of that rank",
                guard=f"{value.name}.dim() == {len(value.shape or [])}",
                seen=leaf.dim(),
            )
        want = kind_of(value.dtype)
        if want is not None and DTYPE_KIND.get(leaf.dtype) != want:
            dtype = str(leaf.dtype).replace("torch.", "")
            raise GuardError(
                f"input {value.name} has dtype {dtype}, but the trace was made with "
                f"{value.dtype}; pass a {KIND_WORDS[want]} tensor (the traced code may depend "
                "on the kind of dtype)",
                guard=f"{value.name} is {KIND_WORDS[want]}",
                seen=dtype,
            )


def bad_input(index: int, graph: Graph, leaf):
    check_inputs(graph, [None] * index + [leaf])
    raise TraceError(f"input {index} is not what the trace expects")  # pragma: no cover
