"""Check once per size key the guards that only read the sizes of values nothing else needs.

Note: guards on dead values, checked by key.
  Hugging Face's EnCodec ``encode`` returns only the codes, yet its last line compares
  ``audio_values.shape[-1]`` -- the length of the decoded audio -- with the input's. The
  guard that records this keeps the whole decoder alive (two LSTMs, transposed
  convolutions: most of the call) although only its output's length is read, and only
  by a guard. ``torch.jit`` drops the decoder, and the check with it. A guard must stay
  (the trace's decision holds only where it passes), but its outcome here is a function
  of a few sizes: :func:`plan` finds such checks and moves them, with the nodes only they
  need, into one :class:`SizeChecks` node; the generated code calls it with its key (the
  tensors and numbers it reads from the rest of the graph), it runs the nodes and the
  guards for a key it has not seen, and remembers keys that passed. A call with a known
  key computes none of them; a key whose guards fail is refused every time, with the
  guard's own error.

  A group of nodes (connected by the values they pass each other) moves only when every
  guard and value read on it stays a function of the key:

  * no data of a tensor read from the rest of the graph reaches a guard
    (:func:`_data_free`): such a tensor passes on only its sizes, dtype and device, through
    size and type reads (``prim.size``, ``dtype``, ``device``, ``numel``, ``len``) and
    ops whose results' metadata follow from their arguments' (:data:`SHAPE_FUNCTIONS`;
    only the operands of :data:`OPERAND_OPS` may carry data in other arguments than the
    first, never where the op's signature takes a number: ``cat(xs, dim=t)``; never a
    factory's size, a boolean mask, ``where(condition)``, ``nonzero`` or a read into
    Python such as ``item`` or ``bool``). Values made from the key alone
    (numbers, state, literals) may go anywhere, through any deterministic op. Never a
    random op, a write, a read of the grad mode or of ``requires_grad``, or an op the set
    does not know;
  * what it reads from the rest are tensors (keyed by shape, strides, dtype and device),
    and ints, bools, devices and dtypes (keyed by type and value); state too, read by the
    call; the key adds the default dtype (factories follow it);
  * it reads something besides state (checks of state alone are runtime/folding.py's,
    once per state version for the whole graph);
  * it has at least :data:`MIN_OPS` tensor ops (a key costs about what one or two ops
    cost: EnCodec's ``bool(padding_total >= length)`` stays inline), and its checks can run where
    its first guard stands: what it reads is made before, and between its first and last
    guard there is no other guard nor a node with an effect (:mod:`runtime.dead_code`), so
    guards are checked in the traced order; no node anywhere changes a tensor's sizes in
    place (``resize_``, ``unsqueeze_``); and where it reads state, no write nor effect
    stands between its first node and its last guard (the state is read at the first
    guard: a node of the group must see the values it saw where it stood).

  Under a torch function mode or autocast, or with an input of a tensor subclass, the
  checks run on every call (what ops make may then differ for the same key).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..ir import Graph, Node, Ref, refs_in
from ..ir import ops as opset
from . import dead_code, inplace, sealed
from .folding import (
    _ALIASING,
    _autocast,
    _data_ptr,
    _dispatch_modes,
    _epoch,
    _function_modes,
    _is,
    _version,
)
from .folding import (
    RESIZING as _RESIZING,  # a key read at the first guard: not the sizes a node read
)
from .views import VIEW_OPS

OP = "prim.size_checks"  # the op of a SizeCheckNode (not in the op set: never in a file)

# Reads whose result is a tensor's size, type or place (never its values, never strides).
_METADATA = frozenset("prim.size prim.dtype prim.device prim.numel prim.len".split())
# Ops whose tensor arguments are all operands: the results' sizes, dtypes and devices
# follow from the operands' (broadcasting included), never from their values.
OPERAND_OPS = frozenset(
    set(inplace.UNARY)
    | set(inplace.BINARY)
    | set(
        """conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d linear
        matmul mm bmm addmm baddbmm lstm gru rnn_tanh rnn_relu layer_norm group_norm
        softmax log_softmax cat concat concatenate stack embedding where
        scaled_dot_product_attention Tensor.to Tensor.type_as Tensor.expand_as
        Tensor.view_as Tensor.reshape_as elu relu gelu silu tanh sigmoid hardtanh
        leaky_relu _weight_norm eq ne lt le gt ge rsub ceil floor round trunc
        floor_divide remainder fmod minimum maximum clamp clamp_max bitwise_and
        bitwise_or logical_and logical_or logical_not Tensor.long Tensor.int Tensor.float
        Tensor.double Tensor.bool""".split()
    )
)
# Kinds of an op's parameter (ir/ops.py's signatures) that take a tensor as an operand.
_OPERAND_KINDS = frozenset({"tensor", "tensors", "index_tensor"})
# Factories: their results' metadata follow from their numeric arguments (sizes, a
# range's ends); a tensor given there is read as a value.
FACTORIES = frozenset("full zeros ones empty arange".split())
# Ops whose results' metadata follow from their first argument's and their literal or
# numeric arguments: views, shape changes, reductions over given dims, factories like a
# tensor. Any other tensor argument makes a node ineligible (a size given as a tensor is
# read as a value).
SHAPE_FUNCTIONS = (
    OPERAND_OPS
    | FACTORIES
    | ((VIEW_OPS | _ALIASING) - {"as_strided", "tensor_split", "Tensor.data"})
    | frozenset(
        """Tensor.reshape reshape flatten Tensor.contiguous pad sum mean amax amin
    Tensor.repeat Tensor.expand expand zeros_like ones_like full_like empty_like
    Tensor.new_zeros Tensor.new_ones Tensor.new_full Tensor.new_empty max_pool1d
    max_pool2d avg_pool1d avg_pool2d adaptive_avg_pool1d adaptive_avg_pool2d""".split()
    )
)
# Structural ops that read what no key holds: the caller's modes, a tensor's flag or its
# storage offset (``p.data = w`` moves a state tensor's without a new version).
_UNKEYED = opset.DYNAMIC_READS | {"prim.autograd_function", "prim.storage_offset"}
_TO_PYTHON = frozenset("prim.item prim.tolist prim.bool prim.int prim.float".split())
_KEY_KINDS = frozenset({"int", "bool", "device", "dtype", "Tensor"})
MIN_OPS = 3  # tensor ops a group must hold to be worth its key
KEEP = 8  # keys remembered per group: a server sees a few input sizes, not thousands


@dataclass
class SizeCheckNode(Node):
    """Guards and the nodes only they need, checked once per key (module Note): its
    arguments are the key's values, ``checks`` the moved nodes as a graph of their own."""

    checks: Graph | None = field(default=None, repr=False)
    sources: list[str] = field(default_factory=list)  # the state the checks read


