"""Python state that the traced code writes is left as the user's first call left it.

Note: why. Tracing runs the code once -- the user's first call -- and then runs it again:
the check (verify.py, dims.py, repeated.py: the code at other sizes, twice for state kept
between calls), the size-1 specialisations (specialise.py), the other training mode. A
global the code writes (a call counter, a list it appends to, a cache dict) would end with
the last of those runs' value, not the one call's the user made. ``capture.preserved``
puts the model's own state back; this does the same for the globals and closure variables
the code writes, as far as the code says so:

* global names the code mentions (its ``co_names``, nested functions' included) and its
  closure cells get their value back where a run rebound them (``global n; n += 1``,
  ``nonlocal``), and such a global that a later run created is removed again;
* lists, dicts, sets, bytearrays, deques and tensors (up to 2**20 elements) held there get
  their contents back, in place (the same object: other code may hold it);
* the code is the traced function with its nested functions, the Python functions it
  names in its globals (three levels deep, 1,000 functions at most), and for a module the
  methods of every sub-module's class defined outside torch.

* the attributes of what such a global (or cell) holds and of the functions themselves: a class's
  own attributes (``Cfg.calls += 1``), a plain object's (``obj.n += 1``, one level: not
  the objects it holds), a function's (``f.n = getattr(f, "n", 0) + 1``), with the
  contents of their containers; classes and objects of PyTorch's, tracebridge's and the
  standard library's are not state of the code (a logger's level cache).

Not restored (documented in docs/divergence.md): globals written only by functions
reached otherwise than by name from the code (through an attribute, a method of another
object, a library), and objects two levels out (``obj.cfg.n``).

:meth:`KeptGlobals.where` names the line of the code that writes what changed, for the
refusal the check gives where the runs differ (a counter read by the code: api.trace).
"""

from __future__ import annotations

import collections
import contextlib
import dis
import functools
import operator
import os
import sys
import types

import torch

from ..trace import python_state

_CONTAINERS = (list, dict, set, bytearray, collections.deque)
# Global values that are code or namespaces, not state a call writes.
_NOT_STATE = (types.ModuleType, type, types.BuiltinFunctionType, types.FunctionType)
_DEPTH = 3
_FUNCTIONS = 1000  # functions read per trace at most: a large library is not walked whole
_MAX_ELEMENTS = 2**20
_MISSING = object()


# torch's and tracebridge's own code, by where it lives: a function's ``__module__`` is
# whatever namespace defined it (a doctest of this module, code exec'd by a user), its file
# is not.
_LIBRARY_DIRS = tuple(
    os.path.dirname(os.path.abspath(package.__file__)) + os.sep
    for package in (torch, sys.modules[__name__.split(".")[0]])
)


def _skipped(fn: types.FunctionType) -> bool:
    return os.path.abspath(fn.__code__.co_filename).startswith(_LIBRARY_DIRS)


def _codes(code: types.CodeType):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def _library_type(klass: type) -> bool:
    """torch's, tracebridge's and the standard library's classes (and builtins): their
    instances and their own attributes are not the user code's state."""
    top = (getattr(klass, "__module__", None) or "builtins").split(".")[0]
    return top in _LIBRARY_MODULES or top in sys.stdlib_module_names


_LIBRARY_MODULES = frozenset({"builtins", "torch", "tracebridge", "numpy"})


