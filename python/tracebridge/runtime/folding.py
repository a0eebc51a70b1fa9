"""Fold what the inputs cannot change: values computed only from literals and state.

Note: folding, as ``torch.jit.freeze`` does, but kept live.
  A traced model often computes things no input can change: a causal mask from literal
  sizes, a weight transposed or scaled, a table of positions. :func:`plan` finds the ops
  whose arguments are all literals, state reads or results of such ops ("static"), and
  the generated code computes them once, in a function of their own, instead of on every
  call. The result is cached with the state tensors it read (by identity, ``_version``
  and data pointer), so ``load_state_dict``, ``.to()``, a parameter assignment, a
  ``.data`` assignment or an in-place update recompute it at the next call, and so does
  another default dtype (a factory without a dtype follows it). Under autograd with a
  state tensor that requires grad, the static ops run on every call, as before, so
  gradients reach the parameters; so they do under a torch function mode (a default
  device, a tracer) or in an autocast region, which change what ops make without
  changing the state (:func:`outside_the_key`), and where a state tensor is of a subclass
  (``p.__class__ = Sub`` keeps the object, its version and data: its torch function runs
  on every call, as in eager).

  The check is skipped where the state cannot have changed: a frozen program's own copy
  (:class:`FixedFolded`, runtime/frozen.py), and a loaded object's state until it could
  have reached anyone (:class:`SealedFolded`, runtime/sealed.py: any Python-level read or
  write of its state tables, ``program``, a call with autograd over state that requires
  grad breaks the seal, and every call after checks as here).

  A graph that switches the grad mode (a rotary embedding under ``torch.no_grad()``)
  folds only in the code for calls without autograd that the graph never turns on
  (runtime/cse.py, ``grad_stays_off``): there every op runs with gradients off, wherever
  it stands, and so does the folded function.

  Not folded: random ops, in-place ops, guards, grad-mode switches, custom autograd
  functions, values of state the graph writes without moving its version (a batch norm's
  running statistics in training: caller_memory.unversioned_state), and any graph where
  a folded tensor (or a view of one) would be written in place or returned to the caller
  -- a cached tensor must never change or escape. Nor a
  static part that only reads metadata and computes on numbers (``weight.dtype``,
  ``weight.shape[0] * 2``): inline it costs a tenth of the cache's own check (``item``
  reads the data, and on an accelerator waits for it: that is folded).

  Guards on static values (a weight's dtype, ``bool(w.abs().sum() > 0)``) are checked in
  the folded function: when the state changes the fold runs again, and so do they, with
  the error and message they would give inline; a call they refuse caches nothing, so it
  is refused every time. They run at the fold's call, the first thing a call does after
  its input checks. With guards off (``tracebridge.guards_disabled``) the code has no
  guards, and nothing is computed for them.
"""

from __future__ import annotations

import operator
from collections.abc import Collection
from dataclasses import dataclass

import torch

from ..ir import Graph, Node, Ref, pytree, refs_in
from ..ir import ops as opset
from ..ir.analysis import output_ids, state_reads
from ..ir.program import Value
from . import caller_memory, data_writes

# Structural ops that read something other than their arguments' values (the caller's
# grad mode, a flag that changes without a version) or that decide: never static.
_DYNAMIC_PRIMS = opset.DYNAMIC_READS | {"prim.guard", "prim.autograd_function"}
# Ops whose result may be their first argument or share its memory (so a write through
# the result would change a folded tensor).
_ALIASING = frozenset(
    """getitem Tensor.view Tensor.view_as Tensor.reshape reshape narrow select transpose
    Tensor.expand Tensor.expand_as expand broadcast_to squeeze unsqueeze Tensor.permute
    permute flatten detach t Tensor.t movedim moveaxis unflatten Tensor.unflatten
    Tensor.unfold as_strided diagonal real imag Tensor.real Tensor.imag Tensor.T Tensor.mT
    Tensor.H Tensor.mH Tensor.data Tensor.contiguous Tensor.to Tensor.type Tensor.type_as
    Tensor.float Tensor.double Tensor.half Tensor.bfloat16 Tensor.long Tensor.int
    Tensor.short Tensor.char Tensor.byte Tensor.bool Tensor.cpu chunk split
    split_with_sizes unbind tensor_split swapaxes swapdims ravel view_as_real
    view_as_complex atleast_1d atleast_2d atleast_3d dropout feature_dropout alpha_dropout
    feature_alpha_dropout Tensor.reshape_as hsplit vsplit dsplit as_tensor positive
    Tensor.cfloat Tensor.cdouble""".split()
)


