"""Nested inputs and outputs: flatten to a list of leaves plus a JSON-able spec.

A spec is a small dict: ``{"t": "tuple" | "list" | "dict" | "namedtuple" | "leaf" |
"none" | "const", ...}``. Leaves are tensors (and, at the output, traced values);
``const`` holds a Python scalar or string that the function returned as is.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

import torch

LEAF = {"t": "leaf"}
_CONST_TYPES = (bool, int, float, str)
_namedtuple_classes: dict[tuple[str, tuple[str, ...]], type] = {}


def flatten(obj: Any, is_leaf) -> tuple[list[Any], dict]:
    """Return ``(leaves, spec)``; ``is_leaf(x)`` says what counts as a leaf."""
    leaves: list[Any] = []
    spec = _flatten(obj, is_leaf, leaves)
    return leaves, spec


def _flatten(obj, is_leaf, leaves):
    if is_leaf(obj):
        leaves.append(obj)
        return LEAF
    if obj is None:
        return {"t": "none"}
    if isinstance(obj, tuple) and hasattr(type(obj), "n_sequence_fields"):
        # A structseq such as torch.return_types.max: keep its field names.
        fields = list(getattr(type(obj), "__match_args__", ()))
        children = [_flatten(v, is_leaf, leaves) for v in obj]
        return {
            "t": "namedtuple",
            "name": f"{type(obj).__module__}.{type(obj).__name__}",
            "fields": fields,
            "c": children,
        }
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        children = [_flatten(v, is_leaf, leaves) for v in obj]
        return {
            "t": "namedtuple",
            "name": type(obj).__name__,
            "fields": list(obj._fields),
            "c": children,
        }
    if isinstance(obj, tuple):
        return {"t": "tuple", "c": [_flatten(v, is_leaf, leaves) for v in obj]}
    if isinstance(obj, list):
        return {"t": "list", "c": [_flatten(v, is_leaf, leaves) for v in obj]}
    if isinstance(obj, dict):
        keys = list(obj.keys())
        for key in keys:
            if not isinstance(key, (str, int)):
                raise TypeError(f"dict keys must be str or int, got {type(key).__name__}")
        return {"t": "dict", "keys": keys, "c": [_flatten(obj[k], is_leaf, leaves) for k in keys]}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        fields = [f.name for f in dataclasses.fields(obj)]
        children = [_flatten(getattr(obj, f), is_leaf, leaves) for f in fields]
        return {"t": "namedtuple", "name": type(obj).__name__, "fields": fields, "c": children}
    if isinstance(obj, _CONST_TYPES):
        return {"t": "const", "v": obj}
    raise TypeError(
        f"unsupported value of type {type(obj).__name__}: inputs and outputs must be "
        "tensors or (nested) tuples, lists, dicts, named tuples or None"
    )


def unflatten(leaves: list[Any], spec: dict) -> Any:
    """Rebuild the nested structure described by ``spec`` from ``leaves``."""
    it = iter(leaves)
    return fold_spec(spec, lambda: next(it), _build, lambda spec: spec.get("v"))


def _build(spec: dict, children: list) -> Any:
    kind = spec["t"]
    if kind == "tuple":
        return tuple(children)
    if kind == "list":
        return children
    if kind == "dict":
        return dict(zip(spec["keys"], children))
    if kind == "namedtuple":
        return namedtuple_class(spec["name"], spec["fields"])(*children)
    raise ValueError(f"unknown pytree node kind {kind!r}")


def namedtuple_class(name: str, fields: list[str]) -> type:
    """One class per (name, fields), so results of two calls compare equal by type.

    ``torch.return_types.X`` names give back PyTorch's own class (looked up in that one
    module, never imported by name), so ``out.values`` and ``isinstance`` work as in eager.
    """
    prefix = "torch.return_types."
    if name.startswith(prefix):
        import torch

        cls = getattr(torch.return_types, name[len(prefix) :], None)
        if isinstance(cls, type):
            return lambda *children: cls(children)
    key = (name, tuple(fields))
    if key not in _namedtuple_classes:
        _namedtuple_classes[key] = collections.namedtuple(name, fields)
    return _namedtuple_classes[key]


def contains_mutable(spec: dict) -> bool:
    """True when a list or dict appears anywhere in the structure."""
    if spec["t"] in ("list", "dict"):
        return True
    return any(contains_mutable(c) for c in spec.get("c", ()))


def describe_path(spec: dict, leaf_index: int) -> str:
    """``output[1]['logits']``-style path of the ``leaf_index``-th leaf, for messages."""
    counter = [0]
    found = _find(spec, leaf_index, counter, "")
    return found if found is not None else f"leaf {leaf_index}"


def _find(spec, target, counter, path):
    if spec["t"] == "leaf":
        if counter[0] == target:
            return path or "[output]"
        counter[0] += 1
        return None
    for i, child in enumerate(spec.get("c", ())):
        key = spec["keys"][i] if spec["t"] == "dict" else i
        if spec["t"] == "namedtuple":
            step = f".{spec['fields'][i]}"
        else:
            step = f"[{key!r}]"
        hit = _find(child, target, counter, path + step)
        if hit is not None:
            return hit
    return None


def tuple_text(items: list[str]) -> str:
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def render(spec: dict, leaf, namedtuple) -> str:
    """Python-like text for a structure: ``leaf()`` gives the text of the next leaf,
    ``namedtuple(spec, items)`` the text of a named tuple. Shared by the printer and the
    code generator, so ``.graph`` and ``.code`` spell outputs the same way."""

    def node(spec: dict, items: list[str]) -> str:
        kind = spec["t"]
        if kind == "list":
            return "[" + ", ".join(items) + "]"
        if kind == "dict":
            return "{" + ", ".join(f"{k!r}: {v}" for k, v in zip(spec["keys"], items)) + "}"
        if kind == "namedtuple":
            return namedtuple(spec, items)
        return tuple_text(items)

    return fold_spec(
        spec, leaf, node, lambda spec: "None" if spec["t"] == "none" else repr(spec["v"])
    )


def fold_spec(spec: dict | None, leaf, node, empty=None):
    """Fold a nesting spec bottom-up: ``leaf()`` at each leaf (in order), ``empty(spec)`` at
    ``none``/``const`` (default: None), ``node(spec, children)`` at tuples, lists, dicts and
    named tuples. The one walker of specs: printing, code generation, unpacking results and
    counting leaves are all folds."""
    if spec is None:
        return empty(spec) if empty else None
    kind = spec["t"]
    if kind == "leaf":
        return leaf()
    if kind in ("none", "const"):
        return empty(spec) if empty else None
    return node(spec, [fold_spec(c, leaf, node, empty) for c in spec["c"]])


def count_leaves(spec: dict | None) -> int:
    """How many leaves a spec has."""
    return fold_spec(spec, lambda: 1, lambda _spec, children: sum(children), lambda _spec: 0)


def is_tensor(x) -> bool:
    """The leaf test of tracebridge's pytrees: tensors are leaves."""
    return isinstance(x, torch.Tensor)