class _Slots:
    """The places a run of the code may write: (globals dict, name), closure cells, and
    the attributes of the classes, plain objects and functions it names."""

    def __init__(self):
        self.names: dict[tuple[int, str], tuple[dict, str]] = {}
        self.cells: dict[int, types.CellType] = {}
        self.seen: set[int] = set()
        self.spaces: dict[int, python_state._Namespace] = {}
        self.codes: list[types.CodeType] = []

    def space(self, owner, label: str) -> None:
        """Keep ``owner``'s attributes (a class's through the class: see _ClassNamespace)."""
        if id(owner) in self.spaces:
            return
        if isinstance(owner, type):
            if _library_type(owner):
                return
            kind = python_state._ClassNamespace
        elif isinstance(owner, types.FunctionType) or (
            python_state.plain_object(owner) and not _library_type(type(owner))
        ):
            kind = python_state._Namespace
        else:
            return
        attrs = python_state.instance_dict(owner) if kind is python_state._Namespace else None
        self.spaces[id(owner)] = kind(owner, label, attrs if attrs is not None else vars(owner))

    def function(self, fn, depth: int = 0) -> None:
        if isinstance(fn, functools.partial):
            fn = fn.func
        fn = getattr(fn, "__func__", fn)  # a bound method, a staticmethod, a classmethod
        if not isinstance(fn, types.FunctionType) and depth == 0 and callable(fn):
            fn = type(fn).__call__  # an object called as a function
        if not isinstance(fn, types.FunctionType) or id(fn) in self.seen or _skipped(fn):
            return
        if len(self.seen) >= _FUNCTIONS:
            return
        self.seen.add(id(fn))
        self.space(fn, fn.__qualname__)  # f.calls = f.calls + 1
        self.codes.append(fn.__code__)
        table = fn.__globals__
        # Names, not opcodes: every global name the code mentions that holds a value
        # (not a module, class or function) is kept, written or not -- putting back a
        # binding nothing changed does nothing, and reading co_names costs far less than
        # disassembling (a large model's classes reach hundreds of functions).
        for code in _codes(fn.__code__):
            for name in code.co_names:
                value = table.get(name, _MISSING)
                if value is _MISSING:  # a global a later run may create: removed again
                    self.names[(id(table), name)] = (table, name)
                elif isinstance(value, types.FunctionType):
                    if depth < _DEPTH:
                        self.function(value, depth + 1)
                elif isinstance(value, type):
                    self.space(value, value.__qualname__)  # Cfg.calls += 1
                elif not isinstance(value, _NOT_STATE):
                    self.names[(id(table), name)] = (table, name)
                    self.space(value, name)  # obj.n += 1 (a plain object's attributes)
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
            self.cells[id(cell)] = cell
            with contextlib.suppress(ValueError):  # an empty cell has no contents
                self.space(cell.cell_contents, name)  # a closure's object, class, function

    def module(self, module: torch.nn.Module) -> None:
        classes = {type(m) for m in module.modules()}
        for cls in classes:
            for klass in cls.__mro__:
                if klass.__module__.startswith(("torch", "tracebridge")) or klass is object:
                    continue
                for value in vars(klass).values():
                    self.function(value)


def _version(tensor: torch.Tensor) -> int | None:
    try:
        return tensor._version
    except RuntimeError:  # an inference tensor keeps no version
        return None


def _copy(value):
    if isinstance(value, torch.Tensor):
        if value.numel() > _MAX_ELEMENTS or value.is_meta:
            return None
        with torch.no_grad():
            return value.detach().clone(), _version(value)
    try:
        if isinstance(value, dict):
            # raw entries: a subclass's __getitem__ is not run (dict.copy runs it for an
            # OrderedDict subclass: transformers' ACT2FN, whose __getitem__ makes an
            # instance of the class it holds, got instances put back)
            return dict(dict.items(value))
        if isinstance(value, set):
            return set(value)
        if isinstance(value, bytearray):
            return bytes(value)
        if isinstance(value, list):
            return list.copy(value)  # raw entries, as for a dict
        if isinstance(value, collections.deque):
            return list(value)
    except Exception:  # a container that cannot be copied is left as it is
        return None
    return None


def _put_back(value, copy) -> None:
    if copy is None:
        return
    if isinstance(value, torch.Tensor):
        copy, version = copy
        # Only a tensor a run wrote: most are only read, and some cannot be written at
        # all (an inference tensor, an expanded view: copy_ raised and the trace failed).
        # A write through ``.data`` keeps the version: the values tell.
        if value.shape != copy.shape or value.dtype != copy.dtype:
            return
        try:
            if _version(value) == version and torch.equal(value, copy):
                return
            with torch.no_grad(), torch.inference_mode(value.is_inference()):
                value.copy_(copy)
        except RuntimeError:  # a tensor that cannot be written back is left as it is
            pass
        return
    try:
        # Only a container a run changed (by identity: no element's __eq__ runs): most are
        # only read, and some refuse writes (torch.fx's immutable_dict failed the trace).
        if _unchanged(value, copy):
            return
        if isinstance(value, dict):
            value.clear()
            value.update(copy)
        elif isinstance(value, (set, collections.deque)):
            value.clear()
            (value.update if isinstance(value, set) else value.extend)(copy)
        else:  # list, bytearray
            value[:] = copy
    except Exception:  # a container that cannot be written back is left as it is
        pass