# In-place ops that change a tensor's sizes, strides (or storage): metadata read from a
# tensor later than where a node stood would not be what the node read there
# (runtime/size_checks.py, runtime/memo.py).
RESIZING = frozenset(
    """resize_ resize_as_ set_ squeeze_ unsqueeze_ t_ transpose_ swapdims_ swapaxes_
    as_strided_""".split()
)


def resizes_in_place(graph: Graph) -> bool:
    """Whether a node of ``graph`` changes a tensor's sizes in place (:data:`RESIZING`)."""
    return any(n.op.rsplit(".", 1)[-1] in RESIZING for n in graph.nodes)


def _static_at(
    node: Node, index: int, barrier: int, static: set[int], refs: list, unversioned: set[int]
) -> bool:
    """Whether node ``index`` of a graph is static: a read of state, or an op that may be
    static on static values only, standing before ``barrier``, the first node that may
    write an input or state (runtime/caller_memory.py). Past it, state may have changed
    during the call (a buffer passed as an input and written), and a value made from it at
    the call's start would be a stale one. A read of state that the graph writes without
    moving its version (``unversioned``: a batch norm's running statistics in training,
    caller_memory.unversioned_state) is never static: a value kept from it, keyed on its
    version, would be the first call's on every later call."""
    if node.op == "prim.state":
        return node.outputs[0].id not in unversioned
    return index < barrier and _may_be_static(node) and all(r.id in static for r in refs)


def static_ids(graph: Graph) -> set[int]:
    """The ids of the values of ``graph`` computed from literals and state alone, before
    any write into memory the caller gives (:func:`_static_at`): those :func:`plan` may
    fold."""
    barrier = caller_memory.first_write(graph)
    unversioned = caller_memory.unversioned_state(graph)
    static: set[int] = set()
    for index, node in enumerate(graph.nodes):
        refs = refs_in((node.args, node.kwargs))
        if _static_at(node, index, barrier, static, refs, unversioned):
            static.update(v.id for v in node.outputs)
    return static


@dataclass
class FoldPlan:
    """Which nodes of a graph are static, and what the rest of the graph reads from them."""

    nodes: list[int]  # indices of the static nodes, in order
    boundary: list[int]  # static value ids read by the other nodes
    sources: list[str]  # state names the static nodes read
    skip: list[int]  # the static nodes the graph's own code leaves out (not read by the rest)


def _may_be_static(node: Node) -> bool:
    if node.op in _DYNAMIC_PRIMS or not node.outputs:
        return False
    info = opset.info(node.op)
    return info is not None and not (info.flags & {"random", "inplace"} or opset.draws_random(node))


# Reads of a tensor's metadata: inline they cost a tenth of a folded call. (``item``,
# ``tolist`` and conversions read the data, which on an accelerator waits for it: worth
# folding.)
_METADATA_PRIMS = frozenset(
    """prim.dtype prim.device prim.size prim.numel prim.stride prim.storage_offset
    prim.is_contiguous prim.is_contiguous_as prim.len""".split()
)


def _worth_a_call(node: Node) -> bool:
    """Whether folding ``node`` saves more than the cache's own check costs: not a read of
    metadata nor arithmetic on numbers (``weight.dtype`` inline is a tenth of a folded
    call)."""
    return node.op not in _METADATA_PRIMS and not node.op.startswith("scalar.")


