"""Memoise what only the input's sizes decide: values computed from sizes, devices, dtypes.

Note: folding by size, a step past runtime/folding.py.
  Folding computes once what depends only on literals and state. A Hugging Face model's
  attention mask is built on every call from ``arange(seq_len, device=x.device)``,
  ``new_ones``, comparisons and broadcasts: a dozen tensor ops whose results depend only
  on a few sizes of the input (and its device), never on its values. ``torch.jit.trace``
  runs them cheaply in C++; run from Python they cost more than a transformer layer at
  batch 1. :func:`plan` finds "sized" nodes: ops whose arguments are literals, scalars
  of a cacheable kind (``int``, ``bool``, ``device``, ``dtype``: sizes read with
  ``x.shape``, ``x.device``, and arithmetic on them), state tensors (a rotary embedding's
  ``inv_freq``), tensors an earlier block keeps, or results of other sized nodes, at least
  one of them not a literal or state (runtime/folding.py folds those), or tensors read
  for their dtype, device and layout alone (the first argument of ``x.new_ones(n, n)``,
  :data:`META_OPS`: Longformer's band masks; keyed by those three), or for those and
  their sizes and strides (``zeros_like(x)``, :data:`LIKE_OPS`); run as traced for a
  tensor subclass, whose own torch function makes the values. Runs of them that
  make at least one tensor become a block; the generated code calls :class:`Memo` with the
  block's inputs (its key) and gets the block's values, computed on the first call with
  that key and reused after. Tensors in a key count by identity, version and data
  pointer, so ``load_state_dict``, ``.to()`` and in-place updates are followed.

  A block runs where its first reader stands (nodes between do not read it; guards
  before it still run first), never past a switch of grad mode, nor (when it reads
  state) past another reader of that state, which may write it. A sized tensor that a
  later node writes in place (``zeros`` then slice assignments, ``fill_``, ``relu_``) is
  not memoised: the nodes whose memory the write reaches (the tensor and what it is a
  view of) are made on every call, and everything else is planned again without them, so
  a cached tensor is never handed out to be written. A write into memory the run itself
  made (a rotary table made from positions, then written by slices: :func:`_private_write`)
  joins the run instead: it happens once per key, before any reader outside the block.
  Nothing is memoised when a memoised
  tensor (or a view of one) could be returned to the caller; random and in-place ops,
  guards, grad-mode reads and factories asked for ``requires_grad`` are never sized.
  The key holds no float (``-0.0 == 0.0``), and the default dtype the values were made in
  (a factory without a dtype follows the default); they are made as normal tensors in
  any mode (runtime/lean.py); a few keys are kept per block. Under a
  torch function mode (a default device, a tracer) or autocast, which change what ops
  make without changing a key, the block runs (runtime/folding.py, ``outside_the_key``).

  Guards whose arguments are all values of the run (``zeros(2, n, 16).shape[1] == n``,
  which an LSTM's state checks record) join it: their outcome is the key's, so they are
  checked in the block's function, once per key, with the error and message they would
  give inline. A block with a guard runs where its first guard stood (not later, so an op
  that the guard protects never runs before it), and a run stops before another guard
  or before a node that reads a size made after its first guard, so guards are checked in
  the traced order. A call that a guard refuses leaves nothing in the cache: it is
  refused every time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..ir import Graph, Node, Ref, refs_in
from ..ir import ops as opset
from ..ir.analysis import output_ids
from . import caller_memory, data_writes
from .caller_memory import MAY_VIEW_ANY, RESHAPED_IN_PLACE, VIEW_OPS
from .folding import (
    _ALIASING,
    RESIZING,
    _autocast,
    _dispatch_modes,
    _epoch,
    _function_modes,
    _is_shared,
    _may_be_static,
    made_normal,
    resizes_in_place,
    static_ids,
)
from .sealed import peek

# Scalar kinds whose values are exact keys: equal means interchangeable (not floats).
SIZE_CHECKS = "prim.size_checks"  # runtime/size_checks.py's guards: a guard here too
_KEY_KINDS = frozenset({"int", "bool", "device", "dtype"})
_MODE_SWITCHES = frozenset({"set_grad_enabled", "prim.grad_enabled"})
KEEP = 8  # keys kept per block: a server sees a few sequence lengths, not thousands
KEEP_BYTES = 64 << 20  # tensor bytes kept per block: a causal mask of a long text is large


@dataclass
class MemoBlock:
    """Contiguous nodes of a (reordered) graph computed by one :class:`Memo`."""

    start: int  # index of the block's first node
    stop: int  # one past its last node
    keys: list[int]  # value ids read from outside the block, in order: the cache key
    boundary: list[int]  # value ids of the block that the rest of the graph reads
    # keys that are tensors read for their dtype, device and layout alone (META_OPS)
    meta: list[int] = field(default_factory=list)
    # keys that are tensors read for those and their sizes and strides (LIKE_OPS)
    like: list[int] = field(default_factory=list)


# Ops whose result depends on their first argument's dtype, device and layout only (and on
# their other, numeric, arguments): ``x.new_ones(n, n)`` reads nothing else of ``x``.
# (``new_empty`` is left out: its values are whatever the memory held.)
META_OPS = frozenset({"Tensor.new_ones", "Tensor.new_zeros", "Tensor.new_full"})
# Ops whose result depends on their first argument's sizes and strides (the memory format
# they preserve) too, and on nothing else of it.
LIKE_OPS = frozenset({"zeros_like", "ones_like", "full_like"})


def _meta_read(node: Node, ref: Ref) -> bool:
    """Whether ``node`` reads ``ref`` (a tensor) for its metadata alone: the first argument
    of one of :data:`META_OPS` or :data:`LIKE_OPS`, and nowhere else in the node."""
    if node.op not in META_OPS | LIKE_OPS or not node.args or node.args[0] != ref:
        return False
    return all(r.id != ref.id for r in refs_in((node.args[1:], node.kwargs)))


def _made_here(node: Node, fresh: set[int]) -> bool:
    """Whether the tensors ``node`` makes (a sized node of the current run) share memory
    only with tensors the run made itself (``fresh``): a new tensor, or a view or a write
    of one of those (caller_memory's rules: a view shares its first argument's memory, and
    one of :data:`MAY_VIEW_ANY` any of its tensors'); never a view of state or of a key."""
    refs = refs_in((node.args, node.kwargs))
    first = node.args[0] if node.args else None
    if node.op in MAY_VIEW_ANY or opset.info(node.op) is None:
        return all(r.id in fresh for r in refs)
    if node.op in VIEW_OPS or node.op in _ALIASING or opset.is_inplace(node.op):
        return isinstance(first, Ref) and first.id in fresh
    return True


def _private_write(node: Node, fresh: set[int]) -> bool:
    """Whether ``node`` writes in place only into memory that the current run made
    (``fresh``): Qwen's interleaved rotary table is made from positions and written by
    slices (``freqs_t[..., 1:n:3] = freqs[1, ..., 1:n:3]``). Run in the block, the write
    happens once per key, before any reader outside it (a reader between would have
    ended the run), so the values kept are the written ones; memory a key, state or an
    earlier block owns is never fresh. Not a random op, nor one that resizes (a key read
    for its sizes could be another one after it)."""
    if not opset.is_inplace(node.op) or node.op in RESHAPED_IN_PLACE:
        return False
    if node.op.rsplit(".", 1)[-1] in RESIZING or opset.draws_random(node):
        return False
    info = opset.info(node.op)
    if info is None or info.flags & {"random"}:
        return False
    written = caller_memory.stores(node)
    return bool(written) and all(r.id in fresh for r in written)


def _sized_candidate(node: Node) -> bool:
    wants_grad = node.kwargs.get("requires_grad", False)
    return _may_be_static(node) and not (wants_grad is not False and "requires_grad" in node.kwargs)


def _state_like(graph: Graph, folded: bool, static: set[int] | None = None) -> set[int]:
    """Tensors a block may take as keys by identity: state, and (where the graph's static
    part is folded, ``folded``) the tensors computed from literals and state alone, which
    the folded function gives as the same objects until the state changes (timm's position
    table resampled to the image's size: ``interpolate(pos_embed, size=(h, w))``); ``static``:
    :func:`~.folding.static_ids` of ``graph`` where the caller has it already."""
    state = {v.id for n in graph.nodes if n.op == "prim.state" for v in n.outputs}
    # State the graph writes without moving its version (a batch norm's running
    # statistics in training) is no key: its version says nothing.
    state -= caller_memory.unversioned_state(graph)
    if folded:
        kinds = {v.id: v.kind for n in graph.nodes for v in n.outputs}
        static = static_ids(graph) if static is None else static
        state |= {v for v in static if kinds.get(v) == "Tensor"}
    return state


def _find_runs(
    graph: Graph, excluded: frozenset[int] = frozenset(), folded: bool = False
) -> list[tuple[list[int], int]] | set[int] | None:
    """Runs of sized nodes (original indices, guards on their values included) with the
    index where the run moves (its first outside reader, or its first guard); None where
    memoising would be unsafe; the set of sized nodes (never any of ``excluded``) whose
    memory a later node writes in place, when there are such (the caller scans again
    with them excluded: they are made on every call, the rest is still kept)."""
    kinds = {v.id: v.kind for v in graph.inputs}
    kinds.update({v.id: v.kind for n in graph.nodes for v in n.outputs})
    defined_at = {v.id: index for index, n in enumerate(graph.nodes) for v in n.outputs}
    static = static_ids(graph)
    state = _state_like(graph, folded, static)
    # An input may share memory with state (a buffer passed in): its write may be one.
    writes_caller_memory = set(caller_memory.writers(graph))
    sized: set[int] = set()
    aliases: set[int] = set()  # sized tensors and what may share their memory
    runs: list[tuple[list[int], int]] = []
    state_views = set(state)  # state tensors and views of them made outside runs
    run: list[int] = []
    run_ids: set[int] = set()
    run_reads_state = False
    first_guard: int | None = None  # the run's first guard: where the run must run
    origin: dict[int, frozenset[int]] = {}  # alias id -> sized nodes whose memory it may share
    written: set[int] = set()  # sized nodes whose memory a later node writes
    fresh: set[int] = set()  # tensors of the run sharing memory only with the run's own

    def close(at: int) -> None:
        nonlocal run, run_ids, run_reads_state, first_guard
        runs.append((run, at if first_guard is None else first_guard))
        run, run_ids, run_reads_state, first_guard = [], set(), False, None
        fresh.clear()

    for index, node in enumerate(graph.nodes):
        refs = refs_in((node.args, node.kwargs))
        if node.op == "prim.guard" and refs and all(r.id in run_ids for r in refs):
            run.append(index)  # its outcome depends on the key only: checked once per key
            first_guard = index if first_guard is None else first_guard
            continue
        outside = [r for r in refs if r.id not in sized]
        first = node.args[0] if node.args else None
        if (
            index not in excluded
            and refs
            and (_sized_candidate(node) or _private_write(node, fresh))
            and not all(r.id in static for r in refs)
            and all(
                kinds.get(r.id) in _KEY_KINDS
                or r.id in state
                or (kinds.get(r.id) == "Tensor" and _meta_read(node, r))
                for r in outside
            )
        ):
            if first_guard is not None and any(
                defined_at.get(r.id, -1) > first_guard for r in outside
            ):
                close(index)  # the run runs at its first guard, before this key exists
            sized.update(v.id for v in node.outputs)
            aliases.update(v.id for v in node.outputs if v.kind == "Tensor")
            if _made_here(node, fresh):
                fresh.update(v.id for v in node.outputs if v.kind == "Tensor")
            shares = frozenset({index})
            if (
                isinstance(first, Ref)
                and first.id in origin
                and (node.op in _ALIASING or opset.is_inplace(node.op))
            ):
                shares |= origin[first.id]  # a view of a sized tensor: written together
            origin.update((v.id, shares) for v in node.outputs)
            run.append(index)
            run_ids.update(v.id for v in node.outputs)
            run_reads_state = run_reads_state or any(r.id in state for r in outside)
            continue
        # A run never moves past a switch of grad mode (it runs in the mode it was traced
        # in), nor past a node that reads state (which may write it: a buffer's add_, a
        # batch norm's running statistics) when the run reads state too; a run with a
        # guard never moves a later part of itself past another guard (the order in which
        # guards are checked, and so the refusal a call gets, stays the trace's).
        touches_state = run_reads_state and (
            any(r.id in state_views for r in refs) or index in writes_caller_memory
        )
        other_guard = first_guard is not None and node.op in ("prim.guard", SIZE_CHECKS)
        if run and (
            node.op in _MODE_SWITCHES
            or touches_state
            or other_guard
            or any(r.id in run_ids for r in refs)
        ):
            close(index)
        if isinstance(first, Ref) and first.id in state_views and node.op in _ALIASING:
            state_views.update(v.id for v in node.outputs)
        if isinstance(first, Ref) and first.id in aliases:
            if opset.is_inplace(node.op):
                # A write into a memoised tensor: what made that memory is made on every
                # call instead (a bigbird's zeros then slice writes, a retinanet's fill_).
                if not origin.get(first.id):
                    return None
                written |= origin[first.id]
            if node.op in _ALIASING:
                aliases.update(v.id for v in node.outputs)
                origin.update((v.id, origin.get(first.id, frozenset())) for v in node.outputs)
    if written:
        return written
    if run:
        close(len(graph.nodes))
    if output_ids(graph) & aliases:
        return None  # the caller would get a memoised tensor (or a view of one)
    return runs


def plan(graph: Graph, folded: bool = False) -> tuple[Graph, list[MemoBlock]]:
    """``graph`` with each worthwhile run of sized nodes moved, contiguous, to where it is
    first read, and the blocks to memoise; ``(graph, [])`` where there are none.
    ``folded``: the code folds the graph's static part (runtime/folding.py), so its tensors
    may be keys too."""
    excluded: frozenset[int] = frozenset()
    runs = _find_runs(graph, folded=folded)
    # Excluding a node only shrinks what is sized, so this ends (at most once per node);
    # one scan gathers every write, so a second scan normally finds none.
    while isinstance(runs, set) and not runs <= excluded:
        excluded |= runs
        runs = _find_runs(graph, excluded, folded)
    if not runs or isinstance(runs, set):
        return graph, []
    kinds = {v.id: v.kind for v in graph.inputs}
    kinds.update({v.id: v.kind for n in graph.nodes for v in n.outputs})
    state = _state_like(graph, folded)
    # A block runs where its first reader stands: a tensor it reads for its metadata is
    # read there, which a resize in place between would make another one.
    metadata_keys = not resizes_in_place(graph)
    chosen = []
    kept: set[int] = set()  # tensors that blocks chosen before give: the same object per key
    for run, at in runs:
        made = {v.id for i in run for v in graph.nodes[i].outputs}
        reads = [r.id for i in run for r in refs_in((graph.nodes[i].args, graph.nodes[i].kwargs))]
        keys = list(dict.fromkeys(r for r in reads if r not in made))
        makes_tensor = any(kinds.get(v) == "Tensor" for v in made)
        ops = sum(1 for i in run if graph.nodes[i].op.split(".")[0] not in ("prim", "scalar"))
        guards = sum(1 for i in run if graph.nodes[i].op == "prim.guard")
        meta = _meta_keys(graph, run, keys, kinds, state | kept) if metadata_keys else {}
        exact = all(
            kinds.get(k) in _KEY_KINDS or k in state or k in kept or k in meta for k in keys
        )
        if makes_tensor and ops + guards >= 2 and keys and exact:
            chosen.append((run, at, keys, meta))
            kept.update(v for v in made if kinds.get(v) == "Tensor")
    if not chosen:
        return graph, []
    moved = {i for run, _, _, _ in chosen for i in run}
    by_place: dict[int, list[tuple[list[int], list[int], dict[int, bool]]]] = {}
    for run, at, keys, meta in chosen:
        by_place.setdefault(at, []).append((run, keys, meta))
    nodes: list[Node] = []
    placed: list[tuple[int, int, list[int], set[int], dict[int, bool]]] = []
    for index in range(len(graph.nodes) + 1):
        for run, keys, meta in by_place.get(index, []):
            start = len(nodes)
            nodes.extend(graph.nodes[i] for i in run)
            made = {v.id for i in run for v in graph.nodes[i].outputs}
            placed.append((start, len(nodes), keys, made, meta))
        if index < len(graph.nodes) and index not in moved:
            nodes.append(graph.nodes[index])
    reordered = graph.with_nodes(nodes)
    blocks = []
    for start, stop, keys, made, meta in placed:
        read_after = {
            r.id
            for n in nodes[:start] + nodes[stop:]
            for r in refs_in((n.args, n.kwargs))
            if r.id in made
        }
        read_after |= output_ids(reordered) & made
        boundary = [v.id for n in nodes[start:stop] for v in n.outputs if v.id in read_after]
        like = [k for k in keys if meta.get(k)]
        blocks.append(MemoBlock(start, stop, keys, boundary, [k for k in keys if k in meta], like))
    return reordered, blocks


def _meta_keys(
    graph: Graph, run: list[int], keys: list[int], kinds: dict, exact: set[int]
) -> dict[int, bool]:
    """The tensor keys of ``run`` (not among ``exact``: state, tensors other blocks keep)
    that every node of the run reading them reads for metadata alone (:func:`_meta_read`),
    each with whether one of them reads its sizes and strides too (:data:`LIKE_OPS`)."""
    meta: dict[int, bool] = {}
    for key in keys:
        if kinds.get(key) != "Tensor" or key in exact:
            continue
        readers = [
            graph.nodes[i]
            for i in run
            if any(r.id == key for r in refs_in((graph.nodes[i].args, graph.nodes[i].kwargs)))
        ]
        if readers and all(_meta_read(node, Ref(key)) for node in readers):
            meta[key] = any(node.op in LIKE_OPS for node in readers)
    return meta


def subgraph(graph: Graph, block: MemoBlock) -> Graph:
    """A block as a graph of its own: its keys as inputs, its boundary as outputs."""
    values = {v.id: v for n in graph.nodes for v in n.outputs}
    values.update({v.id: v for v in graph.inputs})
    inputs = [values[k] for k in block.keys]
    return Graph(
        inputs=inputs,
        in_spec={"t": "tuple", "c": []},  # called with its keys only, never by a user
        nodes=graph.nodes[block.start : block.stop],
        outputs=[Ref(v) for v in block.boundary],
        out_spec={"t": "tuple", "c": [{"t": "leaf"} for _ in block.boundary]},
        sources=graph.sources,
    )


_grad_enabled = torch.is_grad_enabled
_default_dtype = torch.get_default_dtype
_Tensor = torch.Tensor
_strided = torch.strided
_Parameter = torch.nn.Parameter  # its torch function is disabled: its results are Tensors


class Memo:
    """Runs a block for a key of sizes once and keeps its values (the last :data:`KEEP`
    keys and at most :data:`KEEP_BYTES` of tensors, each with the default dtype it ran
    in); values larger than that are made on every call, and so are
    values of a call :func:`outside_the_key`. ``state`` are the positions of
    the key that are tensors (state, or values another memo keeps): they count by
    identity, version and data pointer (as in runtime/folding.py), and the cache keeps
    them alive so that an identity is never reused (after ``.to()``, the old tensors of a
    few keys stay alive until newer keys push them out); under autograd with one that
    requires grad, the block runs every time, so gradients reach the state."""

    def __init__(
        self,
        function,
        count: int,
        ops: int,
        state: tuple[int, ...] = (),
        guards: int = 0,
        counters: tuple[tuple[dict, str], ...] = (),
        meta: tuple[int, ...] = (),
        like: tuple[int, ...] = (),
    ):
        self.function = function
        self.count = count
        self.ops = ops
        self.state = state
        self.guards = guards
        # Slots of the ``num_batches_tracked`` of batch norms whose running statistics are
        # among ``state`` (folding.counters_of): their versions join the key.
        self.counters = counters
        # Positions of the key that are tensors read for their dtype, device and layout
        # alone (``x.new_ones(n, n)``): keyed by those, never kept alive by the cache.
        self.meta = meta
        self.like = like  # of those, the positions keyed by sizes and strides too
        self.cache: dict = {}  # entry -> (values, or (values, key tensors); bytes)
        self.bytes = 0

    def __repr__(self) -> str:
        checks = f", {self.guards} guards" if self.guards else ""
        return (
            f"memo({self.count} values of {self.ops} ops{checks} on sizes, {len(self.cache)} keys)"
        )

    def __call__(self, *key):
        # outside_the_key(), inline: a memo runs a few times per call of a model.
        if _function_modes() or _dispatch_modes() or _autocast():
            return self.function(*key)
        if self.state or self.meta:
            return self._with_state(key)
        entry = (key, _default_dtype())
        kept = self.cache.get(entry)
        if kept is None:
            return self._keep(entry, made_normal(self.function, *key), ())
        return kept[0]

    def _with_state(self, key: tuple):
        # Plain loops, no comprehension on the common path: a comprehension is a frame of
        # its own (Python 3.11), and a memo with state runs a few times per model call.
        state = self.state
        # Before any data pointer: torch.func.grad's tensors require grad and have none.
        if _grad_enabled() and any(key[i].requires_grad for i in state):
            return self.function(*key)
        exact = list(key)
        for i in self.meta:
            t = key[i]
            kind = type(t)
            if kind is not _Tensor and kind is not _Parameter:
                return self.function(*key)  # a subclass's torch function makes its values
            exact[i] = (t.dtype, t.device, t.layout)
        for i in self.like:
            t = key[i]
            if t.layout is not _strided:
                return self.function(*key)  # no strides to key on
            exact[i] = (t.shape, t.stride(), t.dtype, t.device)
        try:
            for i in state:
                t = key[i]
                kind = type(t)  # (``p.__class__ = Sub`` keeps the id, version and data)
                if kind is not _Tensor and kind is not _Parameter:
                    return self.function(*key)  # a subclass's torch function makes its values
                exact[i] = (id(t), t._version, t.data_ptr())
        except RuntimeError:  # an inference tensor (a value folded in inference mode) has
            return self.function(*key)  # no version to key on: made, as eager makes it
        counted = ()
        if self.counters:
            counted = tuple([peek(owner, name)._version for owner, name in self.counters])
        entry = (tuple(exact), counted, _default_dtype(), _epoch[0])
        kept = self.cache.get(entry)
        if kept is None:
            tensors = [key[i] for i in state]
            # A write through .data moves no version, nor one in another process into
            # shared memory (torch.multiprocessing): nothing kept (runtime/folding.py).
            if data_writes.taken(tensors) or any(map(_is_shared, tensors)):
                return self.function(*key)
            data_writes.keep(tensors)
            return self._keep(entry, made_normal(self.function, *key), tensors)
        return kept[0][0]

    def _keep(self, entry, values, tensors):
        size = _nbytes(values)
        if size > KEEP_BYTES:
            return values  # too large to keep: made again on the next call, as eager does
        while self.cache and (len(self.cache) >= KEEP or self.bytes + size > KEEP_BYTES):
            self.bytes -= _pop_oldest(self.cache)
        self.cache[entry] = ((values, tensors) if self.state or self.meta else values, size)
        self.bytes += size
        return values


def keep_newest(cache: dict, key, value, limit: int) -> None:
    """``cache[key] = value``, the oldest entries dropped first so that at most ``limit``
    are kept (dicts keep insertion order). Threads share a method's caches: an entry
    another thread took first ends the dropping, never the call."""
    while len(cache) >= limit:
        try:
            cache.pop(next(iter(cache)), None)
        except (StopIteration, RuntimeError):
            break
    cache[key] = value


def _pop_oldest(cache: dict) -> int:
    """Drop the oldest entry and return its bytes (0 if another thread took it first)."""
    try:
        key = next(iter(cache))
    except (StopIteration, RuntimeError):
        return 0
    dropped = cache.pop(key, None)
    return dropped[1] if dropped is not None else 0


def _nbytes(values: tuple) -> int:
    return sum(v.nbytes for v in values if isinstance(v, torch.Tensor))
