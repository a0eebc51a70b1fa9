"""A refused call loses nothing: the state a graph writes is put back when the call fails.

Note: why. A graph runs its nodes in order, and a guard checks where the traced code made
its decision: BatchNorm in training mode updates its running statistics (and a module its
counter or cache buffer) before a later ``if`` on the result refuses the call. Without
this, the caller gets a GuardError and a model whose buffers moved -- and a method with
size-1 specialisations (runtime/method.py's ``Specialised``) would then run the next graph
on top of that write, updating the statistics twice. So a graph that may both write in
place (buffers, parameters such as ``embedding``'s renormalised rows, or its own inputs)
and refuse a call after it began (a guard, an op whose number of results the trace fixed)
runs as a transaction: the tensors it may write are copied before the call and copied back
when the call raises (a refusal or any other error), so a failed call leaves every tensor
as it was. Only tensors written before the graph's last node that may refuse are copied
(a KV cache written after the checks is not), and a graph with none (it writes nothing,
or its checks all stand before its first write) is not wrapped: its calls cost what they
cost before. What is written is found once, from the graph (check/state_writes.py's
``writes_by_node``); the copies are of the written tensors only.

Note: no copies where the refusals are already decided. In a model that trains with batch
norm, each batch norm's size check (``N * H * W == 1`` refuses) follows the previous one's
writes, so every call was a transaction: four small clones and the bookkeeping around them
cost a small CNN 17 us a call, a fifth of the call, where torch.jit pays nothing. Yet such
a check reads only sizes, and sizes that follow from the inputs' sizes: where every node
that may refuse after the first write decides by sizes, dtypes, devices and numbers that
the call's *key* fixes (:func:`decided_by`), a key that passed once passes again. So
:class:`Transaction` remembers the keys whose calls returned (the last ``KEEP``) and runs
a call with a known key as the method itself. Its refusals cannot happen; an op that
raises on the data (an index out of range) then leaves what the call wrote before it
written, as eager does. Under a torch function mode or autocast, or where an input or state
tensor the key reads is of a tensor subclass, every call is a transaction, as before.

The key: the inputs' sizes, dtypes and devices, the numbers passed, the default dtype, and
for the state, not its sizes (reading the sizes of a CNN's four weights on every call cost
more than the copies saved) but the state tensors themselves: a key holds those its
refusals read and serves a call only where each is still the one in its module's table
(50 ns a tensor), which sees every replacement (``module.weight = p``,
``load_state_dict(assign=True)``, ``torch.func.functional_call``'s swaps). A *generation*
moves when a traced module moves (``.to()``, ``.double()``: its tensors may change dtype
in place) and ``tracebridge.invalidate_caches()`` forgets every key. (torch's global
registration hooks would see replacements too, but any module of the process that sets a
buffer on every step would then turn every key off.) A change of sizes or dtype in
place that torch does not report (``p.data = w`` with another shape, ``resize_``, a
submodule's own ``.double()``) needs that call, as folded values do; until then a call
refused where the state's new sizes decide may leave what it wrote before the refusal
written (its answer is still a refusal: the checks stay in the code).
"""

from __future__ import annotations

import contextlib
import operator

import torch

from ..check.state_writes import can_refuse, last_refusal, writes_by_node
from ..ir import Graph, refs_in
from ..ir import ops as opset
from ..ir.ops import VARIADIC_OUTPUTS
from ..ir.program import referenced_graphs
from .folding import _autocast, _dispatch_modes, _epoch, _function_modes, outside_the_key
from .method import guards_active
from .sealed import peek
from .size_checks import (
    _METADATA,
    _RESIZING,
    _TO_PYTHON,
    FACTORIES,
    KEEP,
    OPERAND_OPS,
    SHAPE_FUNCTIONS,
    read_as_numbers,
)

