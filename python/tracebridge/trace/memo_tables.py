"""The dicts a trace caches or memoises in: put back after each recording, and refused
where what they keep came from the call's data.

Note: why a memo of data is not a cache.
  trace/caches.py makes every lookup with a traced size in its key miss: the memoised
  work runs on the traced sizes and the graph holds it, general in size. That is right
  for what a function of sizes, constants and the module's state computes (a mask by
  length, a rotary table, normalised weights): on a hit eager returns what a miss would
  compute again. A memo filled from the data of the call that missed (ActNorm's
  ``s = cache.get(n); if s is None: s = x.abs().mean(); cache[n] = s``) keeps the first
  call's value: eager reuses it, a trace cannot keep it and would compute each call's own,
  a different result without an error. So, when a recording ends, each entry that it
  stored under a traced key is followed back through the graph: a value that reads a
  graph input's data (not only its sizes, dtype or device; a size that a mask or a
  ``nonzero`` selected is data) or a random draw is refused with a TraceError that names
  the memo and the line that fills it. What the key's own numbers decide is not data
  (a table by an index's largest value): a hit holds what a miss computes. Nor is a
  size of the call that the key leaves out (``memo[n] = full((), c)`` with ``n, c =
  x.shape``; ``ones_like(x)`` under ``memo[x.shape[0]]``): eager keeps the first value of
  the key, whatever the later calls' ``c``, so it is refused too, naming the size. (A
  size the weights fix, a projection's width, is state.) What no graph shows -- a
  Python counter, ``len(memo)`` -- is found by check/repeated.py, whose second eager call
  is made to miss (:func:`missed_next`) as every call of the trace does.

  Whatever the recording wrote into these dicts is then taken out again (their entries
  as at their first lookup), and at the end of the whole trace (:func:`kept`) what its
  checks' eager calls wrote too: a traced number left as a key in a global memo or on a
  function's attribute made the next recording (the trace's check) find a size of
  another trace, and left the user's objects changed. (A module's own dicts are put back
  by trace/capture.py as well, with its other attributes.)
"""

from __future__ import annotations

import contextlib

import torch

from ..errors import TraceError
from ..ir import Ref, refs_in
from ..ir.ops import RANDOM_OPS, TENSOR_FLAG_READS
from .caches import DictCache
from .numbers import _Traced
from .text import SymStr

# Reads of a tensor's metadata: of its sizes (a size read from a size is not data, one read
# from what a mask selected is), and of what no value of a call decides (dtype, device, flags).
_SIZE_READS = frozenset(
    "prim.size prim.numel prim.len prim.stride prim.storage_offset prim.is_contiguous "
    "prim.is_contiguous_as".split()
)
_NO_DATA_READS = TENSOR_FLAG_READS | frozenset("prim.dtype prim.device prim.requires_grad".split())
# Ops that read only the sizes, dtype and device of the argument at this position.
_SIZE_ARGUMENT = {
    **dict.fromkeys("empty_like zeros_like ones_like full_like".split(), 0),
    **dict.fromkeys("Tensor.expand_as Tensor.view_as Tensor.reshape_as".split(), 1),
}
# Ops that read only the dtype and device of the tensor arguments from this position on
# (``x.new_ones(n)``, ``t.to(x)``, ``t.type_as(x)``): nothing of a call's sizes or data.
_META_ARGUMENTS = {
    **dict.fromkeys(
        "Tensor.new_zeros Tensor.new_ones Tensor.new_full Tensor.new_empty "
        "Tensor.new_tensor".split(),
        0,
    ),
    **dict.fromkeys("Tensor.type_as Tensor.to".split(), 1),
}
# Ops whose result's size the values of a tensor argument decide.
_DATA_SIZED = frozenset(
    "nonzero argwhere masked_select _unique2 unique_dim unique_consecutive bincount "
    "repeat_interleave".split()
)
_MASK_DTYPES = frozenset({"bool", "uint8"})
_MISSING = object()
_DEPTH = 4  # how deep a kept value's containers are looked into
# One registry per trace under way: id(table) -> (table, its entries when the trace
# first looked it up). The check's eager calls write into the same dicts.
_TRACES: list[dict[int, tuple]] = []


