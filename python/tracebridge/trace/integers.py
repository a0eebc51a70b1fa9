"""``int`` while tracing, in the model's own modules: ``int(size)`` stays a traced size.

Note: why and where ``int`` is replaced.
  CPython copies whatever ``__int__`` returns into a plain int, so ``int(n)`` of a traced
  size could only guard its value: transformers' MobileNetV2 pads with ``in_height =
  int(features.shape[-2])`` and the trace was fixed to the example's image size, though
  the size only goes into arithmetic, a branch on its parity and ``F.pad``. So while
  tracing, ``int`` of a traced number gives a traced number (a ``SymInt`` as it is, a
  ``SymFloat`` truncated by a recorded op): arithmetic on it is recorded, a size passed to
  an op stays a reference, and a decision on it (a comparison in an ``if``, ``range``, an
  index) is guarded where it is made, as for any size. Any other argument (``int("3")``,
  ``int(t)`` of a tensor, ``int()``) gets the builtin's own answer.

  The stand-in is not the builtin: PyTorch's argument parser and numpy take only the
  builtin as a dtype (``torch.ones(n, dtype=int)``), and ``type(v) is int`` tells them
  apart. So it is not put in ``builtins`` for all code: it is bound as the global ``int``
  of the modules the traced code comes from -- the traced function's module, the modules
  of the traced module's classes (and their bases), and the modules of the functions
  those import (timm's ``pad_same``) -- and only of those whose source uses ``int`` as
  nothing but a call, an ``isinstance``/``issubclass`` class or an annotation (the
  stand-in's metaclass answers those as ``int`` does). A module that binds ``int`` itself
  is left alone. The bindings are removed when the last trace ends. Elsewhere
  ``int(size)`` guards the size's value, as before.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import operator
import sys
import threading
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache

import torch

from . import helpers
from .numbers import SymInt, _Traced

_original_int = builtins.int


class _TracedIntMeta(type):
    """The stand-in reads as ``int`` to ``isinstance``, ``issubclass``, ``==``, hashing
    and ``repr``."""

    def __instancecheck__(cls, obj):
        return isinstance(obj, _original_int)

    def __subclasscheck__(cls, sub):
        return issubclass(sub, _original_int)

    def __eq__(cls, other):
        return other is cls or other is _original_int

    def __hash__(cls):
        return hash(_original_int)

    def __repr__(cls):
        return repr(_original_int)


class traced_int(_original_int, metaclass=_TracedIntMeta):  # noqa: N801 - stands in for int
    """``int`` in the traced code's modules while tracing (see the note above)."""

    def __new__(cls, *args, **kwargs):
        tracer = helpers.active_tracer()
        if tracer is not None and len(args) == 1 and not kwargs and isinstance(args[0], _Traced):
            value = args[0]
            if isinstance(value, SymInt):
                return value
            return tracer.scalar_op("trunc", (value,))
        return _original_int(*args, **kwargs)


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
_lock = threading.Lock()
_bound: dict[str, int] = {}  # module name -> traces that bound it


@contextmanager
def int_in_modules_of(fn: Callable) -> Iterator[None]:
    """Bind the stand-in as ``int`` in the modules ``fn``'s code comes from, while the
    block runs (nested and concurrent traces count)."""
    names = [m.__name__ for m in _modules_of(fn) if _int_only_called(m.__name__)]
    with _lock:
        for name in names:
            module = sys.modules.get(name)
            if module is None:
                continue
            if _bound.get(name, 0) == 0:
                if "int" in vars(module):
                    continue  # the module binds int itself
                module.int = traced_int
            _bound[name] = _bound.get(name, 0) + 1
    try:
        yield
    finally:
        with _lock:
            for name in names:
                if name not in _bound:
                    continue
                _bound[name] -= 1
                if _bound[name] == 0:
                    del _bound[name]
                    module = sys.modules.get(name)
                    if module is not None and vars(module).get("int") is traced_int:
                        del module.int


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
    return list(found.values())


@lru_cache(maxsize=1024)
def _int_only_called(name: str) -> bool:
    """Whether module ``name``'s source uses ``int`` only as a call, a class in
    ``isinstance``/``issubclass`` or an annotation, and never binds it."""
    try:
        return int_only_called(inspect.getsource(sys.modules.get(name)))
    except (OSError, TypeError, SyntaxError, ValueError):
        return False


def int_only_called(source: str) -> bool:
    """Whether ``source`` uses the name ``int`` only as a call, a class in
    ``isinstance``/``issubclass`` or an annotation, and never binds it."""
    tree = ast.parse(source)
    allowed: set[int] = set()
    for node in ast.walk(tree):
        for annotation in _annotations(node):
            allowed.update(id(n) for n in ast.walk(annotation))
        if isinstance(node, ast.Call):
            allowed.add(id(node.func))
            if getattr(node.func, "id", None) in ("isinstance", "issubclass"):
                for arg in node.args[1:]:
                    allowed.update(id(n) for n in ast.walk(arg))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "int":
            if not isinstance(node.ctx, ast.Load) or id(node) not in allowed:
                return False
        elif _binds_int(node):
            return False
    return True


def _binds_int(node: ast.AST) -> bool:
    """``def int``, ``class int``, ``import ... as int``: the module has its own ``int``."""
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        return node.name == "int"
    return isinstance(node, ast.alias) and (node.asname or node.name) == "int"


def _annotations(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, ast.arg):
        return [node.annotation] if node.annotation is not None else []
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return [node.returns] if node.returns is not None else []
    if isinstance(node, ast.AnnAssign):
        return [node.annotation]
    return []
