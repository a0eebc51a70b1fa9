"""Which state a graph may write: the rule ``state writes`` of the checker (SPEC section 6.7).

Note: why a rule. A loaded module shares its parameters with the file's state, and an
in-place op on a parameter changes it for every later call and every re-save: a file that
runs ``set_grad_enabled(False)`` then ``Tensor.add_(weight, 3)``, or writes through
``Tensor.data(weight)``, rewrites the model it claims to be. The rule follows every value
that may share memory with a state entry (``prim.state`` itself, then views: ``Tensor.view``,
``getitem``, ``Tensor.data``, ``detach``, ..., and the results of in-place ops, which are
their first argument) and refuses, at load:

* an in-place op (flag ``inplace``: a name ending in ``_``, ``setitem``, ``x <<= y``) whose
  first argument may be a **parameter** or a **constant**;
* a write through another argument (``batch_norm``'s running statistics) into a parameter
  or a constant;
* ``Tensor.requires_grad_`` and ``Tensor.detach_`` on any state (they change how a
  parameter trains, silently).

Buffers are the state a module may change: BatchNorm's running statistics and
``num_batches_tracked`` in training mode, and any buffer a traced module updates in place
(caches, counters), as PyTorch defines them. A custom autograd function's ``forward`` graph
may not write an input that the calling node passes from a parameter or a constant, nor its
``backward`` graph a saved value that is such an input.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..ir import ops
from ..ir.ops import VARIADIC_OUTPUTS
from ..ir.program import AUTOGRAD_FUNCTION, referenced_graphs, refs_in

# Ops whose result may share memory with their first tensor argument (views, and ops that
# return their input unchanged when nothing is to be done: ``contiguous``, ``to``).
VIEW_OPS = frozenset(
    """
