"""``int`` and ``float`` while tracing, in the model's own modules: ``int(size)`` and
``float(size)`` stay traced numbers.

Note: why and where ``int`` and ``float`` are replaced.
  CPython copies whatever ``__int__`` returns into a plain int, so ``int(n)`` of a traced
  size could only guard its value: transformers' MobileNetV2 pads with ``in_height =
  int(features.shape[-2])`` and the trace was fixed to the example's image size, though
  the size only goes into arithmetic, a branch on its parity and ``F.pad``. So while
  tracing, ``int`` of a traced number gives a traced number (a ``SymInt`` as it is, a
  ``SymFloat`` truncated by a recorded op): arithmetic on it is recorded, a size passed to
  an op stays a reference, and a decision on it (a comparison in an ``if``, ``range``, an
  index) is guarded where it is made, as for any size. Any other argument (``int("3")``,
  ``int(t)`` of a tensor, ``int()``) gets the builtin's own answer. ``float`` is the same
  (``__float__`` must return a plain float): ``float(n)`` of a traced size is the traced
  ``n * 1.0`` (``x / float(x.shape[0])``, positions over ``float(seq_len)``).

  The stand-in is not the builtin: PyTorch's argument parser and numpy take only the
  builtin as a dtype (``torch.ones(n, dtype=int)``), and ``type(v) is int`` tells them
  apart. So it is not put in ``builtins`` for all code: it is bound as the global ``int``
  of the modules the traced code comes from -- the traced function's module, the modules
  of the traced module's classes (and their bases), and the modules of the functions
  those import (timm's ``pad_same``) -- and only of those whose source uses ``int`` as
  nothing but a call, an ``isinstance``/``issubclass`` class or an annotation (the
  stand-in's metaclass answers those as ``int`` does). A module that binds ``int`` itself
  is left alone. The bindings are removed when the last trace ends. Elsewhere
  ``int(size)`` guards the size's value, as before. ``float`` is bound by the same rule,
  on its own (a module may use ``float`` as a dtype and ``int`` only as a call).
"""

from __future__ import annotations

import ast
import builtins
import inspect
import linecache
import operator
import os
import re
import sys
import threading
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache

import torch

from . import helpers, python_random
from .numbers import SymFloat, SymInt, _Traced
from .text import ast_nodes, parse, parsed_tree

_original_int = builtins.int
_original_float = builtins.float


class _StandInMeta(type):
    """A stand-in reads as the builtin it replaces (``_builtin``) to ``isinstance``,
    ``issubclass``, ``==``, hashing and ``repr``."""

    def __instancecheck__(cls, obj):
        return isinstance(obj, cls._builtin)

    def __subclasscheck__(cls, sub):
        return issubclass(sub, cls._builtin)

    def __eq__(cls, other):
        return other is cls or other is cls._builtin

    def __hash__(cls):
        return hash(cls._builtin)

    def __repr__(cls):
        return repr(cls._builtin)


def _stand_in(builtin: type, kept: type, convert, args: tuple, kwargs: dict):
    """``builtin(*args, **kwargs)``, or for one traced number its traced conversion: the
    number itself where it is a ``kept`` already, else ``convert(tracer, number)``."""
    traced = _traced_argument(args, kwargs)
    if traced is None:
        return builtin(*args, **kwargs)
    tracer, value = traced
    return value if isinstance(value, kept) else convert(tracer, value)


def _traced_argument(args: tuple, kwargs: dict):
    """The tracer and the one traced number ``int(n)`` / ``float(n)`` was given, else None.
    A one-element tensor reads as its ``.item()``, which is a traced number while tracing
    (``int(batch_sizes[0])``); a bool stays a guarded bool, given to the builtin."""
    tracer = helpers.active_tracer()
    if tracer is None or len(args) != 1 or kwargs:
        return None
    value = args[0]
    if isinstance(value, torch.Tensor) and not isinstance(value, _Traced):
        with torch._C.DisableTorchFunction():  # no guard: .item() itself refuses others
            single = value.numel() == 1 and not value.is_complex()
        if not single:
            return None  # the builtin's own answer (or its error)
        value = value.item()
    return (tracer, value) if isinstance(value, _Traced) else None