def _data_free(nodes: list[Node], kinds: dict[int, str], state: set[int]) -> bool:
    """Whether every guard of ``nodes`` (a group, in order) decides by the key alone: walks
    the group marking the values that carry the data of a tensor read from the rest of
    the graph (the key holds only its metadata; state is keyed by version, so its values
    are the key's), and refuses a node that would let such data reach a size, a number or
    a guard (module Note)."""
    made = {v.id for n in nodes for v in n.outputs}
    # values that carry an outside tensor's data: outside tensors (not state) to begin with
    data = {
        r.id
        for n in nodes
        for r in refs_in((n.args, n.kwargs))
        if r.id not in made and r.id not in state and kinds.get(r.id) == "Tensor"
    }
    for node in nodes:
        refs = refs_in((node.args, node.kwargs))
        carried = [r for r in refs if r.id in data]
        if node.op == "prim.state" or node.op in _METADATA:
            continue  # metadata is the key's; state is keyed by its version
        if node.op == "prim.guard" or node.op in _TO_PYTHON or node.op.startswith("scalar."):
            if carried:
                return False  # data would decide
            continue
        info = opset.info(node.op)
        if info is None or info.flags & {"random", "inplace"} or opset.draws_random(node):
            return False
        if node.op in _UNKEYED or node.kwargs.get("requires_grad", False) is not False:
            return False
        if not carried:
            continue  # a function of the key: any deterministic op
        if node.op not in SHAPE_FUNCTIONS or node.op in FACTORIES:
            return False  # a factory would read the data as a size
        if node.op == "where" and len(node.args) + len(node.kwargs) < 3:
            return False  # ``where(condition)``: as many results as true elements
        if node.op not in OPERAND_OPS:
            rest = refs_in((node.args[1:], node.kwargs))
            if any(r.id in data for r in rest):
                return False  # data given where a size or an index is read
        elif any(r.id in data for r in read_as_numbers(node)):
            return False  # ``cat(xs, dim=t)``: the dim is the data of ``t``
        data.update(v.id for v in node.outputs)
    return True


