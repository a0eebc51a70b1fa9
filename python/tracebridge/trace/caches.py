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
  callable (a name, ``self.x``/``module.x``, ``super().x``, ``type(self).x``,
  ``self.__class__.x``, ``getattr(self, "x")``) resolves to a functools cache
  wrapper, or makes one for the call (``lru_cache()(fn)(n)``), or a lookup (``in``,
  ``[key]``, ``.get``, ``.setdefault``) in a dict whose name says ``cache``, or one that
  the function around it fills as a memo (it stores ``d[key] = ...`` and asks for the
  same key: ``key not in d``, ``d.get(key)``, ``except KeyError``; a dict of masks kept
  by length, a global memo). The dict must be found from the source without running
  code: trace/memo_tables.py puts back what the trace writes there, and refuses a memo
  that keeps what the filling call's data decided (there a hit is not what a miss
  computes). Nor is it where a dict held entries before the trace that the function
  around the lookup never makes (tuned values by length, named ``cache``): its lookups
  decide. Any other hash is a decision and is guarded as before.

  Text made from traced sizes as a memo's key (``key = f"{B}x{N}"``; ``if key not in
  self.masks``) cannot miss so: Python joins the text in C into a plain ``str``, whose
  hash is its own. trace/text.py follows the text to its uses; where every one is a
  lookup or a store of such a dict, found without running code and empty when the trace
  first looked at it, the dict's entries are set aside for the recording
  (:func:`text_keyed_memo`): the lookups miss, and memo_tables puts them back and checks
  what the recording stored. A dict that held entries then decides, as for a tuple of
  sizes: the text's numbers are guarded.

  A tensor in the key of a functools cache (``@lru_cache def normed(self, weight)``)
  misses the same way: a hit would hand the trace the tensor an earlier call stored -- an
  eager result as a constant, or a value of an earlier trace, so that the trace check's
  second recording differed from the first and refused the model as not stable. The
  functools caches a trace went through are put back as it found them when each recording
  and the trace end (trace/cache_values.py): their new entries hold traced values.
