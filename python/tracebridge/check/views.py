"""Load-time rules for literal sizes, strides, offsets, repeats and dims that PyTorch (or
the checked implementation) would refuse anyway, so that a file is refused before it runs.

The checked implementations (``runtime/checked_views.py``, ``runtime/checked_ops.py``)
bound what ``as_strided``, ``repeat_interleave`` and the expanding views reach and make
when they run, against the tensors of the call; a file is refused before that when its
literal arguments already cannot be right:

* a negative size, stride, offset or repeat count, or ``as_strided`` sizes and strides of
  different lengths;
* ``broadcast_to``/``Tensor.expand`` sizes below -1 (-1 keeps the input's size): PyTorch
  reached its kernel with them (``numel: integer multiplication overflow``);
* ``repeat_interleave``'s ``dim`` outside the rank its input has in the file (the checked
  implementation failed on it with ``IndexError: tuple index out of range``);
* a bool where an integer size is expected (``as_strided(x, [True, 3], ...)``,
  ``repeat_interleave(x, True)``): PyTorch's argument parser refuses a bool for every
  integer or integer-list argument, so no trace holds one, and the argument kinds of the
  op set (which let a bool stand for an int elsewhere) would let it through.

Each rule returns the problem as a sentence, or None. Ranks are those the file declares
(a graph input's is checked on every call; any other's is what the op saw when traced),
so a rank rule never refuses a traced file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..ir import ops

# The arguments that hold sizes (those the checker bounds) and the two other integers of
# ``as_strided``'s geometry: a bool there is refused.
_SIZE_NAMES = ops.SIZE_ARGUMENTS | {"stride", "storage_offset"}
# Argument kinds that take integers only in PyTorch (the op set's kinds also take a bool).
_INTEGER_KINDS = frozenset({"int", "ints", "dim", "dims"})


def _items(lit: Any) -> list | None:
    """The elements of a literal list or tuple, or None for anything else (a reference)."""
    if isinstance(lit, dict) and set(lit) == {"tuple"}:
        lit = lit["tuple"]
    return lit if isinstance(lit, list) else None


def _is_int(lit: Any) -> bool:
    return isinstance(lit, int) and not isinstance(lit, bool)


def _negative(lit: Any) -> bool:
    return _is_int(lit) and lit < 0


def _argument(node: dict, position: int, name: str) -> Any:
    args, kwargs = node["args"], node["kwargs"]
    return args[position] if position < len(args) else kwargs.get(name)


def _rank(lit: Any, ranks: Mapping[int, int]) -> int | None:
    """The rank the file declares for a tensor argument (a reference), or None."""
    if isinstance(lit, dict) and set(lit) == {"ref"}:
        return ranks.get(lit["ref"])
    return None


def as_strided(node: dict, ranks: Mapping[int, int]) -> str | None:
    size, stride = _argument(node, 1, "size"), _argument(node, 2, "stride")
    offset = _argument(node, 3, "storage_offset")
    sizes, strides = _items(size), _items(stride)
    if sizes is not None and strides is not None and len(sizes) != len(strides):
        return f"as_strided has {len(sizes)} sizes but {len(strides)} strides"
    if any(_negative(x) for x in (sizes or []) + (strides or [])) or _negative(offset):
        return "as_strided sizes, strides and storage_offset must be >= 0"
    return None


# The elements a literal size may ask for, LIMITS["literal_numel"] of check/program.py
# (which imports this module); a test keeps the two equal.
STORAGE_ELEMENTS = 2**28


def empty_strided(node: dict, ranks: Mapping[int, int]) -> str | None:
    """``empty_strided`` (op-set 10) allocates the storage its strides reach, which its
    sizes alone do not say: ``empty_strided([2], [2**40])`` holds 2 elements in 2**40."""
    sizes = _items(_argument(node, 0, "size"))
    strides = _items(_argument(node, 1, "stride"))
    if sizes is not None and strides is not None and len(sizes) != len(strides):
        return f"empty_strided has {len(sizes)} sizes but {len(strides)} strides"
    if any(_negative(x) for x in (sizes or []) + (strides or [])):
        return "empty_strided sizes and strides must be >= 0"
    literal = sizes is not None and strides is not None and all(map(_is_int, sizes + strides))
    if literal and all(sizes):
        storage = 1 + sum((n - 1) * s for n, s in zip(sizes, strides))
        if storage > STORAGE_ELEMENTS:
            return (
                f"empty_strided sizes {sizes[:8]} and strides {strides[:8]} reach {storage} "
                f"elements of storage, more than the limit of {STORAGE_ELEMENTS} for sizes "
                "written in the file"
            )
    return None


def repeat_interleave(node: dict, ranks: Mapping[int, int]) -> str | None:
    repeats = _argument(node, 1, "repeats")
    if _negative(repeats) or _negative(node["kwargs"].get("output_size")):
        return "repeat_interleave repeats and output_size must be >= 0"
    dim = _argument(node, 2, "dim")
    rank = _rank(node["args"][0], ranks) if node["args"] else None
    span = max(rank or 0, 1)  # PyTorch wraps a dim of a 0-dim tensor as a vector's
    if _is_int(dim) and rank is not None and not -span <= dim < span:
        return (
            f"repeat_interleave dim {dim} is out of range for its input of rank {rank} "
            f"(dims {-span}..{span - 1})"
        )
    return None


def expand(node: dict, ranks: Mapping[int, int]) -> str | None:
    """``broadcast_to``/``Tensor.expand`` sizes below -1: as one list, or spread over
    positions (``x.expand(4, 3)``)."""
    op, args = node["op"], node["args"]
    sizes = _items(_argument(node, 1, "size"))
    if sizes is None:
        sizes = args[1:]
    for position, size in enumerate(sizes):
        if _is_int(size) and size < -1:
            return (
                f"{op} size {size} (at position {position} of the sizes) is negative: a "
                "size is >= 0, or -1 to keep the input's size"
            )
    return None


def _given(info: ops.OpInfo, node: dict) -> list[tuple[tuple[str, ...], Any, tuple[str, ...]]]:
    """``(names, literal, kinds)`` of each argument of ``node``: the parameter names its
    position or keyword has, as given; a size spread over positions (``x.view(2, 3)``)
    has the names of the position the spread starts at."""
    varargs = info.varargs
    given = []
    for position, lit in enumerate(node["args"]):
        spread = varargs is not None and position >= varargs[0] and _items(lit) is None
        at = varargs[0] if spread else position
        names = info.arg_names[at] if at < len(info.arg_names) else ()
        if spread:
            kinds: tuple[str, ...] = (varargs[1],)
        else:
            kinds = info.args[position] if position < len(info.args) else ()
        given.append((names, lit, kinds))
    given += [((key,), lit, info.kwargs.get(key, ())) for key, lit in node["kwargs"].items()]
    return given


def _holds_bool(lit: Any) -> bool:
    items = _items(lit)
    return isinstance(lit, bool) or (items is not None and any(isinstance(x, bool) for x in items))


def bool_size(info: ops.OpInfo, node: dict) -> str | None:
    """A bool literal where the op takes an integer size, stride or offset (alone or in a
    list); None if there is none."""
    if not any(map(_holds_bool, node["args"])) and not any(
        map(_holds_bool, node["kwargs"].values())
    ):
        return None  # most nodes: nothing to name (the check runs on every node of a file)
    for names, lit, kinds in _given(info, node):
        sized = [name for name in names if name in _SIZE_NAMES]
        if not sized or not set(kinds) - {"none", "tensor"} <= _INTEGER_KINDS:
            continue
        items = _items(lit)
        values = items if items is not None else [lit]
        if any(isinstance(x, bool) for x in values):
            shown = json.dumps(values[:8] if items is not None else lit)
            return (
                f"{info.name}'s {sized[0]} is {shown}: a bool where an integer is expected "
                "(PyTorch refuses a bool there)"
            )
    return None


RULES = {
    "as_strided": as_strided,
    "empty_strided": empty_strided,
    "repeat_interleave": repeat_interleave,
    "broadcast_to": expand,
    "Tensor.expand": expand,
}


def problem(node: dict, ranks: Mapping[int, int]) -> str | None:
    """What is wrong with the literal arguments of ``node``, if it is one of the ops of
    ``RULES``, given the ranks the file declares for tensor values (value id -> rank)."""
    rule = RULES.get(node["op"])
    return rule(node, ranks) if rule is not None else None