def read_as_numbers(node: Node) -> list[Ref]:
    """The values ``node`` (of :data:`OPERAND_OPS`) passes where its signature takes no
    tensor operand: ``cat``'s ``dim``, a convolution's ``stride``. A 0-dim tensor given
    there is read by its value (``__index__``), and the results' sizes follow from it."""
    info = opset.info(node.op)
    if info is None:
        return refs_in((node.args, node.kwargs))
    found = []
    for position, arg in enumerate(node.args):
        kinds = info.args[position] if position < len(info.args) else ()
        if not _OPERAND_KINDS.intersection(kinds):
            found += refs_in(arg)
    for name, arg in node.kwargs.items():
        if not _OPERAND_KINDS.intersection(info.kwargs.get(name, ())):
            found += refs_in(arg)
    return found


def _components(nodes: list[int], graph: Graph) -> list[list[int]]:
    """The nodes (indices) grouped by the values they pass each other, each in order."""
    made_by = {v.id: i for i in nodes for v in graph.nodes[i].outputs}
    parent = {i: i for i in nodes}

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in nodes:
        node = graph.nodes[i]
        for ref in refs_in((node.args, node.kwargs)):
            j = made_by.get(ref.id)
            if j is not None:
                parent[find(i)] = find(j)
    groups: dict[int, list[int]] = {}
    for i in nodes:
        groups.setdefault(find(i), []).append(i)
    return list(groups.values())


def _live_without_guards(graph: Graph) -> set[int]:
    """Nodes the outputs and effects need when guards are not counted (the rest of
    :func:`dead_code.needed` is kept alive by guards only)."""
    kept = dead_code.needed(graph, roots=_is_root)
    return kept


def _is_root(node: Node) -> bool:
    # A guard decides nothing a kept node computes; a plain ``embedding`` writes nothing
    # (``max_norm`` is an ``embedding_renorm_`` node of its own).
    if node.op == "prim.guard":
        return False
    if node.op == "embedding":
        return False
    return dead_code.has_effect(node)


def plan(graph: Graph) -> Graph:
    """``graph`` with each group of size checks on values nothing else needs moved into a
    :class:`SizeCheckNode` (module Note); ``graph`` itself where there is none."""
    if any(n.op.rsplit(".", 1)[-1] in _RESIZING for n in graph.nodes):
        return graph
    live = _live_without_guards(graph)
    guarded = [i for i in range(len(graph.nodes)) if i not in live]
    if not any(graph.nodes[i].op == "prim.guard" for i in guarded):
        return graph
    kinds = {v.id: v.kind for v in graph.inputs}
    kinds.update({v.id: v.kind for n in graph.nodes for v in n.outputs})
    defined_at = {v.id: i for i, n in enumerate(graph.nodes) for v in n.outputs}
    state = {v.id for n in graph.nodes if n.op == "prim.state" for v in n.outputs}
    moved: dict[int, SizeCheckNode] = {}  # first guard's index -> the node replacing the group
    removed: set[int] = set()
    for group in _components(guarded, graph):
        found = _group(graph, group, kinds, defined_at, state)
        if found is not None:
            moved[found[0]] = found[1]
            removed.update(group)
    if not moved:
        return graph
    nodes: list[Node] = []
    for index, node in enumerate(graph.nodes):
        if index in moved:
            nodes.append(moved[index])
        if index not in removed:
            nodes.append(node)
    return graph.with_nodes(nodes)