def plan(graph: Graph, guards: bool = True, grad_off: bool = False) -> FoldPlan | None:
    """The static part of ``graph`` worth folding, or None (see the module Note).
    ``guards``: whether the code checks guards (those on static values join the fold).
    ``grad_off``: the code is for calls without autograd that stay without it through the
    graph (runtime/cse.py, ``grad_stays_off``: a rotary embedding's ``torch.no_grad()``
    in a decoder), where every op runs with gradients off wherever it stands."""
    if not grad_off and any(n.op == "set_grad_enabled" for n in graph.nodes):
        return None  # which grad mode a static op would run in is the call's
    static: set[int] = set()
    aliases: set[int] = set()  # static values and the values that may share their memory
    indices = []
    checks = []  # guards on static values: checked with the state's values
    barrier = caller_memory.first_write(graph)
    unversioned = caller_memory.unversioned_state(graph)
    for index, node in enumerate(graph.nodes):
        refs = refs_in((node.args, node.kwargs))
        first = node.args[0] if node.args else None
        if node.op == "prim.guard":
            if guards and refs and all(r.id in static for r in refs) and index < barrier:
                checks.append(index)
            continue
        if _static_at(node, index, barrier, static, refs, unversioned):
            static.update(v.id for v in node.outputs)
            aliases.update(v.id for v in node.outputs)
            indices.append(index)
            continue
        if isinstance(first, Ref) and first.id in aliases:
            if opset.is_inplace(node.op):
                return None  # a write into a folded tensor
            if node.op in _ALIASING:
                aliases.update(v.id for v in node.outputs)
    if output_ids(graph) & aliases:
        return None  # the caller would get a cached tensor (or a view of one)
    computed = [i for i in indices if graph.nodes[i].op != "prim.state"]
    if not any(_worth_a_call(graph.nodes[i]) for i in computed):
        return None
    folded = set(computed) | set(checks)
    read_later = set()
    unread = {"prim.state"} if guards else {"prim.state", "prim.guard"}  # guards off: no code
    for index, node in enumerate(graph.nodes):
        if index not in folded and node.op not in unread:
            read_later.update(r.id for r in refs_in((node.args, node.kwargs)) if r.id in static)
    boundary = [v.id for i in computed for v in graph.nodes[i].outputs if v.id in read_later]
    if not boundary and not checks:
        return None
    # State reads the folded ops use are the cache's key; reads only the rest uses stay.
    used = {r.id for i in folded for r in refs_in((graph.nodes[i].args, graph.nodes[i].kwargs))}
    reads = [i for i in indices if graph.nodes[i].op == "prim.state"]
    sources = [
        graph.nodes[i].args[0] for i in reads if any(v.id in used for v in graph.nodes[i].outputs)
    ]
    nodes = sorted(folded | {i for i in reads if any(v.id in used for v in graph.nodes[i].outputs)})
    # A state read that the rest of the graph reads too stays in the graph's own code (the
    # folded function reads it for itself): only computed values cross the boundary.
    skip = [
        i
        for i in nodes
        if i in folded or not any(v.id in read_later for v in graph.nodes[i].outputs)
    ]
    return FoldPlan(nodes=nodes, boundary=boundary, sources=sources, skip=skip)


def subgraph(graph: Graph, fold: FoldPlan) -> Graph:
    """The static nodes as a graph of their own: no inputs, the boundary as outputs."""
    spec = {"t": "tuple", "c": [pytree.LEAF for _ in fold.boundary]}
    return Graph(
        nodes=[graph.nodes[i] for i in fold.nodes],
        outputs=[Ref(v) for v in fold.boundary],
        out_spec=spec,
        in_spec={"t": "tuple", "c": [{"t": "tuple", "c": []}, {"t": "dict", "keys": [], "c": []}]},
        sources=graph.sources,
    )


# C functions mapped over the state tensors: the cache's check runs no Python bytecode per
# tensor (a ResNet's folded convolutions read a hundred tensors on every call).
_version = operator.attrgetter("_version")
_getitem = operator.getitem
_is = operator.is_
_requires_grad = operator.attrgetter("requires_grad")
_data_ptr = torch.Tensor.data_ptr
_is_shared = torch.Tensor.is_shared
_grad_enabled = torch.is_grad_enabled
_inference_mode = torch.is_inference_mode_enabled
_default_dtype = torch.get_default_dtype
# Tensors whose torch function is disabled: no code of the caller's runs on their ops.
_PLAIN_TYPES = frozenset({torch.Tensor, torch.nn.Parameter})

# Bumped by invalidate_caches(): every value kept from state (folds here, memos with
# state keys in memo.py) is computed again at its next use.
_epoch = [0]


def invalidate_caches() -> None:
    """Forget every value a traced or loaded object keeps from its state (folded
    constants, memos keyed on state tensors, the input sizes whose checks passed with
    the state's sizes: runtime/transaction.py): each is computed again at its next use.

    Needed only after a write that torch does not record and tracebridge cannot see: an
    in-place op through a buffer's ``.data`` (``.data`` has a version counter of its own,
    so neither the buffer's version nor its data pointer moves), or through memory handed
    out without a tensor (``p.detach().numpy()``, the storage, DLPack). Writes torch
    records are seen without it: ``load_state_dict``, ``.to()``, ``p.copy_(w)`` under
    ``torch.no_grad()``, optimizer steps, ``p.data = w`` (with another shape: call it, so
    that checks that read the state's sizes run again), and so are writes through a
    parameter's ``.data`` (runtime/data_writes.py).

    >>> import torch, tracebridge
    >>> class Doubled(torch.nn.Linear):
    ...     def forward(self, x):
    ...         return x @ (self.weight * 2).t()  # a value of state alone: folded
    >>> net = Doubled(2, 2, bias=False).eval()
    >>> f = tracebridge.trace(net, torch.ones(1, 2))
    >>> with torch.no_grad():
    ...     _ = f(torch.ones(1, 2))
    ...     _ = net.weight.detach().numpy().fill(0)  # below torch: no version moves
    ...     tracebridge.invalidate_caches()
    ...     f(torch.ones(1, 2))
    tensor([[0., 0.]])
    """
    _epoch[0] += 1