@contextlib.contextmanager
def kept():
    """Run a whole trace (its recordings and its checks' eager calls), then put back every
    dict a recording looked up with a traced key as the trace first found it."""
    tables: dict[int, tuple] = {}
    _TRACES.append(tables)
    try:
        yield
    finally:
        _TRACES.remove(tables)
        for table, entries in tables.values():
            dict.clear(table)
            dict.update(table, entries)


_ASKED_NEVER = 2**40  # added to the sizes of a key: a size no call has


def missed_next() -> bool:
    """Make the next eager call miss where an earlier eager call of the trace's checks
    filled a memo the trace looked up with a traced key, as every call of the trace does:
    each entry added since the trace began moves under a key no call asks for (its sizes
    moved past any size), so that the memo keeps its size and a value that reads what the
    calls before left (a counter, ``len(memo)``) is computed anew and differs from the
    trace, which check/repeated.py then refuses. (A key with no size is dropped.) Whether
    any entry moved."""
    moved = False
    if not _TRACES:
        return moved
    for table, entries in _TRACES[-1].values():
        for key in [k for k in list(dict.keys(table)) if k not in entries]:
            moved = True
            value = dict.pop(table, key)
            elsewhere = _never_asked(key)
            if elsewhere is not None:
                dict.__setitem__(table, elsewhere, value)
    return moved


def _never_asked(key):
    """``key`` with its sizes moved past any real size (None: it holds no size)."""
    if type(key) is int:
        return key + _ASKED_NEVER
    if type(key) is str:
        return key + "\x00(a key no call asks for)"  # text made from sizes (caches.py)
    if type(key) is tuple:
        moved = tuple(_never_asked(k) if type(k) in (int, tuple) else k for k in key)
        return moved if moved != key and None not in moved else None
    return None


class MemoTables:
    """The dicts one recording looked up with a traced key (see the module Note)."""

    def __init__(self):
        # id(table) -> [table, its entries at the first lookup, label, where it is filled,
        # its entries when the trace first looked it up, whether its lookups miss]
        self._tables: dict[int, list] = {}
        # ids of the dicts keyed on text this recording emptied (trace/caches.py's
        # text_keyed_memo): every entry there is the recording's
        self._set_aside: set[int] = set()
        # id(table) -> {text key: the traced numbers formatted into it}
        self._text_keys: dict[int, dict[str, list]] = {}

    def note(self, cache: DictCache, location: str | None) -> bool:
        """Keep the dict to put back; whether its lookup may miss. A dict that held
        entries before the trace, and that the code around the lookup never fills, holds
        what someone put there (a tuned value by length), not what a miss computes: its
        lookups decide (the key is guarded)."""
        entry = self._tables.get(id(cache.table))
        if entry is None:
            # dict(table) copies the stored hashes: no key's __hash__ runs.
            entry = [cache.table, dict(cache.table), cache.label, None]
            self._tables[id(cache.table)] = entry
            for tables in _TRACES:
                tables.setdefault(id(cache.table), (cache.table, entry[1]))
            # What the trace found, before its checks' eager calls wrote (every recording
            # of one trace decides alike).
            entry.append(_TRACES[-1][id(cache.table)][1] if _TRACES else entry[1])
            # Decided once for the dict: a lookup that misses and another that decides
            # would not find each other's entries (a memo filled by a helper).
            entry.append(cache.filled_here or not entry[4])
        if cache.store and entry[3] is None:
            entry[3] = location
        return entry[5]

    def set_aside(self, table: dict, text: str, numbers: tuple) -> None:
        """Empty ``table`` (noted already) for the rest of this recording, once: a memo
        keyed on text, whose plain keys cannot be made to miss; put back by restore.
        ``text``, a key of it, shows the traced ``numbers``: the sizes it holds."""
        self._text_keys.setdefault(id(table), {}).setdefault(text, []).extend(numbers)
        if id(table) not in self._set_aside:
            self._set_aside.add(id(table))
            dict.clear(table)

    def kept_keys(self, cache: DictCache) -> list:
        """The keys ``cache``'s dict held when the trace first looked it up (after
        :meth:`note`), read without hashing them."""
        entry = self._tables.get(id(cache.table))
        return list(entry[4]) if entry is not None else []

    def check(self, tracer) -> None:
        """Refuse a memo that keeps, under a traced key, what the call's data decided."""
        for table, _, label, filled_at, before, _ in self._tables.values():
            everything = id(table) in self._set_aside
            texts = self._text_keys.get(id(table), {})
            for key, value in list(dict.items(table)):  # read without hashing a key
                if not (everything or _traced_by(key, tracer, _DEPTH)):
                    continue
                kept = before.get(plain_key(key), _MISSING)
                if kept is not _MISSING and not _same(kept, value):
                    raise TraceError(
                        f"the memo {label} held, for the example's key {plain_key(key)!r}, a "
                        f"value other than the one its code computes now"
                        f"{f' (filled at {filled_at})' if filled_at else ''}: an eager call "
                        "returns the kept value, a traced call would compute it. Empty the "
                        "memo before tracing, or make the kept values state the model holds"
                    )
                shown = texts.get(key) if type(key) is str else None
                # a text key holds the sizes formatted into it
                source = _data_source(tracer, value, (key, tuple(shown)) if shown else key)
                if source is not None:
                    remedy = (
                        "Put every size the value reads in the key (memo[n, c], not "
                        "memo[n]), or compute the value on every call"
                        if "size" in source and "values decide" not in source
                        else "Compute the value on every call, or make it state the model "
                        "holds (a buffer set once, before tracing)"
                    )
                    raise TraceError(
                        f"the memo {label} keeps, under a key of traced sizes, a value "
                        f"computed from {source}"
                        f"{f' (filled at {filled_at})' if filled_at else ''}: an eager call "
                        "reuses the value an earlier call stored, a traced call would "
                        f"compute its own. {remedy}"
                    )

    def restore(self) -> None:
        """Put back every dict's entries as they were at its first lookup."""
        for table, entries, *_ in self._tables.values():
            dict.clear(table)
            dict.update(table, entries)