"""

from __future__ import annotations

import ast
import collections
import dataclasses
import functools
import itertools
import sys
from dataclasses import dataclass

from ..errors import TraceError
from ..source import OWN_DIR, TORCH_DIR
from .text import _parsed, _positions

_CACHE_TYPE = functools._lru_cache_wrapper  # what lru_cache and cache return
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_MISSES = frozenset({"KeyError", "LookupError"})  # what a missing key raises
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


def text_keyed_memo(frame, span: tuple, tracer, text: str, numbers: tuple) -> bool:
    """For text made from traced sizes that only keys the dict at ``span`` of ``frame``'s
    file (``key = f"{B}x{N}"``; ``if key not in self.masks: self.masks[key] = ...``;
    trace/text.py's ``_memo_use``): whether that dict is a memo the tracer traces
    through -- found without running code, filled by the code around it, holding no
    entry when the trace first looked at it (one that did holds what someone put there:
    the lookup decides). Its entries are then set aside for this recording, so that the
    lookups miss as a traced number's do: Python joins the text in C, and a plain str's
    hash cannot be made to miss. trace/memo_tables.py puts them back after the recording
    and checks each entry the recording stored there, ``text`` holding ``numbers``."""
    container = (_parsed(frame.f_code.co_filename) or {}).get(span)
    parent = getattr(container, "_tb_parent", None)
    if isinstance(parent, ast.Subscript):
        key = parent.slice
    elif isinstance(parent, ast.Compare):
        key = parent.left
    elif isinstance(parent, ast.Attribute) and isinstance(parent._tb_parent, ast.Call):
        key = parent._tb_parent.args[0]
    else:
        return False
    cache = _dict_cache(container, [key], frame, store=False)
    if cache is None or not tracer.is_active():
        return False
    # the key is not made yet: a memo with kept entries decides (DictCache.key None)
    cache = dataclasses.replace(cache, key=None)
    if not tracer.through_cache(cache, "text made from a traced size"):
        return False
    tracer.memo_tables.set_aside(cache.table, text, numbers)
    return True


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
            store = node.func.attr == "setdefault"
            return _dict_cache(node.func.value, node.args[:1], frame, store)
        return None
    if isinstance(node, ast.Subscript):
        store = isinstance(node.ctx, ast.Store)
        found = _dict_cache(node.value, [node.slice], frame, store)
        return found if found is not None or store else _default_memo(node, frame)
    if isinstance(node, ast.Compare) and [type(op) for op in node.ops] in ([ast.In], [ast.NotIn]):
        return _dict_cache(node.comparators[0], [node.left], frame, False)
    return None


@dataclass(frozen=True, eq=False)
class DictCache:
    """A dict the user's code keeps as a cache or memo, at one lookup of it."""

    label: str  # the container's source, for messages
    table: dict  # the dict itself: put back after the recording (trace/memo_tables.py)
    store: bool  # this lookup stores into it (``d[key] = ...``, ``d.setdefault``)
    # The function around the lookup stores into the dict: entries it holds already were
    # made by earlier calls of this code, not put there by hand (tuned values by size).
    filled_here: bool
    # The key looked up, where the source names it (a local, an attribute), else None.
    key: object = None


def _dict_cache(container: ast.AST, keys: list, frame, store: bool) -> DictCache | None:
    """The cache that this lookup of ``container`` is, or None (a decision). The container
    must be found without running code, and be a dict: the trace puts back what it
    writes there, and checks what a memo keeps (trace/memo_tables.py)."""
    label = _named_cache(container) or _memo(container, keys)
    if label is None:
        return None
    table = _resolve(container, frame)
    if not isinstance(table, dict):
        return None
    function = _function_of(container)
    filled = function is not None and _stores_into(function, label)
    key = _resolve(keys[0], frame) if keys else None
    return DictCache(label, table, store, filled, key)


def _default_memo(node: ast.Subscript, frame) -> DictCache | None:
    """``table[key]`` read from a ``collections.defaultdict`` with a factory: a memo of
    the factory's value (a missing key is stored by ``__missing__``, as ``if key not in
    table: table[key] = factory()`` would), unless the function around it changes the entry
    (``table[key] += 1``, ``table[key] = table[key] + x``: a count or a sum by key)."""
    table = _resolve(node.value, frame)
    if not isinstance(table, collections.defaultdict) or table.default_factory is None:
        return None
    where, key = ast.unparse(node.value), ast.unparse(node.slice)
    function = _function_of(node)
    if function is not None and _changes_item(function, where, key):
        return None
    return DictCache(where, table, True, True, _resolve(node.slice, frame))


@functools.lru_cache(maxsize=4096)
def _changes_item(function: ast.AST, where: str, key: str) -> bool:
    """Whether ``function`` writes ``where[key]`` from its own value (``+=``, or an
    assignment that reads the entry)."""
    for node in ast.walk(function):
        if isinstance(node, ast.AugAssign) and _is_item(node.target, where, key):
            return True
        if (
            isinstance(node, ast.Assign)
            and any(_is_item(t, where, key) for t in node.targets)
            and _reads_item(node.value, where, key)
        ):
            return True
    return False


def _function_of(node: ast.AST):
    """The function (or lambda) whose body holds ``node``, or None (module level)."""
    while node is not None and not isinstance(node, _FUNCTIONS):
        node = getattr(node, "_tb_parent", None)
    return node


@functools.lru_cache(maxsize=4096)
def _stores_into(function: ast.AST, where: str) -> bool:
    """Whether ``function`` stores an entry into ``where`` (``where[...] = ...``,
    ``where.setdefault(...)``, ``where.update(...)``)."""
    for node in ast.walk(function):
        targets = node.targets if isinstance(node, ast.Assign) else []
        if any(isinstance(t, ast.Subscript) and ast.unparse(t.value) == where for t in targets):
            return True
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("setdefault", "update")
            and ast.unparse(node.func.value) == where
        ):
            return True
    return False