class traced_int(_original_int, metaclass=_StandInMeta):  # noqa: N801 - stands in for int
    """``int`` in the traced code's modules while tracing (see the note above)."""

    _builtin = _original_int

    def __new__(cls, *args, **kwargs):
        return _stand_in(
            _original_int, SymInt, lambda t, n: t.scalar_op("trunc", (n,)), args, kwargs
        )


class traced_float(_original_float, metaclass=_StandInMeta):  # noqa: N801 - stands in for float
    """``float`` in the traced code's modules while tracing: ``float(n)`` of a traced size
    is a traced number (``n * 1.0``, which CPython computes as ``float(n)``, rounding
    included), so ``x * float(x.shape[0])`` stays general."""

    _builtin = _original_float

    def __new__(cls, *args, **kwargs):
        return _stand_in(
            _original_float, SymFloat, lambda t, n: t.scalar_op("mul", (n, 1.0)), args, kwargs
        )


_STAND_INS = {"int": traced_int, "float": traced_float}


_original_index = operator.index


def traced_index(value):
    """``operator.index`` while tracing: CPython copies an int subclass into a plain int
    without calling its ``__index__``, so a traced size would be baked with no guard; it
    is guarded as ``__index__`` guards it (patched by trace/patches.py)."""
    if isinstance(value, _Traced) and helpers.active_tracer() is not None:
        return value.__index__()
    return _original_index(value)


# --- where the stand-in is bound ------------------------------------------------------------

_SKIPPED = ("torch", "tracebridge", "numpy", "builtins", "typing", "functools")
# PyTorch's own modules that take ``int`` of a tensor the trace must keep traced:
# ``nn.GRU``/``nn.RNN`` check a packed sequence's hidden state against
# ``int(batch_sizes[0])``, which would fix the batch size.
_LIBRARY_MODULES = ("torch.nn.modules.rnn", "torch.nn.modules.batchnorm")
_lock = threading.Lock()
_bound: dict[tuple[str, str], int] = {}  # (module, name) -> traces that bound it


@contextmanager
def stand_ins_in_modules_of(fn: Callable) -> Iterator[None]:
    """Bind the stand-ins as ``int`` and ``float`` in the modules ``fn``'s code comes
    from, each where the module uses that name only as a call, while the block runs
    (nested and concurrent traces count)."""
    bindings = [
        (m.__name__, name)
        for m in _modules_of(fn)
        for name in _STAND_INS
        if _only_called(m.__name__, name)
    ]
    with _lock:
        for key in bindings:
            module_name, name = key
            module = sys.modules.get(module_name)
            if module is None:
                continue
            if _bound.get(key, 0) == 0:
                if name in vars(module):
                    continue  # the module binds the name itself
                setattr(module, name, _STAND_INS[name])
            _bound[key] = _bound.get(key, 0) + 1
    try:
        with math_names_in_modules_of(fn):
            yield
    finally:
        with _lock:
            for key in bindings:
                if key not in _bound:
                    continue
                _bound[key] -= 1
                if _bound[key] == 0:
                    del _bound[key]
                    module_name, name = key
                    module = sys.modules.get(module_name)
                    if module is not None and vars(module).get(name) is _STAND_INS[name]:
                        delattr(module, name)


_math_bound: dict[tuple[str, str], list] = {}  # (module, name) -> [traces, the original]


@contextmanager
def math_names_in_modules_of(fn: Callable) -> Iterator[None]:
    """``from math import log2`` binds the C function as a global of the module: it reads
    a traced size's value without asking it, past the ``math.log2`` the trace replaces
    (trace/patches.py), and ``int(log2(n))`` would be the example's. While the block runs,
    such a name in the traced code's modules is bound to the traced function, which
    records a scalar op for a traced number and is ``math``'s own for anything else.
    ``from random import uniform`` likewise gets trace/python_random.py's replacement."""
    from .patches import _TRACED_MATH, _original_math  # patches imports this module

    replacements = {id(f): (f, _TRACED_MATH[name]) for name, f in _original_math.items()}
    replacements.update(python_random.swapped())
    keys = []
    with _lock:
        for module, global_name in _math_globals(fn, replacements):
            value = vars(module).get(global_name, _UNSET)
            pair = replacements.get(id(value))
            if pair is None or value is not pair[0]:
                continue
            key = (module.__name__, global_name)
            entry = _math_bound.setdefault(key, [0, value])
            if entry[0] == 0:
                setattr(module, global_name, pair[1])
            entry[0] += 1
            keys.append(key)
    try:
        yield
    finally:
        with _lock:
            for key in keys:
                entry = _math_bound[key]
                entry[0] -= 1
                if entry[0] == 0:
                    del _math_bound[key]
                    module = sys.modules.get(key[0])
                    if module is not None:
                        setattr(module, key[1], entry[1])


