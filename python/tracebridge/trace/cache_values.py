"""The functools caches a trace goes through: their entries put back as the trace found
them, and a write into a tensor one of them holds refused.

Note: why a cached value written in place is refused.
  A traced size in a functools cache's key misses (trace/caches.py): the cached function
  runs on every traced call, and the graph computes its value afresh. That is right for
  what a function computes: on a hit eager returns what a miss would compute again --
  unless the caller changes the value it got (``t = table(n); t.add_(1)``, an accumulator
  by size): eager then returns the changed tensor on the next hit (1, 2, 3 ...), the trace
  a fresh one on every call (1, 1, 1), with no error. So a recorded op that writes in
  place into a tensor the cache holds (a value, an item of a tuple, list or dict value, or
  a view of one) is refused, naming the cached function and the line of the write. Inside
  the cached function, before it returns, the cache does not hold the tensor yet: the
  function's own work on what it makes is recorded as usual.

Note: how the entries are put back.
  A functools cache offers ``cache_clear`` and nothing to take one entry out. The entries
  a recording adds hold traced values, and the check's eager calls add their own; the
  trace found the cache with the user's entries in it. An unbounded cache
  (``functools.cache``, ``lru_cache(maxsize=None)``) keeps them in a plain dict that
  ``gc.get_referents`` shows: its entries are copied when the trace first goes through it
  and put back (with their stored hashes) after each recording and at the end of the trace.
  A bounded cache also links its entries in a list of its own, which a change of its dict
  would break: it is emptied instead (its function computes the values again on the next
  eager call).
"""

from __future__ import annotations

import contextlib
import functools
import gc

import torch

from ..errors import TraceError
from ..ir import ops as opset

_CACHE_TYPE = functools._lru_cache_wrapper
_DEPTH = 2  # how deep a cached value's tuples, lists and dicts are looked into
# One registry per trace under way: id(wrapper) -> (wrapper, its entries when the trace
# first went through it, or None for a bounded cache).
_TRACES: list[dict[int, tuple]] = []


def _table(wrapper) -> dict | None:
    """The dict an unbounded functools cache keeps its entries in (key -> value), or None
    (a bounded cache, whose dict holds links of its own list; or one not found)."""
    if wrapper.cache_parameters().get("maxsize") is not None:
        return None
    own = getattr(wrapper, "__dict__", None)
    found = [r for r in gc.get_referents(wrapper) if type(r) is dict and r is not own]
    return found[0] if len(found) == 1 else None


@contextlib.contextmanager
def kept():
    """Run a whole trace (its recordings and its checks' eager calls), then put back each
    functools cache a recording went through as the trace first found it."""
    caches: dict[int, tuple] = {}
    _TRACES.append(caches)
    try:
        yield
    finally:
        _TRACES.remove(caches)
        for wrapper, entries in caches.values():
            _put_back(wrapper, entries)


def note(wrapper) -> None:
    """A recording is about to go through ``wrapper`` (a traced number in its key): keep
    its entries as they are now, for every trace under way that has not seen it."""
    if not isinstance(wrapper, _CACHE_TYPE):
        return
    entries = _MISSING
    for caches in _TRACES:
        if id(wrapper) not in caches:
            if entries is _MISSING:
                table = _table(wrapper)
                entries = dict(table) if table is not None else None  # stored hashes
            caches[id(wrapper)] = (wrapper, entries)


_MISSING = object()


def restore(wrappers) -> None:
    """After a recording: put back the caches it went through (as the trace found them;
    emptied where no copy of their entries could be kept)."""
    kept_now = _TRACES[-1] if _TRACES else {}
    for wrapper in wrappers:
        if not isinstance(wrapper, _CACHE_TYPE):
            continue
        _put_back(wrapper, kept_now.get(id(wrapper), (wrapper, None))[1])


def _put_back(wrapper, entries: dict | None) -> None:
    table = _table(wrapper) if entries is not None else None
    if table is None:
        wrapper.cache_clear()
        return
    if table.keys() != entries.keys() or any(table[k] is not v for k, v in entries.items()):
        table.clear()
        table.update(entries)