def plain_key(key):
    """``key`` with each traced number as its value now (what an eager call would use)."""
    if isinstance(key, _Traced):
        return key._concrete()
    if isinstance(key, SymStr):
        return str.__str__(key)
    if type(key) in (tuple, frozenset):
        return type(key)(plain_key(k) for k in key)
    return key


def _same(kept, made) -> bool:
    """Whether the value a memo held equals the one the code made for the same key."""
    if isinstance(kept, torch.Tensor) or isinstance(made, torch.Tensor):
        return (
            isinstance(kept, torch.Tensor)
            and isinstance(made, torch.Tensor)
            and kept.shape == made.shape
            and kept.dtype == made.dtype
            and kept.device == made.device
            and bool(torch.equal(kept.detach(), made.detach()))
        )
    if type(kept) in (tuple, list) and type(made) is type(kept):
        return len(kept) == len(made) and all(map(_same, kept, made))
    if type(kept) is dict and type(made) is dict:
        return kept.keys() == made.keys() and all(_same(kept[k], made[k]) for k in kept)
    made = plain_key(made)
    try:
        return kept is made or bool(kept == made)
    except Exception:  # an object that cannot say
        return False


def _traced_by(key, tracer, depth: int) -> bool:
    """Whether ``key`` holds a traced number (or text) of ``tracer``: an entry it stored."""
    if isinstance(key, _Traced):
        return key._tracer is tracer
    if isinstance(key, SymStr):
        return any(getattr(s, "_tracer", None) is tracer for s in key._sources)
    if type(key) in (tuple, frozenset) and depth:
        return any(_traced_by(k, tracer, depth - 1) for k in key)
    return False


