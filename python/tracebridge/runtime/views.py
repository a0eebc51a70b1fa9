"""Collapse trees of view ops into one ``as_strided`` per result, per key of sizes.

Note: fewer ops per call, a step past runtime/memo.py.
  Splitting attention heads is a tree of pure views: nn.MultiheadAttention's unfused path
  runs ``unflatten -> unsqueeze -> transpose -> squeeze`` on the input projection, then
  ``getitem -> view -> transpose -> view`` for each of q, k and v; GPT-2 runs ``view ->
  split`` and ``view -> transpose`` per head tensor. Each op costs a Python call, its
  argument parsing and a new tensor: ``torch.jit.trace`` runs the same ops for less. A
  view's geometry (sizes, strides, storage offset) is a function of its base's sizes and
  strides and of the integer arguments of the ops, never of the values. So :func:`plan`
  finds trees of view ops over one base whose inner values nothing else reads (a shape
  read of an inner value may: its result is kept with the geometry), and the generated
  code calls :class:`Views` with the base and the integers the tree reads (its key). On
  the first call with a key, the tree runs as traced, and each result's size, stride and
  offset relative to the base are kept (after checking that the result is a view of the
  base within the base's own elements); later calls make each result with one
  ``as_strided`` of the base. A call that raises keeps nothing, so it raises again on the
  next call with that key.

  The collapsed call stands where the tree's last op stood: a tree is collapsed only if
  nothing reads its results before that, and no write, grad-mode switch or custom
  function stands between its first and its last op (the ops it replaces ran in between;
  a guard in between now checks first, so a call that breaks both a guard and a view
  raises the GuardError). Where a result is read sooner, the call stands at the first
  of its ops where the base and every integer it reads are made, if no result is read
  by then (q, k and v split from one linear, runtime/concat_linear.py, with q rotated
  before k is viewed) and no guard stands between there and its last op; else each
  path from the base to a result is tried as a call of its own, standing where that
  result was made; a path is kept only if the code then needs none of the nodes it takes
  over (a sibling path left to the code may read them).
  Ops that may copy (``reshape``, ``contiguous``, ``flatten``) end a tree: a copy is not a
  view. ``as_strided`` is a view whose geometry its integer arguments decide: it joins a
  tree, and so does integer arithmetic on the sizes and strides the tree reads
  (Longformer's chunks: ``view``, then ``as_strided`` with ``stride // 2`` and
  ``2 * n - 1``); its bounds are checked (runtime/checked_views.py) on the first call with
  a key, and ``_geometry`` keeps only results within the base's own elements. A 0-dim
  int32/int64 tensor given as a size (``torch.div(n, w, rounding_mode="trunc")``) is read
  as an int for the key, as the op reads it; another value there runs the tree as
  traced. Under autograd with a base that requires grad, a tensor subclass, or a layout
  other than strided, the tree runs as traced (``as_strided``'s backward differs from the
  views'). A tree is worth collapsing only when it saves more ops than it makes
  (:data:`MIN_SAVED`): a key and an ``as_strided`` cost about two views.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..ir import Graph, Node, Ref, refs_in
from ..ir import ops as opset
from ..ir.analysis import output_ids
from .checked_views import _span
from .memo import KEEP, keep_newest

# Ops whose results are always views of their first argument, with a geometry decided by
# that argument's sizes and strides and the op's integer arguments alone.
VIEW_OPS = frozenset(
    """transpose swapaxes swapdims permute Tensor.permute unsqueeze squeeze select narrow
    Tensor.view Tensor.expand broadcast_to t Tensor.T Tensor.mT movedim moveaxis unflatten
    Tensor.unflatten diagonal Tensor.unfold getitem split split_with_sizes chunk unbind
    as_strided""".split()
)
# Reads of a value that its geometry alone decides: kept with the geometry when the value
# is inside a tree.
SHAPE_READS = frozenset(
    """prim.size prim.numel prim.stride prim.storage_offset prim.is_contiguous
    prim.is_contiguous_as""".split()
)
# Nodes a tree's ops must not move past: writes, grad-mode switches, custom functions.
_BARRIERS = frozenset({"set_grad_enabled", "prim.autograd_function"})
# The kind :func:`plan` gives a 0-dim int32 or int64 tensor when it was traced: a size
# that an op reads as an int (Longformer's ``torch.div(n, w, rounding_mode="trunc")``);
# a tree reads it as an int for its key (Views.run), or runs as traced.
_INDEX = "index"
_INDEX_DTYPES = frozenset({"int32", "int64"})
_INDEX_TYPES = frozenset({torch.int32, torch.int64})
MIN_SAVED = 2  # a tree replaces views - results ops by one call: at least this many fewer
# Views that cost more than one: ``as_strided`` checks its bounds in Python first
# (runtime/checked_views.py), about three views' time; in a tree, the first call with a
# key checks them and later calls make the view of the base the check allowed.
_COST = {"as_strided": 3}
# Integer arithmetic on the sizes and strides a tree reads (Longformer computes the
# strides of its chunked view with ``stride // 2`` and its sizes with ``2 * n - 1``):
# decided by the tree's key, so it joins the tree, its results given with the tree's.
_SIZE_ARITHMETIC = frozenset("scalar.add scalar.sub scalar.mul scalar.floordiv scalar.neg".split())


@dataclass
class ViewTree:
    """View ops over one base, run as one call of :class:`Views`."""

    base: int  # value id of the tensor the tree views
    members: list[int]  # node indices of its views and shape reads, in graph order
    keys: list[int]  # integer value ids its nodes read from outside it
    results: list[int]  # tensor value ids read outside it: one ``as_strided`` each
    sizes: list[int]  # values of its shape reads that are read outside it
    ops: list[str]  # names of its view ops, in order (for the comment in ``.code``)
    index_keys: tuple[int, ...] = ()  # positions in ``keys`` of 0-dim integer tensors
    stands: int | None = None  # the member where its call stands, if not its last

    @property
    def at(self) -> int:
        """Index of the node where the tree's call stands (its last member, or an earlier
        one where a result is read sooner: see :func:`_tree`)."""
        return self.members[-1] if self.stands is None else self.stands


def _plain_index(arg, kinds: dict[int, str]) -> bool:
    """A basic index (a view): ints, slices of ints, None, Ellipsis, tuples of these."""
    if isinstance(arg, Ref):
        return kinds.get(arg.id) == "int"
    if isinstance(arg, tuple):
        return all(_plain_index(a, kinds) for a in arg)
    if isinstance(arg, slice):
        return all(
            p is None or type(p) is int or (isinstance(p, Ref) and kinds.get(p.id) == "int")
            for p in (arg.start, arg.stop, arg.step)
        )
    return arg is None or arg is Ellipsis or type(arg) is int


def _int_arguments(value, kinds: dict[int, str]) -> bool:
    """Literal ints (bools too), None, and integer values of the graph (ints, and 0-dim
    integer tensors: :data:`_INDEX`), in lists and tuples."""
    if isinstance(value, Ref):
        return kinds.get(value.id) in ("int", _INDEX)
    if isinstance(value, (list, tuple)):
        return all(_int_arguments(v, kinds) for v in value)
    return value is None or type(value) in (int, bool)


def _is_view(node: Node, kinds: dict[int, str]) -> bool:
    if node.op not in VIEW_OPS or not node.args or not isinstance(node.args[0], Ref):
        return False
    if kinds.get(node.args[0].id) != "Tensor" or not node.outputs:
        return False
    if any(v.kind != "Tensor" for v in node.outputs):
        return False
    rest = (list(node.args[1:]), list(node.kwargs.values()))
    if node.op == "getitem":
        return len(node.args) == 2 and not node.kwargs and _plain_index(node.args[1], kinds)
    if node.op == "as_strided" and not _relative(node):
        return False
    return _int_arguments(rest, kinds)


def _relative(node: Node) -> bool:
    """Whether an ``as_strided`` node keeps its input's storage offset: one it is given
    counts from the storage's start, not from the base's offset, which a tree's key does
    not hold (the same sizes and strides at another offset would read other elements)."""
    offset = node.args[3] if len(node.args) > 3 else node.kwargs.get("storage_offset")
    return offset is None


def _is_shape_read(node: Node, kinds: dict[int, str]) -> bool:
    return (
        node.op in SHAPE_READS
        and bool(node.args)
        and isinstance(node.args[0], Ref)
        and len(node.outputs) == 1
        and _int_arguments((list(node.args[1:]), list(node.kwargs.values())), kinds)
    )


def _arithmetic_base(node: Node, numbers: dict[int, int], kinds: dict[int, str]) -> int | None:
    """The base of the tree whose numbers ``node`` computes on (:data:`_SIZE_ARITHMETIC`
    of that tree's size reads and literal ints, an int out), or None."""
    if node.op not in _SIZE_ARITHMETIC or node.kwargs or len(node.outputs) != 1:
        return None
    if node.outputs[0].kind != "int":
        return None
    bases = set()
    for arg in node.args:
        if isinstance(arg, Ref):
            if arg.id not in numbers:
                return None
            bases.add(numbers[arg.id])
        elif type(arg) is not int:
            return None
    return bases.pop() if len(bases) == 1 else None


def _writes(node: Node) -> bool:
    return node.op in _BARRIERS or opset.is_inplace(node.op) or "out" in node.kwargs


@dataclass
class _Facts:
    """What :func:`plan` knows of a graph, for judging one tree."""

    graph: Graph
    views: set[int]  # indices of the view nodes that may join a tree
    made_by: dict[int, int]  # value id -> index of the view node that makes it
    root: dict[int, int]  # inner value id -> base of its tree
    users: dict[int, list[int]]  # value id -> indices of the nodes that read it
    returned: set[int]  # value ids the graph returns
    kinds: dict[int, str]  # value id -> kind (:data:`_INDEX` for 0-dim integer tensors)
    defined: dict[int, int]  # value id -> index of the node that makes it (-1: an input)
    numbers: dict[int, int]  # int value id a tree's member makes -> the tree's base


def plan(graph: Graph, skip: set[int] = frozenset()) -> list[ViewTree]:
    """The trees of ``graph`` worth collapsing (see the module Note); nodes in ``skip``
    (folded or memoised elsewhere) are never part of one. A tree whose results are read
    before its last op is tried again as one path per result: each path stands where its
    own result is made."""
    values = [*graph.inputs, *(v for n in graph.nodes for v in n.outputs)]
    kinds = {v.id: v.kind for v in values}
    for v in values:
        if v.kind == "Tensor" and v.shape == [] and v.dtype in _INDEX_DTYPES:
            kinds[v.id] = _INDEX
    users: dict[int, list[int]] = {}
    for index, node in enumerate(graph.nodes):
        for ref in refs_in((node.args, node.kwargs)):
            users.setdefault(ref.id, []).append(index)
    returned = output_ids(graph)
    views = {i for i, n in enumerate(graph.nodes) if i not in skip and _is_view(n, kinds)}
    made_by = {v.id: i for i in views for v in graph.nodes[i].outputs}

    def inner(value: int) -> bool:
        """A view's result that only views and shape reads of the same tree read."""
        if value not in made_by or value in returned:
            return False
        for i in users.get(value, ()):
            node = graph.nodes[i]
            if i in skip or not node.args or node.args[0] != Ref(value):
                return False
            if i not in views and not _is_shape_read(node, kinds):
                return False
        return True

    trees: dict[int, list[int]] = {}  # base value id -> member node indices
    root: dict[int, int] = {}  # inner value id -> base of its tree
    numbers: dict[int, int] = {}  # int value id a member reads or computes -> base of its tree
    for index, node in enumerate(graph.nodes):
        source = node.args[0].id if node.args and isinstance(node.args[0], Ref) else None
        if index in views:
            base = root.get(source, source)
            trees.setdefault(base, []).append(index)
            for value in node.outputs:
                if inner(value.id):
                    root[value.id] = base
        elif source in root and index not in skip and _is_shape_read(node, kinds):
            trees[root[source]].append(index)
            numbers[node.outputs[0].id] = root[source]
        elif index not in skip and (base := _arithmetic_base(node, numbers, kinds)) is not None:
            trees[base].append(index)
            numbers[node.outputs[0].id] = base
    defined = {v.id: -1 for v in graph.inputs}
    defined.update({v.id: i for i, n in enumerate(graph.nodes) for v in n.outputs})
    facts = _Facts(graph, views, made_by, root, users, returned, kinds, defined, numbers)
    found = []
    for base, members in trees.items():
        whole = _tree(facts, base, members)
        if whole is not None:
            found.append(whole)
            continue
        for path in _paths(facts, members):
            found.extend(t for t in [_tree(facts, base, path)] if t is not None)
    return _complete(facts, found)


def _complete(facts: _Facts, trees: list[ViewTree]) -> list[ViewTree]:
    """``trees`` less those whose nodes make a value that the code needs and that no
    chosen tree gives (paths of one tree share nodes; one path may be chosen without
    another): the code runs none of a chosen tree's nodes itself."""
    while True:
        members = {i for t in trees for i in t.members}
        given = {v for t in trees for v in t.results + t.sizes}
        needed = facts.returned | {
            v for v, readers in facts.users.items() if any(i not in members for i in readers)
        }
        kept = [
            t
            for t in trees
            if all(
                v.id in given or v.id not in needed
                for i in t.members
                for v in facts.graph.nodes[i].outputs
            )
        ]
        if len(kept) == len(trees):
            return trees
        trees = kept


def _paths(facts: _Facts, members: list[int]):
    """The members of each path of a tree: for each view node that makes a result, the
    views from the base to it and the shape reads of their inner values."""
    graph, root = facts.graph, facts.root
    ends = [
        i
        for i in members
        if i in facts.views and any(v.id not in root for v in graph.nodes[i].outputs)
    ]
    if len(ends) < 2:
        return
    for end in ends:
        chain, index = {end}, end
        while graph.nodes[index].args[0].id in root:
            index = facts.made_by[graph.nodes[index].args[0].id]
            chain.add(index)
        inner = {v.id for i in chain for v in graph.nodes[i].outputs if v.id in root}
        reads = {
            i
            for i in members
            if graph.nodes[i].op in SHAPE_READS and graph.nodes[i].args[0].id in inner
        }
        numbers = {v.id for i in reads for v in graph.nodes[i].outputs}
        for i in members:  # the arithmetic on them, in graph order
            node = graph.nodes[i]
            refs = refs_in(node.args)
            if node.op in _SIZE_ARITHMETIC and refs and all(r.id in numbers for r in refs):
                reads.add(i)
                numbers.update(v.id for v in node.outputs)
        yield sorted(chain | reads)


def _tree(facts: _Facts, base: int, members: list[int]) -> ViewTree | None:
    """The tree over ``base`` made of ``members``, or None where collapsing it would be
    unsafe or not worth it. Its results are every value its views make that something
    outside it reads (for a path, a sibling of a multi-output view's inner value too)."""
    graph, root, users, returned = facts.graph, facts.root, facts.users, facts.returned
    made = {v.id for i in members for v in graph.nodes[i].outputs}
    member_set = set(members)
    at = members[-1]
    view_nodes = [i for i in members if i in facts.views]
    results = [
        v.id
        for i in view_nodes
        for v in graph.nodes[i].outputs
        if v.id not in root and (users.get(v.id) or v.id in returned)
    ]
    sizes = [
        v.id
        for i in members
        if i not in facts.views
        for v in graph.nodes[i].outputs
        if v.id in returned or any(u not in member_set for u in users.get(v.id, ()))
    ]
    between = range(members[0] + 1, at)
    if any(i not in member_set and _writes(graph.nodes[i]) for i in between):
        return None  # the ops it replaces would move past a write or a mode switch
    saved = sum(_COST.get(graph.nodes[i].op, 1) for i in view_nodes) - len(results)
    if not results or saved < MIN_SAVED:
        return None
    reads = [r.id for i in members for r in refs_in((graph.nodes[i].args, graph.nodes[i].kwargs))]
    keys = list(dict.fromkeys(r for r in reads if r not in made and r != base))
    stands = None
    first_read = min(
        (i for value in results + sizes for i in users.get(value, ()) if i not in member_set),
        default=len(graph.nodes),
    )
    if first_read <= at:
        # A result is read before the last member: the call may stand at the first member
        # where the base and every key are made, if no result is read by then (the
        # views of a q/k/v projection run as one linear, read one by one). Views cost no
        # work: made sooner, they are the same views of the same memory.
        ready = max(facts.defined.get(k, len(graph.nodes)) for k in [base, *keys])
        # Only values the code makes where their node stands: a view's result or a size
        # another tree reads may be made where that tree's call stands, later.
        made_elsewhere = any(k in facts.made_by or k in facts.numbers for k in [base, *keys])
        stands = None if made_elsewhere else next((i for i in members if i > ready), None)
        if stands is None or first_read <= stands:
            return None  # read before the tree's call could stand
        if any(graph.nodes[i].op == "prim.guard" for i in range(stands + 1, at)):
            # Its later views would run before a guard that the traced code checked first
            # (Jamba indexes ``C[:, index]`` for each step of ``range(seq_len)``, guarded:
            # another length must raise that GuardError, not an IndexError of a view).
            return None
    ops = [graph.nodes[i].op for i in view_nodes]
    index_keys = tuple(i for i, k in enumerate(keys) if facts.kinds.get(k) == _INDEX)
    return ViewTree(base, members, keys, results, sizes, ops, index_keys, stands)


def subgraph(graph: Graph, tree: ViewTree) -> Graph:
    """A tree as a graph of its own: its base and keys as inputs, its results and the
    sizes read outside it as outputs."""
    values = {v.id: v for n in graph.nodes for v in n.outputs}
    values.update({v.id: v for v in graph.inputs})
    outputs = tree.results + tree.sizes
    return Graph(
        inputs=[values[tree.base]] + [values[k] for k in tree.keys],
        in_spec={"t": "tuple", "c": []},  # called by the generated code only
        nodes=[graph.nodes[i] for i in tree.members],
        outputs=[Ref(v) for v in outputs],
        out_spec={"t": "tuple", "c": [{"t": "leaf"} for _ in outputs]},
        sources=graph.sources,
    )


def surrogate(graph: Graph, trees: list[ViewTree]) -> Graph:
    """``graph`` with each tree as one node where its call stands (and empty nodes at its
    other members): what the generated code runs, for ``last_uses``."""
    nodes = list(graph.nodes)
    values = {v.id: v for n in graph.nodes for v in n.outputs}
    for i in {i for tree in trees for i in tree.members}:
        nodes[i] = Node("prim.views")
    for tree in trees:  # paths of one tree may share members, and so where they stand
        reads = [Ref(tree.base)] + [Ref(k) for k in tree.keys]
        made = [values[v] for v in tree.results + tree.sizes]
        node = nodes[tree.at]
        nodes[tree.at] = Node("prim.views", node.args + reads, outputs=node.outputs + made)
    return graph.with_nodes(nodes)


_Tensor = torch.Tensor
_strided = torch.strided
_grad_enabled = torch.is_grad_enabled
_AS_TRACED = "as traced"  # a key whose results are not all views of the base: run the tree


class Views:
    """Runs a tree for a key (the base's sizes and strides, the integers the tree reads):
    the first time as traced, keeping each result's geometry relative to the base;
    after that as one ``as_strided`` per result. Keeps the last :data:`KEEP` keys."""

    def __init__(self, function, results: int, ops: list[str], index_keys: tuple = ()):
        self.function = function  # the tree's ops as traced: (base, *keys) -> values
        self.results = results
        self.ops = ops
        self.index_keys = index_keys  # keys that are 0-dim integer tensors: read as ints
        self.cache: dict = {}  # key -> a function of the base that gives the values

    def __repr__(self) -> str:
        made = f"{self.results} tensor{'s' if self.results != 1 else ''}"
        return f"views({made} from {len(self.ops)} view ops, {len(self.cache)} keys)"

    def run(self, base, *keys):
        """The tree's values for ``base`` and ``keys``, as the traced ops give them."""
        if (
            type(base) is not _Tensor
            or base.layout is not _strided
            or (_grad_enabled() and base.requires_grad)
        ):
            return self.function(base, *keys)
        ints = keys
        if self.index_keys:  # their ops read them as ints: so does the key
            ints = list(keys)
            for i in self.index_keys:
                k = keys[i]
                if type(k) is not _Tensor or k.dim() != 0 or k.dtype not in _INDEX_TYPES:
                    return self.function(base, *keys)
                ints[i] = int(k)
            ints = tuple(ints)
        entry = (base.shape, base.stride(), ints)
        make = self.cache.get(entry)
        if make is None:
            return self._first(entry, base, keys, ints)
        return make(base)

    def _first(self, entry, base, keys, ints):
        values = self.function(base, *keys)  # raises as the traced ops do; nothing kept
        if not all(type(k) is int for k in ints):
            return values  # a key that equal values of another type could match
        try:
            geometry = _geometry(base, values[: self.results])
        except NotImplementedError:  # torch.vmap's tensors have no storage to compare
            return values
        if geometry is None:  # not all views of the base for this key: run them as traced
            function = self.function

            def make(base):
                return function(base, *keys)
        else:
            make = _maker(geometry, values[self.results :])
        keep_newest(self.cache, entry, make, KEEP)
        return values


def _maker(geometry: tuple, sizes: tuple):
    """A function of a base that makes the results of ``geometry`` with ``as_strided``
    and gives them with ``sizes``. Written out for one to three results (a comprehension
    is a frame of its own); the offset is passed only where it moves."""
    if len(geometry) == 1:
        ((size, stride, shift),) = geometry
        if shift == 0:  # as_strided keeps the base's offset
            return lambda base: (base.as_strided(size, stride), *sizes)
        return lambda base: (base.as_strided(size, stride, base.storage_offset() + shift), *sizes)
    if len(geometry) == 2:
        (s0, t0, h0), (s1, t1, h1) = geometry

        def make(base):
            offset = base.storage_offset()
            return (
                base.as_strided(s0, t0, offset + h0),
                base.as_strided(s1, t1, offset + h1),
                *sizes,
            )

        return make
    if len(geometry) == 3:
        (s0, t0, h0), (s1, t1, h1), (s2, t2, h2) = geometry

        def make(base):
            offset = base.storage_offset()
            return (
                base.as_strided(s0, t0, offset + h0),
                base.as_strided(s1, t1, offset + h1),
                base.as_strided(s2, t2, offset + h2),
                *sizes,
            )

        return make

    def make(base):
        offset = base.storage_offset()
        made = [base.as_strided(size, stride, offset + shift) for size, stride, shift in geometry]
        return (*made, *sizes)

    return make


def _geometry(base: torch.Tensor, results) -> tuple | None:
    """``(size, stride, offset from base)`` of each result, or None unless every result
    is a plain view of ``base``'s memory within its own elements (so that
    ``as_strided`` of the base gives it back exactly)."""
    geometry = []
    first, last = _span(base)
    pointer = base.untyped_storage().data_ptr()
    for result in results:
        if (
            type(result) is not _Tensor
            or result.layout is not _strided
            or result.dtype != base.dtype
            or result.is_conj() != base.is_conj()
            or result.is_neg() != base.is_neg()
            or result.untyped_storage().data_ptr() != pointer
        ):
            return None
        low, high = _span(result)
        if result.numel() and (low < first or high > last):
            return None
        shift = result.storage_offset() - base.storage_offset()
        geometry.append((tuple(result.shape), result.stride(), shift))
    return tuple(geometry)
