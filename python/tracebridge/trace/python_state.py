"""Python state a module's code may write outside its own attributes, kept before a run
and put back after it: the attributes of plain objects the module holds, the class
attributes of its classes, and the contents of the containers and numpy arrays kept there.

Note: why, and what it costs.
  Tracing runs the code many times (the recording, the check, the size-1 probes, the other
  training mode, a compile's warm-up) where eager use ran it never: a call counter kept on
  a config object (``self.cfg.count += 1``), on the class (``type(self).count += 1``), in
  a ``collections.Counter``, a ``deque`` of recent calls or a numpy array (``self.arr +=
  1``) would end the trace moved by each run, and the next eager call would start from
  there. trace/capture.py puts back the module's own attributes; this does the same one
  and two levels further out, after every run (``capture.preserved``), as cheaply as it
  can: a namespace is kept as which object each name holds (a shallow copy of its
  ``__dict__``), a container as the identity of each entry, a numpy array (up to 2**20
  elements, not of Python objects) as a copy of its values; only what changed is written
  back. What is not kept -- an object three levels out, a larger array, an attribute a
  class refuses to have set back -- is named in a warning where it was seen to change, or
  left as it is where nothing could see it (docs/divergence.md).
"""

from __future__ import annotations

import collections
import inspect
import operator
import sys

import torch

_ELEMENTS = 2**20  # a numpy array with more elements is not copied
_OBJECT_DEPTH = 2  # plain objects held by a module (1), and by those (2)
# Kinds with an instance __dict__ that are no plain object: containers (an OrderedDict has
# one), modules, tensors, classes.
_NOT_OBJECTS = (
    torch.nn.Module,
    torch.Tensor,
    type,
    dict,
    list,
    tuple,
    set,
    frozenset,
    collections.deque,
)


def instance_dict(value) -> dict | None:
    """``value``'s own attribute dict, read without running its class's code: a proxy's
    ``__getattr__`` may do anything (reticulate's ``r`` object evaluates the name as R
    code)."""
    try:
        found = object.__getattribute__(value, "__dict__")
    except Exception:  # noqa: BLE001 - no dict, or a descriptor that refuses
        return None
    return found if isinstance(found, dict) else None


# type -> whether no instance of it is a plain object, told by its type alone: a builtin
# scalar (no instance dict) or a kind of _NOT_OBJECTS. Every run of the code reads every
# attribute of every sub-module (capture.preserved), mostly of these types.
_NEVER_PLAIN: dict[type, bool] = {}
_SCALARS = frozenset({int, float, bool, complex, str, bytes, type(None)})


def plain_object(value) -> bool:
    """Whether ``value`` is an instance of a user's class holding attributes (not a module,
    a tensor, a class, a function or a Python module)."""
    kind = type(value)
    never = _NEVER_PLAIN.get(kind)
    if never is None:
        if len(_NEVER_PLAIN) > 4096:  # classes made on the fly: the table stays small
            _NEVER_PLAIN.clear()
        never = _NEVER_PLAIN[kind] = kind in _SCALARS or issubclass(kind, _NOT_OBJECTS)
    if never:
        return False
    return (
        instance_dict(value) is not None
        and not isinstance(value, _NOT_OBJECTS)
        and not callable(value)
        and not inspect.ismodule(value)
    )


def _ndarray():
    numpy = sys.modules.get("numpy")
    return numpy.ndarray if numpy is not None else None


def container_kinds() -> tuple[type, ...]:
    """The kinds :func:`kept_contents` keeps (for a quick ``isinstance`` first)."""
    ndarray = _ndarray()
    kinds = (dict, list, set, collections.deque, bytearray)
    return kinds + (ndarray,) if ndarray is not None else kinds


def kept_contents(value):
    """What ``value``'s contents are now, to compare and put back (:func:`put_back`): a
    dict of any kind (a ``Counter``, a ``defaultdict``, an ``OrderedDict``), a list, a set,
    a deque, a bytearray, a numpy array; None for anything else (or where it cannot be
    read)."""
    try:
        if isinstance(value, collections.OrderedDict):
            items = list(collections.OrderedDict.items(value))
            return ("odict", items, [id(x) for kv in items for x in kv])
        if isinstance(value, dict):
            # raw entries: no subclass's __getitem__ or __missing__ runs, no key is hashed
            items = list(dict.items(value))
            return ("dict", items, [id(x) for kv in items for x in kv])
        if isinstance(value, (list, set, collections.deque)):
            items = list(value) if not isinstance(value, list) else list.copy(value)
            return ("items", items, list(map(id, items)))
        if isinstance(value, bytearray):
            return ("bytes", bytes(value), None)
        ndarray = _ndarray()
        if (
            ndarray is not None
            and isinstance(value, ndarray)
            and value.size <= _ELEMENTS
            and value.dtype != object
            and value.flags.writeable
        ):
            return ("array", value.copy(), None)
    except Exception:  # a container that cannot be read is left as it is
        return None
    return None


def contents_changed(value, kept) -> bool:
    """Whether ``value``'s contents differ from ``kept`` (:func:`kept_contents`'s)."""
    if kept is None:
        return False
    kind, copy, ids = kept
    try:
        if kind == "bytes":
            return bytes(value) != copy
        if kind == "array":
            return (
                value.shape != copy.shape
                or value.dtype != copy.dtype
                or value.tobytes() != copy.tobytes()
            )
        if kind == "odict":
            now = [id(x) for kv in collections.OrderedDict.items(value) for x in kv]
        elif kind == "dict":
            now = [id(x) for kv in dict.items(value) for x in kv]
        else:
            now = list(map(id, value))
        return len(now) != len(ids) or not all(map(operator.eq, now, ids))
    except Exception:  # a container that cannot be compared is taken as unchanged
        return False