# Ops whose result has its first argument's sizes, dtype and device whatever the others
# are (the statistics and affine weights of a norm, a dropout's probability).
LIKE_FIRST = frozenset(
    """batch_norm instance_norm rms_norm normalize dropout feature_dropout alpha_dropout
    feature_alpha_dropout hardswish hardsigmoid relu6 mish softplus prelu""".split()
)
# Kinds of a graph input that a key holds by type and value.
_NUMBER_KINDS = frozenset({"int", "float", "bool", "dtype", "device"})
_plain_set = frozenset({torch.Tensor, torch.nn.Parameter})
_metadata = operator.attrgetter("shape", "dtype", "device")
_default_dtype = torch.get_default_dtype


def decided_by(graph: Graph, methods: dict, refusals: list[int]):
    """``(input positions, state names)`` whose sizes, dtypes and devices (numbers: their
    values) decide every node of ``graph`` at ``refusals`` (indices of guards and of ops
    whose number of results the trace fixed), or None where one may decide by the data of
    a tensor, a read into Python, the grad mode or a graph it runs (module Note).

    Walks the graph once, giving each value the inputs and state its metadata follow from
    (a number's value, a tensor's sizes, dtype and device), where they follow from them
    alone: through size reads, ``scalar.*`` arithmetic, in-place ops (never those that
    resize) and ops whose results' metadata follow from their arguments' (runtime/size_checks.py's
    ``SHAPE_FUNCTIONS``, and :data:`LIKE_FIRST`)."""
    if any(n.op.rsplit(".", 1)[-1] in _RESIZING for n in graph.nodes):
        return None
    kinds = {v.id: v.kind for v in graph.inputs}
    kinds.update({v.id: v.kind for n in graph.nodes for v in n.outputs})
    sources: dict[int, frozenset] = {}
    for i, value in enumerate(graph.inputs):
        if value.kind == "Tensor" or value.kind in _NUMBER_KINDS:
            sources[value.id] = frozenset({("input", i)})
    wanted = set(refusals)
    found: set = set()
    for index, node in enumerate(graph.nodes[: max(refusals) + 1]):
        refs = refs_in((node.args, node.kwargs))
        made = _sources_of(node, refs, sources, kinds)
        if index in wanted:
            if node.op == "prim.guard":
                made = _union(refs, sources)
            elif node.op not in VARIADIC_OUTPUTS or referenced_graphs(node):
                return None
            if made is None:
                return None
            found |= made
        if made is not None:
            for value in node.outputs:
                sources[value.id] = made
    inputs = sorted(where for kind, where in found if kind == "input")
    state = sorted(where for kind, where in found if kind == "state")
    return inputs, state


def _union(refs, sources: dict):
    out: frozenset = frozenset()
    for ref in refs:
        found = sources.get(ref.id)
        if found is None:
            return None
        out |= found
    return out


def _sources_of(node, refs, sources: dict, kinds: dict):
    """What the metadata of ``node``'s results follow from, or None (see decided_by)."""
    op = node.op
    if op == "prim.state":
        name = node.args[0] if node.args else None
        if isinstance(name, str) and node.outputs and node.outputs[0].kind == "Tensor":
            return frozenset({("state", name)})
        return None
    if op in _METADATA or op.startswith("scalar."):
        return _union(refs, sources)
    if op in _TO_PYTHON or op.startswith("prim.") or referenced_graphs(node):
        return None  # data, the grad mode, a flag, a graph of its own
    if opset.info(op) is None:
        return None
    first = node.args[0] if node.args else None
    first_refs = refs_in(first)
    if opset.is_inplace(op) or op in LIKE_FIRST:
        return _union(first_refs, sources) if first_refs else None
    if op not in SHAPE_FUNCTIONS:
        return None
    tensors = [r for r in refs if kinds.get(r.id) == "Tensor"]
    if op in FACTORIES:
        return None if tensors else _union(refs, sources)
    if op == "where" and len(node.args) + len(node.kwargs) < 3:
        return None  # ``where(condition)``: as many results as true elements
    if op not in OPERAND_OPS:
        rest = refs_in((node.args[1:], node.kwargs))
        if any(kinds.get(r.id) == "Tensor" for r in rest):
            return None  # a tensor given where a size or an index is read
    elif any(kinds.get(r.id) == "Tensor" for r in read_as_numbers(node)):
        return None  # ``cat(xs, dim=t)``: the dim is the value of ``t``
    return _union(refs, sources)