def _data_source(tracer, value, key) -> str | None:
    """What of a call ``value`` was computed from that neither its memo's ``key`` nor a
    size in the key decides ("the input's data", "a random draw", "the size x.shape[1]"),
    or None where only the key, literals and state made it (what the key's numbers decide,
    a hit holds too). The walk goes back through the graph; where only a tensor's sizes
    are read (``x.shape``, ``ones_like``), only what decided its sizes is followed.

    A size of an input that the key does not hold (``x.shape[1]`` in ``memo[x.shape[0]]``,
    or through a tensor made from it: ``x.flatten(1).shape[1]``) is named: eager keeps the
    value the first call of a key computed from its own size, a trace would compute each
    call's, and a guard would not do (eager, called at another size first, then holds that
    size's value for the example's key). A size the weights fix (the width of a
    projection, a convolution's channels) is state."""
    inputs = {v.id for v in tracer.graph.inputs}
    # A number a guard fixed is the example's on every call the trace serves (a size
    # guarded where it became text): eager's value for the key is then the trace's.
    fixed = _fixed_by_guards(tracer)
    given = {ref.id for ref in _refs_of(tracer, key, _DEPTH)} | fixed
    key_sizes = _key_sizes(tracer, key, inputs)
    key_sizes |= {size for vid in fixed if (size := _input_size(tracer, vid, inputs))}
    todo = [(ref.id, False) for ref in _refs_of(tracer, value, _DEPTH)]
    seen: set[tuple[int, bool]] = set()
    while todo:
        step = todo.pop()
        if step in seen:
            continue
        seen.add(step)
        vid, sizes_only = step
        if vid in given:
            continue
        if vid in inputs:
            if not sizes_only:
                return "the input's data"
            rank = len(_value(tracer, vid).shape or ())
            if all((vid, dim) in key_sizes for dim in range(rank)):
                continue  # every size of the input is in the key
            return f"the sizes of {_value(tracer, vid).name}, which its key does not hold all of"
        node = tracer._producers.get(vid)
        if node is None or node.op in _NO_DATA_READS:
            continue
        size = _input_size(tracer, vid, inputs)
        if size is not None:
            if size in key_sizes:
                continue
            name = _value(tracer, size[0]).name
            return f"the size {name}.shape[{size[1]}], which its key does not hold"
        if node.op == "prim.size" and _fixed_by_state(tracer, node, inputs):
            continue
        if sizes_only and _sized_by_data(tracer, node):
            return "a size that the input's values decide"
        if node.op in RANDOM_OPS and not sizes_only:
            return "a random draw"
        todo.extend(_arguments(tracer, node, sizes_only))
    return None


def _fixed_by_guards(tracer) -> set[int]:
    """The values the recording guarded to the example's value (``kind="value"``)."""
    return {
        node.args[0].id
        for node in tracer.graph.nodes
        if node.op == "prim.guard"
        and node.kwargs.get("kind") == "value"
        and node.args
        and isinstance(node.args[0], Ref)
    }


def _key_sizes(tracer, key, inputs) -> set[tuple[int, int]]:
    """(input, dimension) of each size of an input that ``key`` holds (also one that no
    node has read: a size only hashed for the lookup)."""
    numbers = {id(n) for n in _numbers_in(key, _DEPTH)}
    sizes = set()
    for (tensor_id, dim), number in list(tracer._size_cache.items()):
        hit = tracer._tensor_values.get(tensor_id) if id(number) in numbers else None
        if hit is not None and hit[1].id in inputs:
            rank = len(hit[1].shape or ())
            sizes.add((hit[1].id, dim + rank if dim < 0 else dim))
    for vid in (ref.id for ref in _refs_of(tracer, key, _DEPTH)):
        size = _input_size(tracer, vid, inputs)
        if size is not None:
            sizes.add(size)
    return sizes


def _numbers_in(key, depth: int) -> list:
    """The traced numbers in ``key`` (a number, or a tuple of them, a torch.Size)."""
    if isinstance(key, _Traced):
        return [key]
    if isinstance(key, tuple) and depth:
        return [n for k in key for n in _numbers_in(k, depth - 1)]
    return []


# Ops whose result has a dimension that a weight decides: op -> (the weight's position
# among the arguments, which dimension of the result: "last" or "channels").
_WEIGHT_SIZED = {
    "linear": (1, "last"),
    "matmul": (1, "last"),
    "embedding": (0, "last"),
    **dict.fromkeys(
        "conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d".split(),
        (1, "channels"),
    ),
}


