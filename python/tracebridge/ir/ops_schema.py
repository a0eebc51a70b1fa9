"""Argument kinds of ops, read from PyTorch's native function schemas.

Note: why schemas. PyTorch's C++ builtins have no Python signature, but every ATen op
registers a schema string (``aten::conv2d(Tensor input, Tensor weight, Tensor? bias=None,
SymInt[2] stride=1, ...) -> Tensor``) in the dispatcher. The op table (``ops.py``) names
each op on purpose; this module only reads, for those names, the kinds of their
arguments, position by position and keyword by keyword, merged over the overloads that a
graph can reach (no ``out=`` overloads, no named-dimension overloads, no overload taking a
storage or stream; a random op's generator is a kind of its own). Nothing here decides
what is allowed: an op that is not listed in ``ops.py`` has no kinds.
"""

from __future__ import annotations

import re

import torch

# Schema type -> argument kind (the vocabulary shared with R through ops.json).
_SCALAR_TYPES = {
    "Tensor": "tensor",
    "int": "int",
    "SymInt": "int",
    "float": "float",
    "bool": "bool",
    "Scalar": "scalar",
    "ScalarType": "dtype",
    "Device": "device",
    "Layout": "layout",
    "MemoryFormat": "memory_format",
    "str": "str",
    "complex": "scalar",
    # A random op's generator: in a file, a reference to a generator the program keeps
    # (``{"generator": NAME}``, SPEC section 5), never one made from a file's data.
    "Generator": "generator",
}
_LIST_TYPES = {
    "tensor": "tensors",
    "int": "ints",
    "float": "floats",
    "bool": "bools",
    "scalar": "scalars",
}
# Overloads with these argument types cannot be reached from a graph (nothing in a file
# can make a Dimname, Storage or Stream) or must not be (Storage).
_UNREACHABLE = ("Dimname", "Storage", "Stream", "Any", "t", "QScheme")
# Parameter names that are dimensions or indices, for R's 1-based conversion.
DIM_NAMES = frozenset(
    "dim dims dim0 dim1 dim2 start_dim end_dim source destination axis axis0 axis1".split()
)
INDEX_NAMES = frozenset("index indices".split())


def _split_top(text: str) -> list[str]:
    parts, depth, quote, start = [], 0, None, 0
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    if tail:
        parts.append(tail)
    return parts


_ARG = re.compile(
    r"^(?P<type>[A-Za-z]+)(?P<alias>\([^)]*\))?(?P<list>\[\d*\])?(?P<opt>\?)?"
    r"(?P<elemopt>\[\d*\])?\s+(?P<name>\w+)(?P<default>=.*)?$"
)


def parse_schema(text: str) -> list[dict] | None:
    """The arguments of one schema string, or None for an unreachable overload.

    Each argument is ``{name, kinds, kwarg_only, optional}``.

    >>> text = "aten::f(Tensor self, int[2] k=1, *, ScalarType? d=None) -> Tensor"
    >>> [a["kinds"] for a in parse_schema(text)]
    [['tensor'], ['ints'], ['dtype', 'none']]
    """
    inner = text[text.index("(") + 1 : text.rindex(") ->")]
    out, kwarg_only = [], False
    for part in _split_top(inner):
        if part == "*":
            kwarg_only = True
            continue
        match = _ARG.match(part)
        if match is None:
            return None
        base = match["type"]
        default = match["default"] or ""
        if base in _UNREACHABLE or base not in _SCALAR_TYPES:
            if default == "=None":
                continue  # an optional stream: the graph leaves it out
            return None
        if kwarg_only and "!" in (match["alias"] or ""):
            return None  # writes into a keyword argument: an out= overload
        kind = _SCALAR_TYPES[base]
        is_list = bool(match["list"]) or bool(match["elemopt"])
        if is_list:
            kind = _LIST_TYPES.get(kind)
            if kind is None:
                return None
        name = match["name"]
        if name in DIM_NAMES and kind in ("int", "ints"):
            kind = "dim" if kind == "int" else "dims"
        elif name in INDEX_NAMES and kind == "tensor":
            kind = "index_tensor"
        elif name == "index" and kind == "int":
            kind = "index"
        optional = bool(match["opt"]) or default == "=None"
        kinds = [kind] + (["none"] if optional else [])
        out.append(
            {"name": name, "kinds": kinds, "kwarg_only": kwarg_only, "has_default": bool(default)}
        )
    return out


def schemas(aten_name: str) -> list[list[dict]]:
    """The reachable overloads of ``aten::NAME``: argument lists without ``out=``."""
    found = []
    all_overloads = torch._C._jit_get_schemas_for_operator(f"aten::{aten_name}")
    parsed = []
    for schema in all_overloads:
        if schema.overload_name.startswith("prim_") or "out" in {a.name for a in schema.arguments}:
            continue  # TorchScript's own overloads and out= overloads
        args = parse_schema(str(schema))
        if args is not None:
            parsed.append(args)
    # ``aten::add`` also holds TorchScript's number overloads (``add(int a, int b)``); a
    # graph only reaches the tensor overloads when there are any.
    with_tensor = [
        a
        for a in parsed
        if any(k in ("tensor", "tensors", "index_tensor") for x in a for k in x["kinds"])
    ]
    found = with_tensor or parsed
    return found