def _entries(wrapper) -> tuple[list, list]:
    """The keys and the values of ``wrapper``'s entries, read without calling anything."""
    table = _table(wrapper)
    if table is not None:
        return list(table), list(table.values())
    # A bounded cache: gc shows its entries' keys and values, and its dict (key -> link).
    own = getattr(wrapper, "__dict__", None)
    refs = gc.get_referents(wrapper)
    tables = [r for r in refs if type(r) is dict and r is not own]
    keys = [k for t in tables for k in t]
    skip = {id(k) for k in keys} | {id(t) for t in tables} | {id(own)}
    # (also its function, its key marker, an ``object()``, and its named-tuple class)
    values = [
        r
        for r in refs
        if id(r) not in skip
        and not isinstance(r, type)
        and not callable(r)
        and type(r) is not object
    ]
    return keys, values


def _held(wrapper) -> set[int]:
    """The ids of the tensors that ``wrapper``'s entries hold as (part of) a value."""
    keys, values = _entries(wrapper)
    in_keys = {id(t) for k in keys for t in _tensors(k, _DEPTH)}
    return {id(t) for v in values for t in _tensors(v, _DEPTH)} - in_keys


def _tensors(value, depth: int) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if depth and type(value) in (tuple, list):
        return [t for item in value for t in _tensors(item, depth - 1)]
    if depth and type(value) is dict:
        return [t for item in value.values() for t in _tensors(item, depth - 1)]
    return []


def no_write_into_cached(wrappers, name: str, args: tuple, kwargs: dict, location) -> None:
    """Refuse op ``name`` where it writes in place into a tensor (or a view of one) that
    one of the functools caches ``wrappers`` holds (see the module's first note);
    ``location()`` names the line."""
    written = [kwargs["out"]] if isinstance(kwargs.get("out"), torch.Tensor) else []
    if opset.is_inplace(name) and args and isinstance(args[0], torch.Tensor):
        written.append(args[0])
    if not written:
        return
    with torch._C.DisableTorchFunction():  # (the tracer's mode would see ``_base`` read)
        bases = [t._base for t in written]
    ids = {id(t) for t in written} | {id(b) for b in bases if b is not None}
    for wrapper in wrappers:
        if not isinstance(wrapper, _CACHE_TYPE) or not ids & _held(wrapper):
            continue
        label = getattr(wrapper, "__qualname__", "a cached function")
        where = location()
        raise TraceError(
            f"cannot record {name} at {where or 'unknown location'}: it writes in place "
            f"into a tensor that the functools cache {label} holds (its value for a key of "
            "traced sizes, or a view of it). Eager returns that same tensor on the next "
            "call with the key, changed by this write (an accumulator by size), while "
            "every call of a trace computes the value afresh. Write into a copy "
            "(`t = table(n).clone()`), keep the running value as state the model holds "
            "(a buffer), or take the cache away"
        )


_IMMUTABLE = (torch.Tensor, int, float, complex, bool, str, bytes, type(None), torch.dtype)


def _immutable(value, depth: int = _DEPTH) -> bool:
    """Whether Python code cannot change ``value`` in place (a tensor's writes are ops the
    tracer sees: :func:`no_write_into_cached`)."""
    if isinstance(value, _IMMUTABLE):
        return True
    return (
        bool(depth)
        and type(value) in (tuple, frozenset, torch.Size)
        and all(_immutable(v, depth - 1) for v in value)
    )


def holds_mutable(wrappers) -> bool:
    """Whether a value some cache of ``wrappers`` holds now is a Python object the code
    could change in place (a list, a dict, a numpy array, an object)."""
    return any(not all(map(_immutable, _entries(w)[1])) for w in wrappers)


def used() -> list:
    """The functools caches the trace under way went through (none outside a trace)."""
    return [wrapper for wrapper, _ in _TRACES[-1].values()] if _TRACES else []


def put_back_all() -> None:
    """Put back every cache the trace under way went through, as it found them."""
    for wrapper, entries in (_TRACES[-1] if _TRACES else {}).values():
        _put_back(wrapper, entries)
