"""Caches in library code: a traced size used in a cache key is a miss, not a guard.

Note: why a cache lookup is not a decision.
  Library code memoises work on sizes: ``functools.lru_cache``/``functools.cache`` on a
  function of the spatial shapes (transformers' ``compile_compatible_method_lru_cache``,
  whose inner ``func_with_cache`` is an ``lru_cache``), or a dict keyed on a shape tuple
  (``self._cache[key]``). Hashing a traced size for the key used to guard it, so the
  whole trace was fixed to the example's sizes -- and a hit returned tensors computed by
  an earlier eager call, stored as constants. A cache returns what the function would
  compute: whether it hits changes nothing but time. So while tracing, a traced number
  hashed for a cache key gets a hash of its own that no stored key has (stable for the
  object, so the same key finds its own entry again): the lookup misses, the wrapped
  function runs on the traced sizes, and the graph holds its work, general in size.

  A lookup is a cache's when the tracer can see it in the caller's source: a call whose
  callable (a name, or ``self.x``/``module.x``) resolves to a functools cache wrapper, or
  a lookup (``in``, ``[key]``, ``.get``, ``.setdefault``) in a container whose name says
  ``cache``, or one that the function around it fills as a memo (``if key not in d:
  d[key] = ...``, the same container and key: a dict of masks kept by length). Any
  other hash is a decision and is guarded as before. A tensor in the key of a functools
  cache (``@lru_cache def normed(self, weight)``) misses the same way: a hit would hand
  the trace the tensor an earlier call stored -- an eager result as a constant, or a value
  of an earlier trace, so that the trace check's second recording differed from the
  first and refused the model as not stable. The functools caches
  a trace went through are emptied at its end (:func:`clear`): their new entries hold
  traced values, and a cache is only ever a copy of what its function computes.
"""

from __future__ import annotations

import ast
import functools
import itertools
import sys

from ..source import OWN_DIR, TORCH_DIR
from .text import _parsed, _positions

_CACHE_TYPE = functools._lru_cache_wrapper  # what lru_cache and cache return
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_LOOKUP_METHODS = frozenset({"get", "setdefault", "pop", "__contains__", "__getitem__"})
_unique = itertools.count(1)


def miss_hash(sym) -> int:
    """A hash no stored key has, the same for ``sym`` every time it is asked."""
    cached = sym.__dict__.get("_miss_hash") if hasattr(sym, "__dict__") else None
    if cached is None:
        cached = hash(("tracebridge-cache-miss", id(sym), next(_unique)))
        sym._miss_hash = cached
    return cached


def fresh_hash() -> int:
    """A hash no stored key has (for a tensor in a key: the tracer keeps it per tensor)."""
    return hash(("tracebridge-cache-miss", next(_unique)))


def cache_lookup(depth: int = 2):
    """What cache the caller ``depth`` frames up is hashing a key for: a functools cache
    wrapper, the name of a dict that says cache, or None when the hash is a decision."""
    return _cache_at(sys._getframe(depth))


def functools_cache_hashing_tensor():
    """The functools cache wrapper whose key the user's code is hashing a tensor for, or
    None. ``hash(tensor)`` reaches the tracer through ``Tensor.__hash__`` and PyTorch's
    dispatch: the frame that asks is the first one outside tracebridge and PyTorch."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith((OWN_DIR, TORCH_DIR)):
        frame = frame.f_back
    if frame is None:
        return None
    found = _cache_at(frame)
    return found if isinstance(found, _CACHE_TYPE) else None


def _cache_at(frame):
    if frame.f_code.co_filename.startswith(OWN_DIR):
        return None  # the tracer's own tables
    positions = _positions(frame.f_code)
    index = frame.f_lasti // 2
    if index >= len(positions):
        return None
    tree = _parsed(frame.f_code.co_filename)
    node = tree.get(positions[index]) if tree is not None else None
    if node is None:
        return None
    if isinstance(node, ast.Call):
        wrapper = _functools_cache(node.func, frame)
        if wrapper is not None:
            return wrapper
        if isinstance(node.func, ast.Attribute) and node.func.attr in _LOOKUP_METHODS:
            return _named_cache(node.func.value) or _memo(node.func.value, node.args[:1])
        return None
    if isinstance(node, ast.Subscript):
        return _named_cache(node.value) or _memo(node.value, [node.slice])
    if isinstance(node, ast.Compare) and [type(op) for op in node.ops] in ([ast.In], [ast.NotIn]):
        return _named_cache(node.comparators[0]) or _memo(node.comparators[0], [node.left])
    return None


def _memo(container: ast.AST, keys: list) -> str | None:
    """The container's source where the function around it memoises in it with that key:
    ``if key not in container: container[key] = ...`` (a dict of masks kept by length,
    whatever its name). What the lookup finds is then what the assignment computes."""
    if len(keys) != 1:
        return None
    where, key = ast.unparse(container), ast.unparse(keys[0])
    function = container
    while function is not None and not isinstance(function, _FUNCTIONS):
        function = getattr(function, "_tb_parent", None)
    if function is None:
        return None
    for test in ast.walk(function):
        if not isinstance(test, ast.If) or not isinstance(test.test, ast.Compare):
            continue
        compare = test.test
        if [type(op) for op in compare.ops] != [ast.NotIn] or len(compare.comparators) != 1:
            continue
        if ast.unparse(compare.comparators[0]) != where or ast.unparse(compare.left) != key:
            continue
        for line in test.body:
            targets = line.targets if isinstance(line, ast.Assign) else []
            for target in targets:
                if (
                    isinstance(target, ast.Subscript)
                    and ast.unparse(target.value) == where
                    and ast.unparse(target.slice) == key
                ):
                    return where
    return None


def _named_cache(container: ast.AST) -> str | None:
    """The container's source when its last name says ``cache`` (``self._cache``)."""
    last = container.attr if isinstance(container, ast.Attribute) else None
    if isinstance(container, ast.Name):
        last = container.id
    return ast.unparse(container) if last and "cache" in last.lower() else None


def _functools_cache(func: ast.AST, frame):
    """The functools cache wrapper that ``func`` (a name or attribute chain) names in
    ``frame``, or None. Only names and attributes are read: nothing is called."""
    chain = []
    while isinstance(func, ast.Attribute):
        chain.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name):
        return None
    scopes = (frame.f_locals, frame.f_globals, frame.f_builtins)
    obj = next((scope[func.id] for scope in scopes if func.id in scope), None)
    try:
        for attr in reversed(chain):
            obj = _static_attr(obj, attr)
    except AttributeError:
        return None
    obj = getattr(obj, "__func__", obj)  # a cached method, bound to its instance
    return obj if isinstance(obj, _CACHE_TYPE) else None


def _static_attr(obj, attr: str):
    """``obj.attr`` without running a property: instance dict, then the class's."""
    instance = getattr(obj, "__dict__", None)
    if isinstance(instance, dict) and attr in instance:
        return instance[attr]
    for klass in type(obj).__mro__ if not isinstance(obj, type) else obj.__mro__:
        if attr in vars(klass):
            found = vars(klass)[attr]
            if isinstance(found, (staticmethod, classmethod)):
                return found.__func__
            return found
    if type(obj).__name__ == "module":
        return getattr(obj, attr)
    raise AttributeError(attr)


def clear(wrappers) -> None:
    """Empty the functools caches a trace went through (their new entries hold traced
    values; what remains is recomputed on the next eager call)."""
    for wrapper in wrappers:
        wrapper.cache_clear()