_InferenceMode = torch._C._InferenceMode
_set_grad_enabled = torch._C._set_grad_enabled


def made_normal(function, *args):
    """``function(*args)``, run outside inference mode and without autograd where the call
    is in inference mode: values a cache keeps are normal tensors, with versions to key
    on, usable by calls with autograd (see runtime/lean.py)."""
    if not _inference_mode():
        return function(*args)
    outside = _InferenceMode(False)  # turns grad mode on: off again below
    try:
        _set_grad_enabled(False)
        return function(*args)
    finally:
        del outside  # puts back inference mode and the grad mode with it


_function_modes = torch._C._len_torch_function_stack
_dispatch_modes = torch._C._len_torch_dispatch_stack
_autocast = torch._C._is_any_autocast_enabled


def outside_the_key() -> bool:
    """Whether a call runs where torch itself would make other values than the ones a
    cache keeps, for a reason no key sees: a torch function mode (``set_default_device``,
    ``with torch.device(...)``, a tracer), a dispatch mode (``FakeTensorMode``, a mode that
    changes or counts the ops) or an autocast region around the call. Folded and memoised
    values are then computed, not reused: a value made under a mode is the mode's (a fake
    tensor, say) and is not kept, and a mode sees every op the call runs. (The default
    dtype is part of their keys.)"""
    return bool(_function_modes() or _dispatch_modes()) or _autocast()


def _counter(name: str) -> str:
    """The name of the ``num_batches_tracked`` beside the running statistic ``name``."""
    return name.rsplit("running_", 1)[0] + "num_batches_tracked"


def counters_of(sources: list, slots: dict) -> list[str]:
    """The ``num_batches_tracked`` of each batch norm whose running statistics are among
    ``sources`` (state names), where ``slots`` has it: also part of the cache's key.

    Note: why. ATen's batch norm in training mode writes its running statistics inside
    its kernel without moving their versions (eager too: an ``nn.BatchNorm2d`` trained
    for a thousand steps keeps ``running_mean._version`` where it was), so a convolution
    folded with them (``fuse_conv_bn``) would be kept after the model trained on. The
    module's ``num_batches_tracked.add_(1)`` on each of those steps does move a version."""
    names = set(sources)
    found = []
    for name in sources:
        if isinstance(name, str) and name.endswith(("running_mean", "running_var")):
            counter = _counter(name)
            if counter in slots and counter not in names:
                names.add(counter)
                found.append(counter)
    return found


