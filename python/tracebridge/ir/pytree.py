"""Nested inputs and outputs: flatten to a list of leaves plus a JSON-able spec.

A spec is a small dict: ``{"t": "tuple" | "list" | "dict" | "namedtuple" | "leaf" |
"none" | "const", ...}``. Leaves are tensors (and, at the output, traced values);
``const`` holds a Python scalar or string that the function returned as is.

Note: the user's classes. A file stores a dataclass or named tuple as ``namedtuple`` (its
class's bare name and fields), which R reads as a named list. In the process, the user's
own class comes back: a spec made by :func:`flatten` is a :class:`ClassSpec`, a dict that
also holds the class it was made from (never written: JSON writes the plain dict), so the
traced object returns that class. A loaded spec names its class only by its bare name: it
is found among the classes of modules already imported (``sys.modules``, never importing
anything, never reading a module's ``__getattr__``), where exactly one dataclass or named
tuple of that name has exactly those fields; else a named tuple of that name and fields
stands in, as before. A found class is built without running its ``__init__`` or
``__post_init__`` (the graph's outputs are the fields' values after them). A dict subclass
(Hugging Face's ``ModelOutput``) is a ``dict`` and comes back as a plain dict.
"""

from __future__ import annotations

import collections
import dataclasses
import sys
from typing import Any

import torch

LEAF = {"t": "leaf"}
_CONST_TYPES = (bool, int, float, str)
_namedtuple_classes: dict[tuple[str, tuple[str, ...]], type] = {}
# (name, fields) -> the class found among imported modules (None: none or several), and the
# number of modules then imported: looked for again only when more modules are imported.
_found_classes: dict[tuple[str, tuple[str, ...]], tuple[type | None, int]] = {}


class ClassSpec(dict):
    """A spec (a plain dict, equal to one) that also holds the Python class its structure
    was made from, in memory only: a dataclass or a user's named tuple."""

    cls: type

    def __reduce__(self):
        return dict, (dict(self),)  # copies and pickles are plain specs, as files are


def _with_class(spec: dict, cls: type) -> dict:
    out = ClassSpec(spec)
    out.cls = cls
    return out


def flatten(obj: Any, is_leaf, sizes: bool = False) -> tuple[list[Any], dict]:
    """Return ``(leaves, spec)``; ``is_leaf(x)`` says what counts as a leaf. ``sizes``
    (a traced result): a ``torch.Size`` is a ``tuple`` spec with ``size: true``, which
    :func:`unflatten` builds as a ``torch.Size`` again (elsewhere it is a plain tuple, so
    that an input passed as a tuple or a ``torch.Size`` is the same call)."""
    leaves: list[Any] = []
    spec = _flatten(obj, is_leaf, leaves, sizes)
    return leaves, spec


def _flatten(obj, is_leaf, leaves, sizes=False):
    if is_leaf(obj):
        leaves.append(obj)
        return LEAF
    if sizes and isinstance(obj, torch.Size):
        return {"t": "tuple", "size": True, "c": [_flatten(v, is_leaf, leaves) for v in obj]}
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
        children = [_flatten(v, is_leaf, leaves, sizes) for v in obj]
        spec = {
            "t": "namedtuple",
            "name": type(obj).__name__,
            "fields": list(obj._fields),
            "c": children,
        }
        return _with_class(spec, type(obj))
    if isinstance(obj, tuple):
        return {"t": "tuple", "c": [_flatten(v, is_leaf, leaves, sizes) for v in obj]}
    if isinstance(obj, list):
        return {"t": "list", "c": [_flatten(v, is_leaf, leaves, sizes) for v in obj]}
    if isinstance(obj, dict):
        keys = list(obj.keys())
        for key in keys:
            if not isinstance(key, (str, int)):
                raise TypeError(f"dict keys must be str or int, got {type(key).__name__}")
        children = [_flatten(obj[k], is_leaf, leaves, sizes) for k in keys]
        return {"t": "dict", "keys": keys, "c": children}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        fields = [f.name for f in dataclasses.fields(obj)]
        children = [_flatten(getattr(obj, f), is_leaf, leaves, sizes) for f in fields]
        spec = {"t": "namedtuple", "name": type(obj).__name__, "fields": fields, "c": children}
        return _with_class(spec, type(obj))
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
        return torch.Size(children) if spec.get("size") is True else tuple(children)
    if kind == "list":
        return children
    if kind == "dict":
        return dict(zip(spec["keys"], children))
    if kind == "namedtuple":
        return class_of(spec)(*children)
    raise ValueError(f"unknown pytree node kind {kind!r}")


def class_of(spec: dict):
    """The callable that builds a ``namedtuple`` spec's value from its children: the class
    the spec was made from (:class:`ClassSpec`), else :func:`namedtuple_class`."""
    if type(spec) is ClassSpec:
        return _builder(spec.cls)
    return namedtuple_class(spec["name"], spec["fields"])


def _builder(cls: type):
    """Build ``cls`` from its fields' values without running its ``__init__``."""
    if issubclass(cls, tuple):
        return lambda *children: tuple.__new__(cls, children)
    names = [f.name for f in dataclasses.fields(cls)]

    def build(*children):
        obj = object.__new__(cls)
        for name, value in zip(names, children):
            object.__setattr__(obj, name, value)  # a frozen dataclass's fields too
        return obj

    return build


def _fits(cls, name: str, fields: tuple[str, ...]) -> bool:
    if not isinstance(cls, type) or cls.__name__ != name:
        return False
    if issubclass(cls, tuple) and hasattr(cls, "_fields"):
        return tuple(cls._fields) == fields and not hasattr(cls, "n_sequence_fields")
    if dataclasses.is_dataclass(cls) and not issubclass(cls, dict):
        return tuple(f.name for f in dataclasses.fields(cls)) == fields
    return False


def imported_class(name: str, fields: tuple[str, ...]) -> type | None:
    """The one dataclass or named tuple called ``name`` with exactly ``fields`` among the
    top-level names of the modules imported now (None where none or several are)."""
    key = (name, fields)
    found, seen = _found_classes.get(key, (None, -1))
    if found is not None or seen == len(sys.modules):
        return found
    matches = set()
    for module in list(sys.modules.values()):
        table = getattr(module, "__dict__", None)
        cls = table.get(name) if isinstance(table, dict) else None
        if cls is not None and _fits(cls, name, fields):
            matches.add(cls)
    found = matches.pop() if len(matches) == 1 else None
    _found_classes[key] = (found, len(sys.modules))
    return found


def namedtuple_class(name: str, fields: list[str]) -> type:
    """One class per (name, fields), so results of two calls compare equal by type: the
    user's dataclass or named tuple where :func:`imported_class` finds exactly one, else a
    named tuple made here.

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
    found = imported_class(*key)
    if found is not None:
        return _builder(found)
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