def _fixed_by_state(tracer, size_node, inputs) -> bool:
    """Whether ``size_node`` (``prim.size(h, d)``) reads a dimension of ``h`` that a weight
    made from state alone decides: the width of ``linear``, of ``matmul`` by such a
    weight, of ``embedding``; the channels of a convolution."""
    tensor, dim = (list(size_node.args) + [None])[:2]
    if not isinstance(tensor, Ref) or type(dim) is not int:
        return False
    node = tracer._producers.get(tensor.id)
    rule = _WEIGHT_SIZED.get(node.op) if node is not None else None
    if rule is None or len(node.args) <= rule[0] or not isinstance(node.args[rule[0]], Ref):
        return False
    weight = node.args[rule[0]]
    rank = len(_value(tracer, tensor.id).shape or ())
    weight_rank = len(_value(tracer, weight.id).shape or ())
    dim = dim + rank if dim < 0 else dim
    if rule[1] == "last":
        at = rank - 1 if weight_rank >= 2 or node.op == "linear" else None
    else:  # a batched convolution's channels are dimension 1, an unbatched one's 0
        at = 1 if rank == weight_rank else 0
    return dim == at and _from_state_only(tracer, weight.id, inputs)


def _from_state_only(tracer, vid: int, inputs) -> bool:
    """Whether value ``vid`` is made from state and literals alone (no input)."""
    todo, seen = [vid], set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        if current in inputs:
            return False
        node = tracer._producers.get(current)
        if node is not None:
            todo.extend(ref.id for ref in refs_in([*node.args, *node.kwargs.values()]))
    return True


def _input_size(tracer, vid, inputs) -> tuple[int, int] | None:
    """(input, dimension) where value ``vid`` is ``input.shape[dimension]``, else None."""
    node = tracer._producers.get(vid)
    if node is None or node.op != "prim.size" or len(node.args) < 2:
        return None
    tensor, dim = node.args[0], node.args[1]
    if not isinstance(tensor, Ref) or tensor.id not in inputs or type(dim) is not int:
        return None
    rank = len(_value(tracer, tensor.id).shape or ())
    return (tensor.id, dim + rank if dim < 0 else dim)


def _arguments(tracer, node, sizes_only: bool) -> list[tuple[int, bool]]:
    """What of each argument of ``node`` its result (or its result's sizes) depends on."""
    shape_of = node.op in _SIZE_READS
    skipped = _SIZE_ARGUMENT.get(node.op)
    meta_from = _META_ARGUMENTS.get(node.op)
    steps = []
    for index, arg in enumerate([*node.args, *node.kwargs.values()]):
        for ref in refs_in(arg):
            tensor = _value(tracer, ref.id)
            tensor = tensor is not None and tensor.kind == "Tensor"
            if tensor and meta_from is not None and index >= meta_from:
                continue  # its dtype and device only
            # A tensor whose sizes alone make the result's (or whose sizes only are read);
            # any number, and a tensor whose values the result holds, counts whole.
            whole = not (tensor and (sizes_only or shape_of or index == skipped))
            steps.append((ref.id, not whole))
    return steps


def _sized_by_data(tracer, node) -> bool:
    """Whether the values of a tensor argument decide the size of ``node``'s result: a
    ``nonzero``, a ``unique``, an index by a mask."""
    if node.op in _DATA_SIZED:
        return True
    if node.op != "getitem":
        return False
    masks = [_value(tracer, ref.id) for ref in refs_in(node.args[1:2])]
    return any(v is not None and v.dtype in _MASK_DTYPES for v in masks)


def _value(tracer, vid: int):
    """The graph's :class:`~..ir.Value` with id ``vid``, or None."""
    node = tracer._producers.get(vid)
    outputs = node.outputs if node is not None else tracer.graph.inputs
    return next((v for v in outputs if v.id == vid), None)


def _refs_of(tracer, value, depth: int) -> list[Ref]:
    """The graph values that the tensors and traced numbers in ``value`` are."""
    if isinstance(value, _Traced):
        if value._tracer is not tracer or value._ref is None:
            return []  # a size not yet read in the graph: made from metadata alone
        return [value._ref]
    if isinstance(value, SymStr):
        return [r for s in value._sources for r in _refs_of(tracer, s, depth)]
    if isinstance(value, torch.Tensor):
        hit = tracer._lookup(value)
        return [Ref(hit[1].id)] if hit is not None else []
    if depth and type(value) in (tuple, list):
        return [r for item in value for r in _refs_of(tracer, item, depth - 1)]
    if depth and type(value) is dict:
        return [r for item in value.values() for r in _refs_of(tracer, item, depth - 1)]
    return []