class Folded:
    """Runs a graph's static part and keeps its values while the state it read is the same
    (the same tensors, plain ``Tensor`` or ``Parameter``, at the same versions and data
    pointers, with the same default dtype; made as normal tensors, in any mode); see
    :func:`outside_the_key` for calls that do not use the cache. Its values come with
    whether their tensors are plain (:func:`with_their_types`), which the code checks
    instead of their types.

    What the check costs a call: about 0.2 us a source tensor with the caches warm, and
    0.5-1.5 us right after another model ran (each tensor's slot, Python object,
    ``TensorImpl``, version counter and storage are then misses, one after the other):
    densenet121 keys on 355 tensors, 0.4-0.5 ms of a 14 ms call that way, where torch.jit
    checks nothing (benchmarks/state_checks.py). The same check in a C++ loop took 0.17
    ms there: the misses overlap."""

    def __init__(
        self, function, slots: list[tuple[dict, str]], count: int, ops: int, guards: int = 0
    ):
        self.function = function
        self.owners = [owner for owner, _ in slots]
        self.keys = [key for _, key in slots]
        self.count = count
        self.ops = ops
        self.guards = guards
        self.entry = None

    def __repr__(self) -> str:
        checks = f", {self.guards} guards" if self.guards else ""
        return f"folded({self.count} values of {self.ops} ops{checks} on literals and state)"

    def __call__(self) -> tuple:
        # Run on every call of a model whose code folds: C functions mapped over the
        # tensors, no tuple built for the mode, outside_the_key() inline.
        tensors = list(map(_getitem, self.owners, self.keys))
        if (
            (_grad_enabled() and any(map(_requires_grad, tensors)))
            or _function_modes()
            or _dispatch_modes()
        ):
            return self.made_here()  # gradients must reach the state, or torch makes others
        # A source of a subclass (``p.__class__ = Sub`` keeps the object, its version and
        # data) runs its own torch function on the static ops, on every call, as eager
        # runs it. (Its type is in the object the slot's read just touched: no new miss.)
        if _autocast() or not _PLAIN_TYPES.issuperset(map(type, tensors)):
            return self.made_here()
        entry = self.entry
        # A version moves with every in-place write; the data pointer with ``.data = ...``
        # and swapped tensors, which keep the object and its version. Factories follow
        # the default dtype; the epoch moves with invalidate_caches().
        try:
            versions = list(map(_version, tensors))
        except RuntimeError:  # state made in inference mode has no version to key on:
            return self.made_here()  # made on every call, as eager makes it
        if (
            entry is not None
            and entry[1] == versions
            and entry[3] is _default_dtype()
            and entry[4] == _epoch[0]
            and entry[2] == list(map(_data_ptr, tensors))
            and all(map(_is, entry[0], tensors))
        ):
            return entry[5]
        if any(map(_is_shared, tensors)) or data_writes.taken(tensors):
            # In shared memory (``share_memory()``: Hogwild-style workers, another process
            # training the weights) a write moves no version this process sees, nor one
            # through a ``.data`` taken of a source (runtime/data_writes.py): nothing is
            # kept, the static part runs on every call, as eager reads the state.
            return self.made_here()
        data_writes.keep(tensors)
        pointers = list(map(_data_ptr, tensors))
        dtype, epoch = _default_dtype(), _epoch[0]
        # Normal tensors, whatever the caller's mode: any later call may use them, and a
        # memo may key on their versions (runtime/lean.py).
        values = with_their_types(made_normal(self.function))
        self.entry = (tensors, versions, pointers, dtype, epoch, values)
        return values

    def made_here(self) -> tuple:
        """The static part run now, in the caller's mode, and not kept: its values and
        whether its tensors are plain (:func:`with_their_types`)."""
        return with_their_types(self.function())


def with_their_types(values: tuple) -> tuple:
    """``values`` and, last, whether every tensor among them is a plain ``Tensor`` or
    ``Parameter``: the code checks that flag before it enters inference mode
    (runtime/lean.py, ``enter``), not the tensors' types on every call. A kept value's
    type cannot change: the code never hands it out (:func:`plan`)."""
    tensors = (type(v) for v in values if isinstance(v, torch.Tensor))
    return (*values, _PLAIN_TYPES.issuperset(tensors))