def put_back(value, kept) -> None:
    """Write ``kept``'s contents back into ``value``, in place (the same object: other code
    may hold it). Raises where the container refuses."""
    kind, copy, _ = kept
    if kind == "odict":
        collections.OrderedDict.clear(value)
        for key, item in copy:
            collections.OrderedDict.__setitem__(value, key, item)
    elif kind == "dict":
        dict.clear(value)
        dict.update(value, copy)  # stored hashes: no key's __hash__ runs
    elif kind == "items":
        value.clear()
        (value.update if isinstance(value, set) else value.extend)(copy)
    elif kind == "bytes":
        value[:] = copy
    elif kind == "array":
        if value.shape != copy.shape or value.dtype != copy.dtype:
            raise ValueError("the array was resized in place")
        value[...] = copy


class _Namespace:
    """One object's (or class's) attributes: which object each name holds, and the
    contents of the containers among them."""

    def __init__(self, owner, label: str, attrs: dict):
        self.owner = owner
        self.label = label
        self.attrs = dict(attrs)
        self.ids = list(map(id, self.attrs.values()))
        self.names = list(self.attrs)
        self.contents = {}
        for name, value in self.attrs.items():
            kept = kept_contents(value)
            if kept is not None:
                self.contents[name] = kept

    def _current(self) -> dict:
        return vars(self.owner)

    def changed(self) -> list[str]:
        now = self._current()
        found = []
        if list(now) != self.names or list(map(id, now.values())) != self.ids:
            found = [
                name
                for name in {**now, **self.attrs}
                if now.get(name, _MISSING) is not self.attrs.get(name, _MISSING)
            ]
        found += [
            name
            for name, kept in self.contents.items()
            if name not in found and contents_changed(self.attrs[name], kept)
        ]
        return [f"{self.label}.{name}" for name in found]

    def restore(self) -> list[str]:
        """Put every attribute back; the labels of those that could not be."""
        failed = []
        now = self._current()
        if list(now) != self.names or list(map(id, now.values())) != self.ids:
            for name in [n for n in now if n not in self.attrs]:
                failed += self._set(name, _MISSING)
            for name, value in self.attrs.items():
                if now.get(name, _MISSING) is not value:
                    failed += self._set(name, value)
        for name, kept in self.contents.items():
            value = self.attrs[name]
            if contents_changed(value, kept):
                try:
                    put_back(value, kept)
                except Exception:
                    failed.append(f"{self.label}.{name}")
        return failed

    def _set(self, name: str, value) -> list[str]:
        # An instance's __dict__ is written directly: no __setattr__ of its class runs
        # (a frozen dataclass, a config that validates).
        table = vars(self.owner)
        if value is _MISSING:
            table.pop(name, None)
        else:
            table[name] = value
        return []


class _ClassNamespace(_Namespace):
    """A class's own attributes (``type(self).count``): set back through the class, whose
    ``__dict__`` is read-only."""

    def _set(self, name: str, value) -> list[str]:
        try:
            if value is _MISSING:
                delattr(self.owner, name)
            else:
                setattr(self.owner, name, value)
        except Exception:
            return [f"{self.label}.{name}"]
        return []


_MISSING = object()


def _library_class(klass: type) -> bool:
    """torch's own classes (and ``object``): their attributes are not the model's state."""
    module = klass.__module__ or ""
    return klass is object or module == "torch" or module.startswith("torch.")


class Reachable:
    """The plain objects a module holds (two levels out) and its classes' own attributes,
    as they are now; :meth:`restore` puts back what a run changed, :meth:`changed` names
    it. (The module's own attributes are trace/capture.py's.)

    >>> import torch
    >>> class Config:
    ...     count = 0
    >>> class Counting(torch.nn.Module):
    ...     calls = 0
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.cfg = Config()
    ...     def forward(self, x):
    ...         self.cfg.count += 1
    ...         type(self).calls += 1
    ...         return x
    >>> model = Counting()
    >>> kept = Reachable(model)
    >>> _ = model(1)
    >>> sorted(kept.changed())
    ['Counting.calls', 'cfg.count']
    >>> kept.restore()
    []
    >>> model.cfg.count, Counting.calls
    (0, 0)
    """

    def __init__(self, module: torch.nn.Module):
        self._spaces: list[_Namespace] = []
        seen: set[int] = set()
        classes: dict[type, None] = {}
        for prefix, mod in module.named_modules(remove_duplicate=True):
            classes.setdefault(type(mod), None)
            self._objects(vars(mod), prefix, seen, 1)
        for cls in classes:
            for klass in cls.__mro__:
                if id(klass) in seen or _library_class(klass):
                    continue
                seen.add(id(klass))
                self._spaces.append(_ClassNamespace(klass, klass.__qualname__, vars(klass)))

    def _objects(self, attrs: dict, prefix: str, seen: set, depth: int) -> None:
        for name, value in attrs.items():
            if id(value) in seen or not plain_object(value):
                continue
            if _library_class(type(value)):
                continue
            seen.add(id(value))
            label = f"{prefix}.{name}" if prefix else name
            space = _Namespace(value, label, vars(value))
            self._spaces.append(space)
            if depth < _OBJECT_DEPTH:
                self._objects(space.attrs, label, seen, depth + 1)

    def changed(self) -> list[str]:
        """``path.attribute`` of each attribute a run rebound or changed the contents of."""
        return [name for space in self._spaces for name in space.changed()]

    def restore(self) -> list[str]:
        """Put back what a run changed; the attributes that could not be put back."""
        return [name for space in self._spaces for name in space.restore()]