_UNSET = object()


class _Scan:
    """Where :func:`_math_globals` found the functions to replace, and what it read to
    find them: the modules it reached (each with its globals, kept so that no id of theirs
    is taken by a new object) and the number of modules loaded."""

    def __init__(self, start: list, reached: list, replaced: frozenset, found: list):
        self.start = start
        self.reached = [(m, list(vars(m).values())) for m in reached]
        self.ids = [list(map(id, values)) for _, values in self.reached]
        self.loaded = len(sys.modules)
        self.replaced = replaced
        self.found = found

    def holds(self, start: list, replaced: frozenset) -> bool:
        """Whether a scan now would find the same: the same modules to start from, the
        same functions to replace, no module loaded or reloaded since, and every module
        reached holding the same object under every name (new globals, or one rebound,
        can reach other modules)."""
        return (
            self.loaded == len(sys.modules)
            and self.replaced == replaced
            and len(start) == len(self.start)
            and all(map(operator.is_, start, self.start))
            and all(
                sys.modules.get(m.__name__) is m and list(map(id, vars(m).values())) == ids
                for (m, _), ids in zip(self.reached, self.ids)
            )
        )


# the traced code's modules (their ids) -> the last scan from them. Note: why. Every
# recording binds the math and random functions in the modules the code reaches (a
# transformers model reaches 250 modules of 11,000 globals: 4 to 7 ms a recording, and a
# trace with its checks and probes records 10 to 30 times); the scan is read again only
# where something it read has changed.
_SCANS: dict[tuple[int, ...], _Scan] = {}


def _math_globals(fn: Callable, replacements: dict) -> list[tuple[types.ModuleType, str]]:
    """(module, global name) of each function of ``replacements`` (id -> (the function,
    its replacement)) bound as a global in the modules the traced code reaches."""
    start = _modules_of(fn)
    key = tuple(map(id, start))
    replaced = frozenset(replacements)
    scan = _SCANS.get(key)
    if scan is not None and scan.holds(start, replaced):
        return scan.found
    reached = _modules_reached(fn, start)
    found = []
    for module in reached:
        for global_name, value in list(vars(module).items()):
            pair = replacements.get(id(value))
            if pair is not None and value is pair[0]:
                found.append((module, global_name))
    if len(_SCANS) >= 64:
        _SCANS.clear()
    _SCANS[key] = _Scan(start, reached, replaced, found)
    return found


_REACH_DEPTH = 3  # imports followed from the traced code's own modules
_REACH_LIMIT = 400  # modules at most


def _modules_reached(fn: Callable, start: list | None = None) -> list[types.ModuleType]:
    """The traced code's modules (:func:`_modules_of`) and the modules they reach through
    their globals, a few imports deep: a module imported whole (``from . import util``),
    and the modules of the functions and classes imported by name. Not the standard
    library, torch, numpy or tracebridge. A name bound there to a math or random function
    (``from math import log2`` in a helper the model calls) is the C function otherwise."""
    found = {m.__name__: m for m in (_modules_of(fn) if start is None else start)}
    frontier = list(found.values())
    for _ in range(_REACH_DEPTH):
        reached = []
        for module in frontier:
            for value in list(vars(module).values()):
                if isinstance(value, types.ModuleType):
                    candidate = value
                elif isinstance(value, (types.FunctionType, type)):
                    candidate = sys.modules.get(getattr(value, "__module__", None) or "")
                else:
                    continue
                if candidate is None or candidate.__name__ in found or not _reachable(candidate):
                    continue
                found[candidate.__name__] = candidate
                reached.append(candidate)
                if len(found) >= _REACH_LIMIT:
                    return list(found.values())
        frontier = reached
    return list(found.values())


def _reachable(module: types.ModuleType) -> bool:
    if module.__name__.split(".")[0] in _SKIPPED:
        return False
    path = getattr(module, "__file__", None)
    return bool(path) and not _in_stdlib(path)


@lru_cache(maxsize=4096)
def _in_stdlib(path: str) -> bool:
    return os.path.realpath(path).startswith(python_random.STDLIB)