def _group(graph: Graph, group: list[int], kinds: dict, defined_at: dict, state: set[int]):
    """``(index of the group's first guard, its SizeCheckNode)``, or None where the
    group must stay as it is (module Note)."""
    nodes = [graph.nodes[i] for i in group]
    guards = [i for i in group if graph.nodes[i].op == "prim.guard"]
    if not guards or not _data_free(nodes, kinds, state):
        return None
    if sum(1 for n in nodes if not n.op.startswith(("prim.", "scalar."))) < MIN_OPS:
        return None  # inline costs about what the key costs
    first, last = guards[0], guards[-1]
    members = set(group)
    between = graph.nodes[first:last]
    for offset, node in enumerate(between):
        if first + offset in members:
            continue
        if node.op == "prim.guard" or dead_code.has_effect(node):
            return None  # another check or an effect between: the traced order would change
    made = {v.id for n in nodes for v in n.outputs}
    keys: list[int] = []
    for node in nodes:
        for ref in refs_in((node.args, node.kwargs)):
            if ref.id in made or ref.id in keys:
                continue
            if kinds.get(ref.id) not in _KEY_KINDS or defined_at.get(ref.id, -1) >= first:
                return None
            keys.append(ref.id)
    if all(k in state for k in keys):
        return None  # literals and state only: runtime/folding.py checks it with the state
    if (any(k in state for k in keys) or any(n.op == "prim.state" for n in nodes)) and any(
        _writes(graph.nodes[i]) for i in range(group[0], last) if i not in members
    ):
        return None  # state read at the first guard may be written before a node read it
    sources = [n.args[0] for n in nodes if n.op == "prim.state"]
    if not all(isinstance(s, str) for s in sources):
        return None
    if any(v.kind not in _KEY_KINDS for n in nodes if n.op == "prim.state" for v in n.outputs):
        return None
    values = {v.id: v for v in graph.inputs}
    values.update({v.id: v for n in graph.nodes for v in n.outputs})
    checks = Graph(
        inputs=[values[k] for k in keys],
        in_spec={"t": "tuple", "c": []},  # called with its key only, never by a user
        nodes=nodes,
        outputs=[],
        out_spec={"t": "tuple", "c": []},
        sources=graph.sources,
    )
    node = SizeCheckNode(
        op=OP,
        args=[Ref(k) for k in keys],
        out_spec={"t": "tuple", "c": []},
        loc=graph.nodes[first].loc,
        checks=checks,
        sources=sources,
    )
    return first, node


def _writes(node: Node) -> bool:
    """Whether ``node`` may write a tensor. A guard only decides, and so does a count of
    results (an ``unbind`` with a plain op's effects: EnCodec's codes split per codebook
    before the decoder that its last size check needs)."""
    if node.op == "prim.guard":
        return False
    if opset.is_inplace(node.op):
        return True
    if dead_code.counts_results(node) and node.op not in dead_code.EFFECTS:
        return _has_plain_effects(node)
    return dead_code.has_effect(node)


def _has_plain_effects(node: Node) -> bool:
    """Whether ``node``, whose count of results is checked, has an effect besides that
    (an op the set does not know, a random op)."""
    info = opset.info(node.op)
    return info is None or "random" in info.flags or opset.draws_random(node)


_plain_types = (torch.Tensor, torch.nn.Parameter)
_default_dtype = torch.get_default_dtype


def _same(held: list, state: list) -> bool:
    return len(held) == len(state) and all(map(_is, held, state))


_plain_set = frozenset(_plain_types)
_strided = torch.strided


