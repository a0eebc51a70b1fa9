"""Load-time rules for the arguments of ``as_strided`` and ``repeat_interleave``.

The checked implementations (``runtime/checked_views.py``) bound what these ops reach
and make when they run, against the tensors of the call; a file is refused before that
when its literal arguments already cannot be right: a negative size, stride, offset or
repeat count, or ``as_strided`` sizes and strides of different lengths. Each rule returns
the problem as a sentence, or None.
"""

from __future__ import annotations

from typing import Any


def _items(lit: Any) -> list | None:
    """The elements of a literal list or tuple, or None for anything else (a reference)."""
    if isinstance(lit, dict) and set(lit) == {"tuple"}:
        lit = lit["tuple"]
    return lit if isinstance(lit, list) else None


def _negative(lit: Any) -> bool:
    return isinstance(lit, int) and not isinstance(lit, bool) and lit < 0


def _argument(node: dict, position: int, name: str) -> Any:
    args, kwargs = node["args"], node["kwargs"]
    return args[position] if position < len(args) else kwargs.get(name)


def as_strided(node: dict) -> str | None:
    size, stride = _argument(node, 1, "size"), _argument(node, 2, "stride")
    offset = _argument(node, 3, "storage_offset")
    sizes, strides = _items(size), _items(stride)
    if sizes is not None and strides is not None and len(sizes) != len(strides):
        return f"as_strided has {len(sizes)} sizes but {len(strides)} strides"
    if any(_negative(x) for x in (sizes or []) + (strides or [])) or _negative(offset):
        return "as_strided sizes, strides and storage_offset must be >= 0"
    return None


def repeat_interleave(node: dict) -> str | None:
    repeats = _argument(node, 1, "repeats")
    if _negative(repeats) or _negative(node["kwargs"].get("output_size")):
        return "repeat_interleave repeats and output_size must be >= 0"
    return None


RULES = {"as_strided": as_strided, "repeat_interleave": repeat_interleave}


def problem(node: dict) -> str | None:
    """What is wrong with the literal arguments of ``node``, if it is one of these ops."""
    rule = RULES.get(node["op"])
    return rule(node) if rule is not None else None