Tensor.view Tensor.view_as Tensor.reshape Tensor.reshape_as reshape flatten Tensor.unflatten
unflatten squeeze unsqueeze Tensor.permute permute transpose swapaxes swapdims movedim
moveaxis t Tensor.T Tensor.mT Tensor.H Tensor.mH Tensor.contiguous Tensor.expand
Tensor.expand_as broadcast_to split split_with_sizes chunk unbind tensor_split hsplit vsplit
dsplit narrow select diagonal Tensor.unfold real imag Tensor.real Tensor.imag view_as_real
view_as_complex atleast_1d atleast_2d atleast_3d ravel meshgrid getitem Tensor.data detach
Tensor.to Tensor.type Tensor.type_as Tensor.float Tensor.double Tensor.half Tensor.bfloat16
Tensor.long Tensor.int Tensor.short Tensor.char Tensor.byte Tensor.bool Tensor.cfloat
Tensor.cdouble Tensor.cpu as_tensor as_strided Tensor.as_strided alias Tensor.t expand
positive dropout feature_dropout alpha_dropout feature_alpha_dropout broadcast_tensors
cartesian_prod
""".split()
)
# (``positive`` returns its argument itself, and so do the dropouts where they drop nothing:
# in evaluation, or with ``p = 0``; ``broadcast_tensors`` a tensor that has the broadcast
# shape, ``cartesian_prod`` a single tensor. Their tensors come as one list, the first
# argument.)
# Ops that write into an argument other than the first, by parameter name.
WRITTEN_ARGUMENTS: dict[str, tuple[str, ...]] = {
    "batch_norm": ("running_mean", "running_var"),
    "native_batch_norm": ("running_mean", "running_var"),
    "instance_norm": ("running_mean", "running_var"),
    # op-set 7: the observer's running statistics and quantisation parameters
    "fused_moving_avg_obs_fake_quant": ("running_min", "running_max", "scale", "zero_point"),
}
# Ops that change how state trains: refused on any state, buffers included.
GRAD_STATE_OPS = frozenset({"Tensor.requires_grad_", "Tensor.detach_"})
# State kinds no op may write.
READ_ONLY_KINDS = frozenset({"parameter", "constant"})
# The one exception (op-set 7): ops that may write a parameter read directly by
# ``prim.state``, or its ``detach`` (not another view of it, never a constant).
# ``F.embedding(..., max_norm=m)`` renormalises the rows of its own weight that the call
# looks up, on every call, as eager ``nn.Embedding(max_norm=m)`` does; its checked
# implementation (runtime/checked_numeric.py) lets it only scale those rows down to a norm
# of ``m``.
PARAMETER_WRITERS = frozenset({"embedding_renorm_"})

Root = tuple  # ("state", name) or ("input", position)


def _refs(lit) -> Iterable[int]:
    if isinstance(lit, dict):
        if set(lit) == {"ref"}:
            if isinstance(lit["ref"], int):  # the checker refuses any other (rule SSA)
                yield lit["ref"]
        elif set(lit) == {"tuple"} and isinstance(lit["tuple"], list):
            for x in lit["tuple"]:
                yield from _refs(x)
    elif isinstance(lit, list):
        for x in lit:
            yield from _refs(x)


class StateWrites:
    """The rule over one graph, node by node. ``state_kinds`` maps state names to their
    kind; ``inputs`` are the ids of the graph's inputs, in order.

    >>> rule = StateWrites({"w": "parameter"}, inputs=[0])
    >>> read = {"op": "prim.state", "args": ["w"], "kwargs": {}, "outputs": [{"id": 1}]}
    >>> rule.node(0, "prim.state", frozenset(), (), read)
    ''
    >>> add = {"op": "Tensor.add_", "args": [{"ref": 1}, 3], "kwargs": {}, "outputs": []}
    >>> rule.node(1, "Tensor.add_", frozenset({"inplace"}), (), add)[:32]
    "Tensor.add_ writes parameter 'w'"
    """

    def __init__(self, state_kinds: dict[str, str], inputs: list[int]):
        self.state_kinds = state_kinds
        self.roots: dict[int, frozenset[Root]] = {
            vid: frozenset({("input", i)}) for i, vid in enumerate(inputs)
        }
        self.written_inputs: set[int] = set()  # positions of inputs an op writes
        # node index -> the roots of each tensor a prim.autograd_function node passes
        self.passed: dict[int, list[frozenset[Root]]] = {}
        self.outputs: list[frozenset[Root]] = []  # roots of each graph output, once run
        self.parameters_read: dict[int, str] = {}  # value id -> parameter it reads as is

    @staticmethod
    def through(root: Root, passed: list[frozenset[Root]]) -> frozenset[Root]:
        """What ``root`` (of a graph called by a node) is in the caller: an input of the
        graph is what the node passed at that position."""
        kind, where = root
        if kind == "input":
            return passed[where] if where < len(passed) else frozenset()
        return frozenset({root})

    def roots_of(self, lit) -> frozenset[Root]:
        found: set[Root] = set()
        for vid in _refs(lit):
            found |= self.roots.get(vid, frozenset())
        return frozenset(found)

    def node(self, index: int, op: str, flags: frozenset, arg_names: tuple, node: dict) -> str:
        """Record the node's aliases; the reason the node is refused, or ``""``."""
        args, kwargs, outputs = node["args"], node["kwargs"], node["outputs"]
        if op == "prim.state" and args and isinstance(args[0], str) and outputs:
            self.roots[outputs[0]["id"]] = frozenset({("state", args[0])})
            if self.state_kinds.get(args[0]) == "parameter":
                self.parameters_read[outputs[0]["id"]] = args[0]
            return ""
        if op == "prim.autograd_function" and args:
            self.passed[index] = [self.roots.get(v, frozenset()) for v in _refs(args[0])]
        first = args[0] if args else kwargs.get("self", kwargs.get("input"))
        if op == "detach" and outputs and isinstance(first, dict):
            read = self.parameters_read.get(first.get("ref"))  # F.embedding's weight.detach()
            if read is not None:
                self.parameters_read[outputs[0]["id"]] = read
        written = []
        if "inplace" in flags or op in GRAD_STATE_OPS:
            written.append((first, op in GRAD_STATE_OPS))
        # an evaluation-mode batch norm reads its statistics (a predict() function that
        # calls a model holds them as constants: prober17)
        through = () if _reads_statistics_only(op, args, kwargs) else WRITTEN_ARGUMENTS.get(op, ())
        for name in through:
            written += [(a, False) for a, names in zip(args, arg_names) if name in names]
            if name in kwargs:
                written.append((kwargs[name], False))
        for lit, any_state in written:
            for kind, name in sorted(self.roots_of(lit)):
                if kind == "input":
                    self.written_inputs.add(name)
                    continue
                state_kind = self.state_kinds.get(name, "")
                if op in PARAMETER_WRITERS and self._reads_parameter(lit, name):
                    continue
                if any_state or state_kind in READ_ONLY_KINDS:
                    return (
                        f"{op} writes {state_kind or 'state'} {name[:60]!r}: a loaded program "
                        "writes only buffers (BatchNorm running statistics, counters), never "
                        "a parameter or a constant, and never changes how state trains"
                    )
        if op in VIEW_OPS or "inplace" in flags or op in GRAD_STATE_OPS:
            shared = self.roots_of(first)
            if shared:
                for value in outputs:
                    self.roots[value["id"]] = shared
        return ""

    def _reads_parameter(self, lit, name: str) -> bool:
        """Whether ``lit`` is the value ``prim.state`` read for parameter ``name``, or its
        ``detach`` (the parameter's own elements, not a view that could reach other
        memory, nor a value that may share some of it)."""
        refs = list(_refs(lit))
        return (
            isinstance(lit, dict) and len(refs) == 1 and self.parameters_read.get(refs[0]) == name
        )