def _resolve(node: ast.AST, frame):
    """The object a name or attribute chain names in ``frame``, read without running a
    property or any other code; None where it cannot be."""
    chain = []
    while isinstance(node, ast.Attribute):
        chain.append(node.attr)
        node = node.value
    try:
        if _is_super(node) and chain:
            obj = _super_attr(frame, chain.pop())
        elif isinstance(node, ast.Name):
            scopes = (frame.f_locals, frame.f_globals, frame.f_builtins)
            obj = next((scope[node.id] for scope in scopes if node.id in scope), None)
        elif _builtin_call(node, "type", 1, frame):  # type(self).pos
            obj = type(_resolve(node.args[0], frame))
        elif _builtin_call(node, "getattr", 2, frame):  # getattr(self, "pos")
            name = node.args[1]
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                return None
            obj = _static_attr(_resolve(node.args[0], frame), name.value)
        else:
            return None
        for attr in reversed(chain):
            # self.__class__ is the instance's type (a descriptor of ``object`` says so)
            obj = type(obj) if attr == "__class__" else _static_attr(obj, attr)
    except AttributeError:
        return None
    return obj


def _builtin_call(node: ast.AST, name: str, arity: int, frame) -> bool:
    """Whether ``node`` calls the builtin ``name`` (not shadowed) with ``arity`` arguments."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == name
        and len(node.args) == arity
        and not node.keywords
        and name not in frame.f_locals
        and name not in frame.f_globals
    )


def _is_super(node: ast.AST) -> bool:
    """``super()`` without arguments (a method's call through its class's parent)."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "super"
        and not node.args
        and not node.keywords
    )


def _super_attr(frame, attr: str):
    """``super().attr`` in ``frame``'s method, found in the classes after its own in the
    instance's order, as ``super`` does, without running a descriptor."""
    code = frame.f_code
    klass = frame.f_locals.get("__class__")
    first = frame.f_locals.get(code.co_varnames[0]) if code.co_argcount else None
    if not isinstance(klass, type) or first is None:
        raise AttributeError(attr)
    order = first.__mro__ if isinstance(first, type) else type(first).__mro__
    if klass not in order:
        raise AttributeError(attr)
    for owner in order[order.index(klass) + 1 :]:
        if attr in vars(owner):
            found = vars(owner)[attr]
            return found.__func__ if isinstance(found, (staticmethod, classmethod)) else found
    raise AttributeError(attr)


def _memo(container: ast.AST, keys: list) -> str | None:
    """The container's source where the function around it memoises in it with that key:
    it stores ``container[key] = ...`` and asks whether the key is there (``key not in
    container``, ``key in container``, ``container.get(key)`` without a default, or a
    ``try`` that catches ``KeyError``), whatever the container's name (a dict of masks
    kept by length, a global memo). What the lookup finds is then what the store
    computes. A ``.get(key, default)`` that starts from the default (a counter) is no
    such test."""
    if len(keys) != 1:
        return None
    where, key = ast.unparse(container), ast.unparse(keys[0])
    function = _function_of(container)
    return where if function is not None and _fills(function, where, key) else None


@functools.lru_cache(maxsize=4096)
def _fills(function: ast.AST, where: str, key: str) -> bool:
    """Whether ``function`` stores ``where[key]`` and asks whether it is there. (Asked at
    every hash of a traced number in a lookup; the parsed trees are kept, so each
    function's node stays the same object.)"""
    stored = tested = False
    for node in ast.walk(function):
        if isinstance(node, ast.AugAssign) and _is_item(node.target, where, key):
            return False  # a count or a sum kept by size: each call changes it
        if isinstance(node, ast.Assign) and any(_is_item(t, where, key) for t in node.targets):
            if _reads_item(node.value, where, key):
                return False  # the new entry is made from the old: not a memo
            stored = True
        elif not tested:
            tested = _asks_for(node, where, key)
    return stored and tested