class SizeChecks:
    """Runs a group's checks for a key it has not seen, and remembers the keys that
    passed (the last :data:`KEEP`). The key: the default dtype, the epoch of
    :func:`~tracebridge.runtime.folding.invalidate_caches`, each number's type and value,
    each tensor's shape, strides, dtype and device; a state tensor (``reads`` 2, and the
    state in ``slots``, read on each call: its values may decide) counts as in
    runtime/folding.py, by identity, version and data pointer (``load_state_dict``,
    ``.to()``, an optimizer's step and ``p.data = w`` move one of them), mapped in C over
    the tensors: EnCodec's decoder reads 62."""

    def __init__(
        self,
        function,
        reads: tuple[int, ...],
        slots: list[tuple[dict, str]],
        count: int,
        guards: int,
    ):
        self.function = function
        self.reads = reads  # per key position: 0 a number, 1 a tensor, 2 a state tensor
        self.owners = [owner for owner, _ in slots]
        self.names = [name for _, name in slots]
        self.read = sealed.reader(self.owners)  # (a loaded object's tables: runtime/sealed.py)
        self.count = count  # nodes moved here
        self.guards = guards
        self.passed: dict = {}  # key -> the state tensors it holds (ids stay unique)

    def __repr__(self) -> str:
        return (
            f"size_checks({self.guards} guards over {self.count} nodes, "
            f"{len(self.passed)} keys passed)"
        )

    def __call__(self, *values) -> None:
        if _function_modes() or _dispatch_modes() or _autocast():
            self.function(*values)  # ops may make other sizes or dtypes for the same key
            return
        key: list = [_default_dtype(), _epoch[0]]
        state = list(map(self.read, self.owners, self.names))
        for value, read in zip(values, self.reads):
            if read == 0 or not isinstance(value, torch.Tensor):
                key.append((type(value), value))
            elif type(value) not in _plain_types or value.layout is not _strided:
                self.function(*values)  # a subclass may make other sizes; sparse: no strides
                return
            elif read == 1:
                key.append((value.shape, value.stride(), value.dtype, value.device))
            else:
                state.append(value)
        if state:
            found = _state_key(state)
            if found is None:
                self.function(*values)
                return
            key.append(found)
        entry = tuple(key)
        if entry in self.passed:
            return
        self.function(*values)  # raises where a guard fails: nothing is remembered
        if state:
            # Keys of other state tensors (before a load_state_dict(assign=True), a .to())
            # would hold those tensors, a copy of the weights, alive: forget them.
            # (list() copies in one C call: another thread's call may change the dict)
            entries = list(self.passed.items())
            self.passed = {k: held for k, held in entries if _same(held, state)}
        while len(self.passed) >= KEEP:
            try:
                self.passed.pop(next(iter(self.passed)), None)
            except (StopIteration, RuntimeError):
                break
        self.passed[entry] = state  # kept alive: an identity in a key is never reused


def _state_key(state: list) -> tuple | None:
    """Identities, versions and data pointers of state tensors (numbers by type and
    value); None where one is of another kind (a subclass, a sparse tensor)."""
    if set(map(type, state)) <= _plain_set:
        try:
            versions = tuple(map(_version, state))
            return (tuple(map(id, state)), versions, tuple(map(_data_ptr, state)))
        except RuntimeError:  # no data pointer (sparse): no key
            return None
    if any(isinstance(v, torch.Tensor) and type(v) not in _plain_types for v in state):
        return None
    tensors = [v for v in state if isinstance(v, torch.Tensor)]
    found = _state_key(tensors) if tensors else ()
    numbers = tuple((type(v), v) for v in state if not isinstance(v, torch.Tensor))
    return None if found is None else (found, numbers)


def reads(graph: Graph, node: SizeCheckNode) -> tuple[int, ...]:
    """How :class:`SizeChecks` keys each argument of ``node``: 0 a number, 1 a tensor by
    its metadata, 2 a state tensor (read by a node of ``graph``) by its version too."""
    state = {v.id for n in graph.nodes if n.op == "prim.state" for v in n.outputs}
    return tuple(0 if v.kind != "Tensor" else 2 if v.id in state else 1 for v in node.checks.inputs)