def subgraph_write(
    passed: list[frozenset[Root]], written: set[int], state_kinds: dict, which: str
) -> str:
    """The reason a ``prim.autograd_function`` node is refused when its ``which`` graph
    writes inputs (``written``) that come from read-only state (``passed``: the roots of
    each input in the caller), or ``""``."""
    for position in sorted(written):
        if position >= len(passed):
            continue
        for kind, name in sorted(passed[position]):
            if kind == "state" and state_kinds.get(name) in READ_ONLY_KINDS:
                return (
                    f"its {which} graph writes input {position}, which is "
                    f"{state_kinds[name]} {name[:60]!r}: a loaded program never writes a "
                    "parameter or a constant"
                )
    return ""


# --- what a call writes, for the runtime ----------------------------------------------------


def _ir_roots(obj, roots: dict[int, frozenset[Root]]) -> frozenset[Root]:
    found: set[Root] = set()
    for ref in refs_in(obj):
        found |= roots.get(ref.id, frozenset())
    return frozenset(found)


def written_roots(graph, methods: dict) -> frozenset[Root]:
    """Every ``("state", name)`` and ``("input", position)`` that a call of ``graph`` (an
    in-memory :class:`~tracebridge.ir.Graph`) may write in place, following views as the
    rule above does, and the inputs a custom autograd function's forward graph writes
    (from ``methods``, the program's graphs). Parameters are included (``embedding``'s
    ``max_norm`` renormalises its weight): this is what a refused call must put back."""
    written: set[Root] = set()
    for _, roots in writes_by_node(graph, methods):
        written |= roots
    return frozenset(written)


# Normalisations that write their running statistics only in training mode: with the
# literal ``training=False`` they read them and write nothing (ATen's eval batch norm).
# Not ``instance_norm``: with ``use_input_stats=False`` ATen still copies the mean of its
# repeated statistics back into them, a write (of the same values, up to rounding).
_TRAINING_FLAG = {"batch_norm": 5, "native_batch_norm": 5}


def _reads_statistics_only(op: str, args, kwargs) -> bool:
    """Whether a ``batch_norm`` node runs in evaluation mode by a literal ``training=False``
    (a reference, which a call could make True, is not one)."""
    position = _TRAINING_FLAG.get(op)
    if position is None:
        return False
    flag = (
        kwargs["training"]
        if "training" in kwargs
        else (args[position] if len(args) > position else None)
    )
    return flag is False


def writes_by_node(graph, methods: dict) -> list[tuple[int, frozenset[Root]]]:
    """``(index, roots)`` for each node of ``graph`` that may write in place, in order (see
    :func:`written_roots`)."""
    roots: dict[int, frozenset[Root]] = {
        v.id: frozenset({("input", i)}) for i, v in enumerate(graph.inputs)
    }
    found: list[tuple[int, frozenset[Root]]] = []
    for index, node in enumerate(graph.nodes):
        op, args, kwargs = node.op, node.args, node.kwargs
        if op == "prim.state" and args and node.outputs:
            roots[node.outputs[0].id] = frozenset({("state", args[0])})
            continue
        if op == AUTOGRAD_FUNCTION and args and methods.get(kwargs.get("forward")) is not None:
            passed = [_ir_roots(a, roots) for a in (args[0] if isinstance(args[0], list) else [])]
            written: set[Root] = set()
            for kind, where in written_roots(methods[kwargs["forward"]], methods):
                if kind == "input" and where < len(passed):
                    written |= passed[where]
            if written:
                found.append((index, frozenset(written)))
            continue
        info = ops.info(op)
        flags = info.flags if info is not None else frozenset()
        first = args[0] if args else kwargs.get("self", kwargs.get("input"))
        targets = []
        if "inplace" in flags or op in GRAD_STATE_OPS:
            targets.append(first)
        for name in WRITTEN_ARGUMENTS.get(op, ()):
            names = info.arg_names if info is not None else ()
            targets += [a for a, these in zip(args, names) if name in these]
            if name in kwargs:
                targets.append(kwargs[name])
        if _reads_statistics_only(op, args, kwargs):
            targets = []
        written = set()
        for target in targets:
            written |= _ir_roots(target, roots)
        if written:
            found.append((index, frozenset(written)))
        if op in VIEW_OPS or "inplace" in flags or op in GRAD_STATE_OPS:
            shared = _ir_roots(first, roots)
            if shared:
                for value in node.outputs:
                    roots[value.id] = shared
    return found


def can_refuse(graph, methods: dict, start: int = 0) -> bool:
    """Whether a call of ``graph`` may be refused at or after node ``start``: a guard, an
    op whose number of results the trace fixed, or a custom autograd function whose graph
    has one."""
    return last_refusal(graph, methods) >= start


def last_refusal(graph, methods: dict) -> int:
    """The index of the last node of ``graph`` that may refuse a call (see
    :func:`can_refuse`), or -1."""
    for index in range(len(graph.nodes) - 1, -1, -1):
        node = graph.nodes[index]
        if node.op == "prim.guard" or node.op in VARIADIC_OUTPUTS:
            return index
        for name in referenced_graphs(node):
            sub = methods.get(name)
            if sub is not None and sub is not graph and can_refuse(sub, methods):
                return index
    return -1