def _reads_item(node: ast.AST, where: str, key: str) -> bool:
    """Whether ``node`` reads the entry ``where[key]`` (``d[k] = d.get(k, 0) + 1``)."""
    for inner in ast.walk(node):
        if _is_item(inner, where, key):
            return True
        if (
            isinstance(inner, ast.Call)
            and isinstance(inner.func, ast.Attribute)
            and inner.func.attr in _LOOKUP_METHODS
            and ast.unparse(inner.func.value) == where
        ):
            return True
    return False


def _is_item(node: ast.AST, where: str, key: str) -> bool:
    """Whether ``node`` is ``where[key]`` (in the source's words)."""
    return (
        isinstance(node, ast.Subscript)
        and ast.unparse(node.value) == where
        and ast.unparse(node.slice) == key
    )


def _asks_for(node: ast.AST, where: str, key: str) -> bool:
    """Whether ``node`` asks if ``where`` holds ``key`` (a memo's test of a miss)."""
    if isinstance(node, ast.Compare):
        return (
            [type(op) for op in node.ops] in ([ast.In], [ast.NotIn])
            and ast.unparse(node.left) == key
            and ast.unparse(node.comparators[0]) == where
        )
    if isinstance(node, ast.Call):
        func = node.func
        no_default = len(node.args) == 1 or (
            len(node.args) == 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value is None
        )
        return (
            isinstance(func, ast.Attribute)
            and func.attr == "get"
            and ast.unparse(func.value) == where
            and not node.keywords
            and no_default
            and ast.unparse(node.args[0]) == key
        )
    if isinstance(node, ast.ExceptHandler) and node.type is not None:
        caught = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
        return any(isinstance(c, ast.Name) and c.id in _MISSES for c in caught)
    return False


def _named_cache(container: ast.AST) -> str | None:
    """The container's source when its last name says ``cache`` (``self._cache``)."""
    last = container.attr if isinstance(container, ast.Attribute) else None
    if isinstance(container, ast.Name):
        last = container.id
    return ast.unparse(container) if last and "cache" in last.lower() else None


def _functools_cache(func: ast.AST, frame):
    """The functools cache wrapper that ``func`` (a name or attribute chain) names in
    ``frame``, or None. Only names and attributes are read: nothing is called."""
    obj = _resolve(func, frame)
    obj = getattr(obj, "__func__", obj)  # a cached method, bound to its instance
    if isinstance(obj, _CACHE_TYPE):
        return obj
    return _made_here(func, frame)


def _made_here(func: ast.AST, frame) -> str | None:
    """The source of a functools cache made for this one call (``lru_cache()(fn)(n)``,
    ``functools.cache(fn)(n)``): a new, empty cache, that every lookup misses anyway."""
    made = func
    for _ in range(2):
        if not isinstance(made, ast.Call):
            return None
        made = made.func
        if _resolve(made, frame) in (functools.lru_cache, functools.cache):
            return ast.unparse(func)
    return None


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


def no_draw_inside(wrappers, op: str, where: str | None) -> None:
    """Refuse a random draw made inside a functools-cached function a traced size went
    through: eager keeps the first draw for each key and returns it on every hit, a trace
    that runs the function would draw again on every call."""
    codes = {}
    for wrapper in wrappers:
        inner = getattr(wrapper, "__wrapped__", None)
        code = getattr(getattr(inner, "__func__", inner), "__code__", None)
        if code is not None:
            codes[code] = wrapper
    frame = sys._getframe(1)
    while frame is not None:
        wrapper = codes.get(frame.f_code)
        if wrapper is not None:
            raise TraceError(
                f"cannot record {op} at {where or 'unknown location'}: it draws inside "
                f"{getattr(wrapper, '__qualname__', 'a cached function')}, a functools cache "
                "keyed on traced sizes; eager keeps the first draw for each key and returns "
                "it on every later call, a trace would draw anew. Draw once and keep the "
                "values as state the model holds (a buffer), or draw on every call without "
                "the cache"
            )
        frame = frame.f_back