def _modules_of(fn: Callable) -> list[types.ModuleType]:
    """The traced code's modules: ``fn``'s, those of the classes of the module it is (or
    is a method of, or closes over), with their bases, and the modules of the functions
    these import."""
    found: dict[str, types.ModuleType] = {}

    def add(name: str | None) -> None:
        module = sys.modules.get(name) if name else None
        if module is not None and name.split(".")[0] not in _SKIPPED:
            found.setdefault(name, module)

    target = inspect.unwrap(getattr(fn, "__func__", fn))
    owners = [fn if isinstance(fn, torch.nn.Module) else getattr(fn, "__self__", None)]
    owners += [cell.cell_contents for cell in getattr(target, "__closure__", None) or ()]
    classes = {type(m) for o in owners if isinstance(o, torch.nn.Module) for m in o.modules()}
    for cls in classes:
        for base in cls.__mro__:
            add(base.__module__)
    add(getattr(target, "__module__", None))
    for module in list(found.values()):
        for value in list(vars(module).values()):
            if isinstance(value, types.FunctionType):
                add(value.__module__)
    for name in _LIBRARY_MODULES:
        if name in sys.modules:
            found.setdefault(name, sys.modules[name])
    return list(found.values())


@lru_cache(maxsize=1024)
def _only_called_in(module_name: str) -> frozenset[str]:
    """The stand-ins' names (``int``, ``float``) that module ``module_name``'s source uses
    only as a call, a class in ``isinstance``/``issubclass`` or an annotation, and never
    binds; empty where the source cannot be read. Parsed once per module: a transformers
    model reaches fifty modules of thousands of lines."""
    try:
        module = sys.modules.get(module_name)
        source = inspect.getsource(module)
        # the tree trace/text.py keeps of the file, where it holds this very text
        filename = inspect.getsourcefile(module)
        tree = None
        if filename and "".join(linecache.getlines(filename)) == source:
            tree = parsed_tree(filename)
        return names_only_called(source, tuple(_STAND_INS), tree)
    except (OSError, TypeError, SyntaxError, ValueError):
        return frozenset()


def _only_called(module_name: str, name: str) -> bool:
    return name in _only_called_in(module_name)


def only_called(source: str, name: str = "int") -> bool:
    """Whether ``source`` uses the builtin ``name`` only as a call, a class in
    ``isinstance``/``issubclass`` or an annotation, and never binds it."""
    return name in names_only_called(source, (name,))


def names_only_called(
    source: str, names: tuple[str, ...], tree: ast.AST | None = None
) -> frozenset[str]:
    """Those of ``names`` that ``source`` uses only as a call, a class in
    ``isinstance``/``issubclass`` or an annotation, and never binds (one parse and one
    walk for all of them; a name that is no word of the text is not parsed for).
    ``tree``: ``source`` already parsed, if it was."""
    present = {name for name in names if re.search(rf"\b{re.escape(name)}\b", source)}
    if not present:
        return frozenset(names)
    if tree is None:
        tree = parse(source)
    allowed: set[int] = set()
    uses: list[ast.Name] = []
    not_only: set[str] = set()
    for node in ast_nodes(tree):
        for annotation in _annotations(node):
            allowed.update(map(id, ast_nodes(annotation)))
        if isinstance(node, ast.Call):
            allowed.add(id(node.func))
            if getattr(node.func, "id", None) in ("isinstance", "issubclass"):
                for arg in node.args[1:]:
                    allowed.update(map(id, ast_nodes(arg)))
        elif isinstance(node, ast.Name):
            if node.id in present:
                uses.append(node)
        else:
            bound = _bound_name(node)
            if bound in present:
                not_only.add(bound)
    for node in uses:
        if not isinstance(node.ctx, ast.Load) or id(node) not in allowed:
            not_only.add(node.id)
    return frozenset(name for name in names if name not in not_only)


def _bound_name(node: ast.AST) -> str | None:
    """The name ``def int``, ``class int`` or ``import ... as int`` binds: a module with
    its own ``name`` is left alone."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name
    if isinstance(node, ast.alias):
        return node.asname or node.name
    return None


def _annotations(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, ast.arg):
        return [node.annotation] if node.annotation is not None else []
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return [node.returns] if node.returns is not None else []
    if isinstance(node, ast.AnnAssign):
        return [node.annotation]
    return []