def _changed_inside(value, copy) -> bool:
    """Whether a kept container or tensor's contents differ from ``copy`` (``_copy``'s)."""
    if copy is None or value is _MISSING:
        return False
    try:
        if isinstance(value, torch.Tensor):
            before, version = copy
            return _version(value) != version and not (
                value.shape == before.shape and torch.equal(value, before)
            )
        return not _unchanged(value, copy)
    except Exception:  # a container that cannot be compared is taken as unchanged
        return False


def _unchanged(value, copy) -> bool:
    if isinstance(value, bytearray):
        return bytes(value) == copy
    if len(value) != len(copy):
        return False
    if isinstance(value, dict):
        return all(k is j and v is w for (k, v), (j, w) in zip(dict.items(value), dict.items(copy)))
    if isinstance(value, set):
        return all(x in copy for x in value)
    return all(map(operator.is_, value, copy))


class KeptGlobals:
    """The values (and contents) of the globals and closure cells that ``code`` (a function
    or an ``nn.Module``) may write, as they are now; :meth:`restore` puts them back.

    >>> counter = []
    >>> def f(x):
    ...     counter.append(1)
    ...     return x
    >>> kept = KeptGlobals(f)
    >>> f(1), f(2), len(counter)
    (1, 2, 2)
    >>> kept.restore(); len(counter)
    0
    """

    def __init__(self, code):
        slots = _Slots()
        if isinstance(code, torch.nn.Module):
            slots.module(code)
        else:
            slots.function(code)
        self._names = [
            (table, name, table.get(name, _MISSING), _copy(table.get(name)))
            for table, name in slots.names.values()
        ]
        self._spaces = list(slots.spaces.values())
        self._codes = slots.codes
        self._cells = []
        for cell in slots.cells.values():
            try:
                value = cell.cell_contents
            except ValueError:
                value = _MISSING
            self._cells.append((cell, value, _copy(value)))

    def __bool__(self) -> bool:
        return bool(self._names or self._cells or self._spaces)

    def changed(self) -> list[str]:
        """The globals (by name) and closure variables a run since rebound or changed the
        contents of (tensors by version or values), as kept: what a call of the trace,
        which records tensor operations only, will not change again."""
        found = [
            name
            for table, name, value, copy in self._names
            if table.get(name, _MISSING) is not value or _changed_inside(value, copy)
        ]
        cells = 0
        for cell, value, copy in self._cells:
            try:
                now = cell.cell_contents
            except ValueError:
                now = _MISSING
            cells += now is not value or _changed_inside(value, copy)
        attributes = [name for space in self._spaces for name in space.changed()]
        return found + attributes + ["a closure variable"] * min(cells, 1)

    def where(self, name: str) -> str | None:
        """``file:line`` of the code that writes ``name`` (as :meth:`changed` names it:
        ``N``, ``Cfg.calls``), or, for a container changed in place, that first reads it."""
        attribute = name.rpartition(".")[2]
        stores = ("STORE_ATTR",) if "." in name else ("STORE_GLOBAL", "STORE_DEREF")
        first_read = None
        for code in self._codes:
            for inner in _codes(code):
                for instruction in dis.get_instructions(inner):
                    line = instruction.positions.lineno if instruction.positions else None
                    if instruction.argval != attribute or line is None:
                        continue
                    if instruction.opname in stores:
                        return f"{inner.co_filename}:{line}"
                    if first_read is None and instruction.opname.startswith("LOAD_"):
                        first_read = f"{inner.co_filename}:{line}"
        return first_read

    def restore(self) -> None:
        """Put every kept value back (contents in place, then the bindings, then the
        attributes)."""
        for space in self._spaces:
            space.restore()
        for table, name, value, copy in self._names:
            if value is _MISSING:
                table.pop(name, None)
                continue
            _put_back(value, copy)
            table[name] = value
        for cell, value, copy in self._cells:
            if value is _MISSING:
                continue
            _put_back(value, copy)
            cell.cell_contents = value