class FixedFolded(Folded):
    """A :class:`Folded` of a frozen program (``tracebridge.freeze``): its state is its own
    copy, never handed out and never written by its graphs (runtime/frozen.py), so the
    values it gave once stay right and no call checks the state's tensors again -- the
    per-call check that made a small convnet's call slower than torch.jit's. What the
    state does not fix is still checked: the default dtype (a factory follows it) and
    :func:`invalidate_caches`; under a torch function mode or autocast the static part
    runs on every call, as :class:`Folded` runs it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Whether a source requires grad (fixed with the state): under autograd the static
        # part then runs on every call, as unfrozen, so that what the rest of the call
        # computes is what it computes unfrozen (attention picks its kernel by it).
        tensors = map(_getitem, self.owners, self.keys)
        self.grad_sources = any(map(_requires_grad, tensors))

    def __repr__(self) -> str:
        return "frozen " + super().__repr__()

    def __call__(self) -> tuple:
        if (
            (self.grad_sources and _grad_enabled())
            or _function_modes()
            or _dispatch_modes()
            or _autocast()
        ):
            return self.made_here()  # as unfrozen: torch makes other values there
        entry = self.entry
        if entry is not None and entry[0] is _default_dtype() and entry[1] == _epoch[0]:
            return entry[2]
        dtype, epoch = _default_dtype(), _epoch[0]
        # (a guard that refuses keeps nothing)
        values = with_their_types(made_normal(self.function))
        self.entry = (dtype, epoch, values)
        return values


class SealedFolded(Folded):
    """A :class:`Folded` of a loaded object whose state is sealed (runtime/sealed.py):
    while the seal holds, nothing outside tracebridge has had the state's tensors, so
    none was written, replaced or given another type, and the values made once are kept
    with only what :class:`FixedFolded` checks (the default dtype,
    :func:`invalidate_caches`; a torch function mode or autocast runs the static part).
    Once the seal breaks, every call checks as :class:`Folded` does, against the state as
    it was when the values were made (the kept entry is :class:`Folded`'s own): a write
    made before the first checked call is seen too."""

    def __init__(self, function, slots, count, ops, guards=0, seal=None):
        super().__init__(function, slots, count, ops, guards)
        self.seal = seal

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + "; kept while the state is sealed)"

    def __call__(self) -> tuple:
        seal = self.seal
        if not seal.intact:
            return Folded.__call__(self)
        if _grad_enabled():
            # (the code for calls with autograd breaks the seal when it is made: not here)
            seal.break_()
            return Folded.__call__(self)
        if _function_modes() or _dispatch_modes() or _autocast():
            return self.made_here()  # as unsealed: torch makes other values there
        entry = self.entry
        if entry is not None and entry[3] is _default_dtype() and entry[4] == _epoch[0]:
            return entry[5]
        # Made once (and again for another default dtype or epoch), keyed as Folded keys
        # its values, for the calls after the seal breaks.
        tensors = list(map(dict.__getitem__, self.owners, self.keys))
        try:
            versions = list(map(_version, tensors))
        except RuntimeError:  # state made in inference mode: no version to key on after
            return self.made_here()  # the seal breaks, so nothing is kept (as Folded)
        if any(map(_is_shared, tensors)):
            return self.made_here()  # (as Folded: a write in another process moves nothing)
        pointers = list(map(_data_ptr, tensors))
        dtype, epoch = _default_dtype(), _epoch[0]
        values = with_their_types(made_normal(self.function))
        data_writes.keep(tensors)  # a .data taken after the seal breaks drops them
        self.entry = (tensors, versions, pointers, dtype, epoch, values)
        return values


# --- values that decide -------------------------------------------------------------------

# Floating ops whose result jumps where their input crosses a point (an integer, zero): a
# difference in the last bit of the input can change the result by a whole unit.
_DISCONTINUOUS = frozenset(
    """round floor ceil trunc sign frac fmod remainder Tensor.round Tensor.floor Tensor.ceil
    Tensor.trunc Tensor.sign Tensor.frac floor_divide Tensor.__floordiv__ Tensor.__mod__
    heaviside""".split()
)
# Reads of a tensor's values into Python (a branch or a guard may follow).
_TO_PYTHON = frozenset("prim.item prim.tolist prim.bool prim.int prim.float".split())


def _floating(value: Value | None) -> bool:
    return (
        value is not None
        and value.kind == "Tensor"
        and str(value.dtype).startswith(("float", "bfloat"))
    )


def values_that_decide(graph: Graph) -> set[int]:
    """Ids of the values whose bits reach a decision: a comparison, an index (``argmax``,
    ``topk``'s indices, non-maximum suppression), a rounding, a read into Python. Any
    floating op whose results are not all floating decides; metadata reads (sizes,
    dtypes) read no values, so nothing flows through them. A rewrite that changes results
    by rounding (:func:`fuse_conv_bn`) is safe only away from these."""
    values: dict[int, Value] = {v.id: v for v in graph.inputs}
    for node in graph.nodes:
        values.update((v.id, v) for v in node.outputs)
    decide: set[int] = set()
    for node in reversed(graph.nodes):
        if node.op in _METADATA_PRIMS or node.op == "prim.state":
            continue
        reads = [r.id for r in refs_in((node.args, node.kwargs))]
        floating_in = any(_floating(values.get(i)) for i in reads)
        decides = floating_in and (
            node.op in _DISCONTINUOUS
            or node.op in _TO_PYTHON
            or any(not _floating(v) for v in node.outputs)
        )
        # An in-place op writes into its first argument: what it reads flows on under that
        # argument's id (read later, so already marked in this backward walk).
        info = opset.info(node.op)
        writes = info is not None and "inplace" in info.flags and bool(reads)
        if (
            decides
            or node.op == "prim.guard"
            or any(v.id in decide for v in node.outputs)
            or (writes and reads[0] in decide)
        ):
            decide.update(reads)
    return decide


# --- convolution followed by evaluation-mode batch norm ------------------------------------

_CONVS = {"conv1d": 3, "conv2d": 4, "conv3d": 5}  # op -> rank of its weight


def fuse_conv_bn(graph: Graph, state_names: Collection[str] | None = None) -> Graph:
    """``graph``, or a copy where each convolution whose only reader is a batch norm in
    evaluation mode (``training`` the literal False, statistics and affine parameters from
    state) runs with the norm folded into its weight and bias: ``w' = w * s``,
    ``b' = (b - mean) * s + beta`` with ``s = gamma / sqrt(var + eps)``, as
    ``torch.jit.freeze`` does; and so does a linear whose output features are the norm's
    channels (:func:`_producer`: LeViT's norms over flattened tokens). The new weights
    depend only on state, so :func:`plan` folds them; the result agrees with eager to
    rounding.

    Not where the norm's output reaches a decision (:func:`values_that_decide`): rounding
    that moves a score by 3e-8 changes which of two tied boxes non-maximum suppression
    keeps (torchvision's SSDlite at random weights: boxes 67 pixels away from eager's).
    A classifier's logits, a feature map, a segmentation mask's scores are folded.

    Nor where the running statistics have no ``num_batches_tracked`` beside them in
    ``state_names`` (the state's names, where known): a batch norm of a model's own
    buffers (``F.batch_norm(y, self.mean, self.var, ...)``) writes them in training mode
    at the same version, and the fold, kept by versions, would outlive the write
    (:func:`counters_of`).

    Nor a dilated convolution without a bias of its own, where ATen's kernel would add
    the folded bias one channel at a time (:func:`_bias_costs_per_channel`): the two run
    as recorded, as eager runs them.

    Nor where a node between the two may write (a tensor the convolution reads may share
    memory with what it writes: an input passed twice), as the convolution runs where its
    norm stood. The new weights are static only before the first write into an input or
    state (:func:`plan`): after one, they are computed where the norm stood, from the
    state as it is then."""
    producers = {v.id: i for i, n in enumerate(graph.nodes) for v in n.outputs}
    state_ids = {v.id for n in graph.nodes if n.op == "prim.state" for v in n.outputs}
    state_of = state_reads(graph)

    def counted(stat) -> bool:
        if state_names is None:
            return True
        name = state_of.get(stat.id) if isinstance(stat, Ref) else None
        return name is not None and _counter(name) in state_names

    readers: dict[int, list[int]] = {}
    for index, node in enumerate(graph.nodes):
        for ref in refs_in((node.args, node.kwargs)):
            readers.setdefault(ref.id, []).append(index)
    returned = output_ids(graph)
    # final index -> (index of the convolution or linear, of its norm, the nodes it
    # replaces): the fused op runs at the final index, giving that node's outputs
    fused: dict[int, tuple[int, int, set[int]]] = {}
    for index, node in enumerate(graph.nodes):
        if node.op != "batch_norm" or node.kwargs or len(node.args) != 9:
            continue
        source, gamma, beta, mean, var, training, _, eps, _ = node.args
        if training is not False or not isinstance(source, Ref) or not isinstance(eps, float):
            continue
        params = [p for p in (gamma, beta, mean, var) if p is not None]
        if not all(isinstance(p, Ref) and p.id in state_ids for p in params) or mean is None:
            continue
        if not (counted(mean) and counted(var)):
            continue
        found = _producer(graph, index, producers, readers, returned)
        if found is None:
            continue
        made_at, final, replaced = found
        conv = graph.nodes[made_at]
        if not isinstance(conv.args[1], Ref) or conv.args[1].id not in state_ids:
            continue
        bias = conv.args[2] if len(conv.args) > 2 else None
        if not (bias is None or (isinstance(bias, Ref) and bias.id in state_ids)):
            continue
        if bias is None and _bias_costs_per_channel(conv):
            continue
        if any(caller_memory.stores(graph.nodes[i]) for i in range(made_at + 1, final)):
            continue  # the convolution would read its input after a write it came before
        fused[final] = (made_at, index, replaced)
    if fused:
        decide = values_that_decide(graph)
        fused = {
            f: plan for f, plan in fused.items() if graph.nodes[plan[1]].outputs[0].id not in decide
        }
    if not fused:
        return graph
    removed = {i for _, _, replaced in fused.values() for i in replaced}
    next_id = 1 + max([v.id for v in graph.inputs] + [v.id for n in graph.nodes for v in n.outputs])
    nodes: list[Node] = []
    for index, last in enumerate(graph.nodes):
        if index in removed:
            continue  # the convolution runs where its norm was, once the norm's state is read
        if index not in fused:
            nodes.append(last)
            continue
        made_at, norm_at, _ = fused[index]
        node, norm = graph.nodes[made_at], graph.nodes[norm_at]
        _, gamma, beta, mean, var, _, _, eps, _ = norm.args
        made: list[Node] = []

        def emit(op, *args, _made=made, kind="Tensor"):
            nonlocal next_id
            value = Value(id=next_id, kind=kind)
            next_id += 1
            _made.append(Node(op=op, args=list(args), outputs=[value], out_spec=pytree.LEAF))
            return Ref(value.id)

        # Each per-channel tensor as a vector of the weight's output channels: one of
        # another size (state replaced since the trace) raises here, as eager's batch
        # norm or convolution raises, where broadcasting would take it silently.
        channels = emit("prim.size", node.args[1], 0, kind="int")
        var, mean, gamma, beta = (
            None if p is None else emit("Tensor.reshape", p, [channels])
            for p in (var, mean, gamma, beta)
        )
        scale = emit("rsqrt", emit("add", var, eps))
        if gamma is not None:
            scale = emit("mul", gamma, scale)
        shape = [-1] + [1] * (_CONVS.get(node.op, 2) - 1)
        weight = emit("mul", node.args[1], emit("Tensor.reshape", scale, shape))
        old_bias = node.args[2] if len(node.args) > 2 else None
        if old_bias is not None:
            old_bias = emit("Tensor.reshape", old_bias, [channels])
        shifted = emit("sub", old_bias, mean) if old_bias is not None else emit("neg", mean)
        bias = emit("mul", shifted, scale)
        if beta is not None:
            bias = emit("add", bias, beta)
        for extra in made:
            extra.loc = node.loc
        nodes.extend(made)
        args = [node.args[0], weight, bias, *node.args[3:]]
        nodes.append(
            Node(op=node.op, args=args, outputs=last.outputs, out_spec=last.out_spec, loc=norm.loc)
        )
    return graph.with_nodes(nodes)


def _producer(graph: Graph, index: int, producers: dict, readers: dict, returned: set):
    """For the batch norm at ``index``: ``(index of the convolution or linear whose output
    only it reads, index of the node whose outputs the fused op gives, indices of the
    nodes the fused op replaces)``, or None. A linear's output feature is the norm's
    channel where the norm reads it as a matrix: directly (``BatchNorm1d`` after a
    ``Linear``), or flattened to one (LeViT's ``bn(linear(x).flatten(0, 1)).reshape_as(
    linear(x))``, where the reshape gives the linear's own shape back)."""
    source = graph.nodes[index].args[0]
    at = producers.get(source.id)
    if at is None or source.id in returned or readers.get(source.id) != [index]:
        return None
    made = graph.nodes[at]
    if made.op in _CONVS and not made.kwargs and len(made.args) == 7:
        return at, index, {at}
    if _plain_linear(made) and _rank(made) == 2:
        return at, index, {at}
    # flatten(y, 0, r - 2) -> norm -> reshape_as(., y), y = linear(...) of rank r
    if made.op != "flatten" or made.kwargs or not isinstance(made.args[0], Ref):
        return None
    inner = made.args[0]
    linear_at = producers.get(inner.id)
    if linear_at is None or not _plain_linear(graph.nodes[linear_at]):
        return None
    rank = _rank(graph.nodes[linear_at])
    if (
        rank is None
        or rank < 3
        or _rank(made) != 2
        or made.args[1:] not in ([0, rank - 2], [0, -2])
    ):
        return None
    norm_out = graph.nodes[index].outputs[0].id
    after = readers.get(norm_out, [])
    if len(after) != 1 or norm_out in returned:
        return None
    last = graph.nodes[after[0]]
    if (
        last.op != "Tensor.reshape_as"
        or last.kwargs
        or last.args != [Ref(norm_out), inner]
        or sorted(readers.get(inner.id, [])) != [at, after[0]]
        or inner.id in returned
    ):
        return None
    return linear_at, after[0], {linear_at, at, index}


def _bias_costs_per_channel(conv: Node) -> bool:
    """Whether ``conv`` (a convolution, or a linear: no) may run ATen's dilated
    convolution without oneDNN (``slow_conv_dilated2d``/``3d``), which fills its output
    with the bias one channel at a time: about 1 us a channel, where a batch norm after a
    convolution without bias costs a few for all of them. ATen picks it for a dilated
    convolution without groups and with a kernel of at most 3 in a dimension (a 1d one
    always) on a small input, batch 1 (``ConvParams::use_mkldnn``): deeplabv3's 3x3
    dilated convolutions over 960 channels of 4x4, 256 channels each, took 1.2 ms more a
    call with a folded bias than the batch norms they replaced. A dilation or a number of
    groups that is not a literal counts as dilated, without groups."""
    if conv.op not in _CONVS:
        return False
    dilation, groups = conv.args[5], conv.args[6]
    dilations = dilation if isinstance(dilation, (list, tuple)) else [dilation]
    dilated = not all(type(d) is int and d == 1 for d in dilations)
    return dilated and not (type(groups) is int and groups > 1)


def _plain_linear(node: Node) -> bool:
    return node.op == "linear" and not node.kwargs and len(node.args) in (2, 3)


def _rank(node: Node) -> int | None:
    """The rank of ``node``'s one result, where recorded."""
    if len(node.outputs) != 1 or node.outputs[0].shape is None:
        return None
    return len(node.outputs[0].shape)