class Transaction:
    """``method`` (a runtime Method) run so that a call that raises leaves the ``state``
    entries (names in ``slots``: ``name -> (table, key)``) and the ``inputs`` (positions of
    the graph's inputs) it may write as they were. ``decided``: :func:`decided_by`'s
    answer for the graph's refusals after its first write, or None; a call whose key
    passed before then runs without copies (module Note). Anything else is the method's
    own (``code``, ``graph``, ``check_guards``, ...)."""

    def __init__(self, method, state: list[str], inputs: list[int], slots: dict, decided=None):
        self._method = method
        self._state = [slots[name] for name in state if name in slots]
        self._inputs = inputs
        # keys whose calls returned, oldest first -> the state tensors the key was decided
        # with (the refusals read their sizes: a key holds only for those same tensors)
        self._passed: dict = {}
        self._keyed = decided is not None and all(name in slots for name in decided[1])
        self._key_inputs: list[int] = decided[0] if self._keyed else []
        self._key_state = [slots[name] for name in decided[1]] if self._keyed else []
        # the position of the one input the key reads, where it is a tensor the method
        # takes positionally (the common case, decided in ``__call__``'s own frame)
        tensor_inputs = [i for i, v in enumerate(method.graph.inputs) if v.kind == "Tensor"]
        self._arity = method._direct_arity
        single = self._keyed and len(self._key_inputs) == 1 and self._arity > 0
        self._one = (
            self._key_inputs[0] if single and self._key_inputs == tensor_inputs[:1] else None
        )

    def __getattr__(self, name: str):
        if name == "_method":
            raise AttributeError(name)
        return getattr(self._method, name)

    @property
    def check_guards(self) -> bool:
        return self._method.check_guards

    @check_guards.setter
    def check_guards(self, on: bool) -> None:
        self._method.check_guards = on

    def _leaves(self, args, kwargs) -> list | tuple | None:
        method = self._method
        if len(args) == method._direct_arity and not kwargs:
            return args
        try:
            return method._leaves(args, kwargs)
        except Exception:
            return None  # the method refuses these arguments before running

    def _key(self, leaves) -> tuple | None:
        """What decides the graph's refusals in this call (module Note), or None where no
        key can tell (a function mode, autocast, a tensor subclass, a value no hash holds).
        The state enters by its generation (:func:`state_replaced`); the tensors the
        refusals read are held with the key (``_passed``'s values)."""
        if outside_the_key():
            return None
        values = [leaves[where] for where in self._key_inputs]
        if set(map(type, values)) <= _plain_set:
            return (_generation[0], _epoch[0], _default_dtype(), *map(_metadata, values))
        key: list = [_generation[0], _epoch[0], _default_dtype()]
        for value in values:
            if isinstance(value, torch.Tensor):
                if type(value) not in _plain_set:
                    return None  # a subclass may make other sizes for the same metadata
                key.append(_metadata(value))
            else:
                key.append((type(value), value))
        entry = tuple(key)
        try:
            hash(entry)
        except TypeError:
            return None
        return entry

    def __call__(self, *args, **kwargs):
        # The common call (the traced tensors, positionally) is decided here, in this frame:
        # each frame and comprehension more cost a small CNN about a microsecond a call.
        one = self._one
        if one is not None and not kwargs and len(args) == self._arity:
            value = args[one]
            if (
                type(value) in _plain_set
                and not _function_modes()
                and not _dispatch_modes()
                and not _autocast()
            ):
                key = (_generation[0], _epoch[0], _default_dtype(), _metadata(value))
                held = self._passed.get(key)
                if held is not None:
                    # (a loop in this frame: 50 ns a state tensor, half what map() costs;
                    # get: an entry removed since is the method's error to report)
                    for table, name, tensor in held:
                        if peek(table, name) is not tensor:
                            break  # swapped in unreported (torch.func.functional_call)
                    else:
                        return self._method(*args)  # its refusals passed for this key
        return self._guarded(args, kwargs)

    def _guarded(self, args, kwargs):
        leaves = self._leaves(args, kwargs) if self._keyed or self._inputs else None
        key = self._key(leaves) if self._keyed and leaves is not None else None
        held = self._passed.get(key) if key is not None else None
        if held is not None and _holds(held):
            return self._method(*args, **kwargs)  # its refusals passed for this key
        written, saved = self._snapshot(leaves)
        # read as the call begins, when the method reads it (another thread may switch
        # the guards on while a call that checks none runs)
        checked = key is not None and guards_active(self._method)
        try:
            out = self._method(*args, **kwargs)
        except BaseException:
            with torch.no_grad():
                for tensor, copy in zip(written, saved):
                    # one the call could not write either (an inference tensor): the
                    # call's own error is the one to see
                    with contextlib.suppress(RuntimeError):
                        tensor.copy_(copy)
            raise
        if checked:
            # (a call with its guards off passed none of them)
            held = tuple((table, name, peek(table, name)) for table, name in self._key_state)
            if all(type(tensor) in _plain_set for _, _, tensor in held):
                self._remember(key, held)
        return out

    def _snapshot(self, leaves) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The tensors the call may write, and a copy of each."""
        written = [peek(table, name) for table, name in self._state]  # (removed: none)
        if self._inputs and leaves is not None:
            written += [leaves[i] for i in self._inputs if i < len(leaves)]
        written = [t for t in written if isinstance(t, torch.Tensor)]
        with torch.no_grad():
            return written, [t.clone() for t in written]

    def _remember(self, key: tuple, held: tuple) -> None:
        """Remember ``key`` as passed with ``held``: ``(table, name, tensor)`` for each
        state tensor the refusals read, plain (a subclass may make other sizes for the same
        metadata). Keys of other state tensors (swapped in by ``functional_call``) are
        forgotten: they would hold those tensors alive."""
        # (list() copies in one C call: another thread's call may change the dict)
        entries = list(self._passed.items())
        passed = {k: other for k, other in entries if _holds(other)}
        while len(passed) >= KEEP:
            passed.pop(next(iter(passed)))
        passed[key] = held
        self._passed = passed


def _holds(held: tuple) -> bool:
    """Whether each ``(table, name, tensor)`` of ``held`` is still the state there."""
    return all(peek(table, name) is tensor for table, name, tensor in held)


# How many times a traced module moved (``.to()``, ``.double()``): part of each key, so
# that a key never outlives the state dtypes and devices it was decided with.
_generation = [0]


def state_replaced(*_args) -> None:
    """Forget every key a :class:`Transaction` remembers: a traced module's state moved
    (``TracedModule._apply``)."""
    _generation[0] += 1


def transactional(method, graph: Graph, slots: dict, methods: dict[str, Graph]):
    """``method`` as a :class:`Transaction` where its graph may write in place and be
    refused after it began; ``method`` itself otherwise (no cost)."""
    # Only what is written before the last node that may refuse can need putting back:
    # a cache written after its checks, copied on every call, cost 1,400 times the call.
    last = last_refusal(graph, methods)
    writes = [written for index, written in writes_by_node(graph, methods) if index <= last]
    if not writes:
        return method
    roots = frozenset().union(*writes)
    state = sorted(name for kind, name in roots if kind == "state")
    inputs = sorted(where for kind, where in roots if kind == "input")
    first_write = min(index for index, written in writes_by_node(graph, methods))
    refusals = [
        index
        for index, node in enumerate(graph.nodes[: last + 1])
        # (the node that writes first may itself refuse after its write: a custom
        # autograd function whose graph writes, then checks)
        if index >= first_write and _may_refuse(node, methods)
    ]
    decided = decided_by(graph, methods, refusals) if refusals else None
    return Transaction(method, state, inputs, slots, decided)


def _may_refuse(node, methods: dict) -> bool:
    """Whether ``node`` may refuse a call: a guard, an op whose number of results the trace
    fixed, or a graph it runs that may (which :func:`decided_by` never counts as decided)."""
    if node.op == "prim.guard" or node.op in VARIADIC_OUTPUTS:
        return True
    graphs = [methods.get(name) for name in referenced_graphs(node)]
    return any(sub is None or can_refuse(sub, methods) for sub in graphs)
