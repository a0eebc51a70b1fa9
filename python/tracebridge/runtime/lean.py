"""Calls without autograd keep no autograd books on the values that never leave them.

Note: inference mode inside, normal tensors out.
  Under ``torch.no_grad()`` eager PyTorch, and torch.jit's interpreter, still keep
  autograd's books on every tensor an op makes: a version counter that every write bumps,
  a view's base and creation mode, and a pass through the ``Autograd`` and
  ``ADInplaceOrView`` kernels of each op (and, for every view of a tensor Python holds,
  a reference that retakes the GIL to count it). ``torch.inference_mode()`` skips all of
  it, but its tensors differ from others: an inference tensor cannot be written in place
  outside inference mode, cannot be saved for backward, has no version. So the generated
  code for calls without autograd (runtime/codegen.py) runs *inside* inference mode and
  gives the caller what eager would have given:

  * the ops whose results a result of the call may share memory with (the outputs, the
    tensors they are views of, :func:`plan`) run outside it, in the caller's mode, so
    every output is a normal tensor, as eager makes it, aliasing what eager's aliases
    (views too: a view made in inference mode may not be written outside it);
  * values kept across calls (folded, memoised: runtime/folding.py, runtime/memo.py) are
    made outside it (``folding.made_normal``), so a call with autograd may use them and a
    memo may key on their versions;
  * writes into inputs and state run inside: inference mode allows writes into normal
    tensors, views of them included, and moves their versions as eager does (ATen's
    ``batch_norm`` moves none of its running statistics' in either mode).

  It is entered only where nothing could tell (:func:`enter`): not already in inference
  mode, no torch function or dispatch mode, no ``torch.func`` transform, no jit tracer,
  not under ``torch.compile``, no forward-mode AD level open (``torch.no_grad()`` keeps
  tangents flowing, inference mode drops them), every input a plain tensor that is not an
  inference tensor, every state tensor the code reads plain (:class:`StateTypes`), and
  so every folded value (the state only the folded function reads is not checked: it
  runs before, in the caller's mode; its results are, once, when they are made:
  runtime/folding.py, ``with_their_types``); and only for graphs
  whose every op is in the op set, and whose custom autograd functions (graphs of the
  file, run by the runtime) can run inside. At the return, any output that still came
  out an inference tensor (a path the analysis did not foresee) is copied into a normal
  one, storage and strides kept (:func:`normal_copies`); the tests count such copies
  (:data:`COPIES`) and expect none.

  Numbers are bit for bit the same: the same kernels run on the same values. What it
  saves (one thread, batch 1, ``benchmarks/zoo_side_by_side.py``, the code before and
  after in one process): 5-20% of a call of the zoo's transformers, where an op costs a
  few microseconds (median over 94 models 0.92 of before); nothing measurable where
  convolutions' kernels take the time.
"""

from __future__ import annotations

import operator
from collections.abc import Collection
from dataclasses import dataclass

import torch

from ..ir import Graph, Ref, refs_in
from ..ir import ops as opset
from ..ir.analysis import output_ids
from . import size_checks
from .cse import _MAY_VIEW_ANY
from .cse import _Groups as Groups
from .dead_code import ALIASING
from .sealed import peek

# Ops outside the alias tables that may return an argument itself: ``cartesian_prod`` of
# one tensor is that tensor.
_MAY_RETURN_ANY = frozenset({"cartesian_prod"})
# Structural nodes that make no tensor memory.
_NO_MEMORY = frozenset({"prim.state", "prim.guard"})

# Outputs copied by normal_copies since the process started (the tests expect none).
COPIES = [0]

_InferenceMode = torch._C._InferenceMode
_in_inference_mode = torch.is_inference_mode_enabled
_function_modes = torch._C._len_torch_function_stack
_dispatch_modes = torch._C._len_torch_dispatch_stack
_functorch_level = torch._C._functorch.maybe_current_level
_jit_tracing = torch._C._get_tracing_state
_compiling = torch.compiler.is_compiling
# Forward-mode AD works under torch.no_grad() but not in inference mode: while a dual
# level is open, any tensor (an input, state, a closure's) may carry a tangent.
_forward_ad = torch.autograd.forward_ad
_Tensor = torch.Tensor
_PLAIN_TYPES = frozenset({torch.Tensor, torch.nn.Parameter})
_getitem = operator.getitem


def applies(graph: Graph) -> bool:
    """Whether calls of ``graph`` without autograd may run in inference mode: every op in
    the op set (a file's unknown op could see the mode). Size checks are the runtime's
    own; a custom autograd function runs graphs of the file through the runtime (its
    forward may write what it is given: see :func:`plan`)."""
    return all(node.op == size_checks.OP or opset.info(node.op) is not None for node in graph.nodes)


# Entering and leaving costs a call about 2 us (the guard, the checks of enter(), the
# outputs' test); an op inside saves 0.15 us (a small elementwise op) to 0.5 (a view of
# a tensor Python holds), torch 2.13, one thread. Below this many ops inside, a call runs
# as it is: nn.MultiheadAttention's one fused op lost 2 us a call, a small CNN 3.
MIN_OPS = 24


def pays(graph: Graph, elsewhere: Collection[int]) -> bool:
    """Whether at least :data:`MIN_OPS` ops of ``graph``, and at least one, run inside
    inference mode: not among ``elsewhere`` (folded, memoised, run outside), not
    structural or on numbers."""
    inside = 0
    for index, node in enumerate(graph.nodes):
        if index not in elsewhere and not node.op.startswith(("prim.", "scalar.")):
            inside += 1
            if inside >= MIN_OPS:
                return True
    return False  # (none inside: nothing to save whatever the bound)


def _groups(graph: Graph, in_place: Collection[int] = ()) -> Groups:
    """The alias groups of ``graph``'s values: a view, a write or a conversion that may
    return its input joins its first argument (by position or keyword), and so does a
    node the code may run in place (``in_place``: runtime/inplace.py); an op that may
    return a view of any of its arguments (``einsum``), or one outside the op set, joins
    them all."""
    groups = Groups()
    for index, node in enumerate(graph.nodes):
        refs = refs_in((node.args, node.kwargs))
        first = node.args[0] if node.args else None
        if node.op in _MAY_VIEW_ANY or node.op in _MAY_RETURN_ANY or opset.info(node.op) is None:
            shared = refs
        elif node.op in ALIASING or opset.is_inplace(node.op) or index in in_place:
            # The tensor may come by keyword (``torch.transpose(input=h, ...)``), and then
            # every argument does: Python puts no positional one after a keyword.
            shared = [first] if isinstance(first, Ref) else [] if node.args else refs
        else:
            shared = []
        for value in node.outputs:
            for ref in shared:
                groups.join(value.id, ref.id)
    return groups


@dataclass
class LeanPlan:
    """What runs outside inference mode in a call without autograd (see the module Note).

    ``outside``: indices of the nodes that run in the caller's mode; ``checked``: ids of
    the outputs tested at the return."""

    outside: set[int]
    checked: set[int]


# Reads that inference mode inside would change: the mode itself, a tensor's flag.
_READS_INFERENCE = frozenset({"prim.inference_mode", "prim.is_inference"})


def plan(graph: Graph, in_place: Collection[int] = ()) -> LeanPlan | None:
    """Which nodes of ``graph`` run outside inference mode, given the nodes the code runs
    in place (``in_place``: runtime/inplace.py; they write into their operand's memory,
    which joins their result's alias group): every node with a tensor result that an
    output may share memory with (its alias group, :func:`_groups`),

    * views too: a view made in inference mode may not be written outside it, and
      eager's outputs may be;
    * a node run in place too: where it may not (another dtype, autocast, a broadcast
      that grows) it runs as recorded and makes new memory, an inference tensor inside;
    * but not a write named in place (``x.add_(y)``, ``setitem``), which makes no memory:
      inference mode allows writes into normal tensors, views of them included, and
      moves their versions as eager does, so writes into inputs and state run inside.

    None where a custom autograd function would have to run outside: its forward graph
    may write a tensor it is given in place, which outside inference mode it may not do
    to one made inside; and where the graph reads inference mode or whether a tensor is
    an inference tensor, which inside would answer for the runtime, not for the caller."""
    if any(node.op in _READS_INFERENCE for node in graph.nodes):
        return None
    groups = _groups(graph, in_place)
    escaping = {groups.find(v) for v in output_ids(graph)}
    outside = set()
    for index, node in enumerate(graph.nodes):
        if node.op in _NO_MEMORY or opset.is_inplace(node.op):
            continue
        if any(v.kind == "Tensor" and groups.find(v.id) in escaping for v in node.outputs):
            outside.add(index)
    if any(graph.nodes[i].op == "prim.autograd_function" for i in outside):
        return None
    inside = {groups.find(v.id) for v in graph.inputs}
    inside |= {groups.find(v.id) for n in graph.nodes if n.op == "prim.state" for v in n.outputs}
    kinds = {v.id: v.kind for n in graph.nodes for v in n.outputs}
    checked = {
        v for v in output_ids(graph) if kinds.get(v) == "Tensor" and groups.find(v) not in inside
    }
    return LeanPlan(outside, checked)


class StateTypes:
    """The state tensors a graph reads, by their ``(dict, key)`` slots: whether every one
    is a plain tensor (a ``Tensor`` or a ``Parameter``, whose torch function is disabled).
    A subclass with a torch function or dispatch of its own would run its code inside
    inference mode, and might keep what it makes there; C functions mapped over the
    slots, about 40 ns a tensor (1.7 us for bert's 39 a call)."""

    __slots__ = ("owners", "keys")

    def __init__(self, slots: list[tuple[dict, str]]):
        self.owners = [owner for owner, _ in slots]
        self.keys = [key for _, key in slots]

    def __repr__(self) -> str:
        return f"state types ({len(self.keys)} tensors)"

    def plain(self) -> bool:
        try:
            return _PLAIN_TYPES.issuperset(map(type, map(_getitem, self.owners, self.keys)))
        except KeyError:  # the call raises its own error where the graph reads it
            return False


def all_plain(slots: list[tuple[dict, str]]) -> bool:
    """Whether every ``(dict, key)`` slot holds a plain tensor now."""
    return all(type(peek(owner, key)) in _PLAIN_TYPES for owner, key in slots)


class FixedTypes(StateTypes):
    """The :class:`StateTypes` of a frozen program's state (``tracebridge.freeze``): plain
    tensors of its own, which nothing outside it can replace, known plain once."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"frozen state types ({len(self.keys)} plain tensors)"

    def plain(self) -> bool:
        return True


class SealedTypes(StateTypes):
    """The :class:`StateTypes` of a loaded object whose state is sealed
    (runtime/sealed.py): plain tensors when the code was made, which nothing outside
    tracebridge can have replaced while the seal holds; checked as :class:`StateTypes`
    checks once it breaks."""

    __slots__ = ("seal",)

    def __init__(self, slots: list[tuple[dict, str]], seal):
        super().__init__(slots)
        self.seal = seal

    def __repr__(self) -> str:
        return f"sealed state types ({len(self.keys)} tensors)"

    def plain(self) -> bool:
        return self.seal.intact or StateTypes.plain(self)


def enter(state: StateTypes, *inputs, folded_plain: bool = True):
    """An inference-mode guard for this call (released with the last reference to it), or
    None where the call must run as it is (see the module Note): ``state`` are the state
    tensors the code reads, ``inputs`` its input tensors, ``folded_plain`` whether the
    tensors the folded function gave this call are plain (runtime/folding.py,
    ``with_their_types``: known when they were made, and kept values never change
    type): their types stand for the state they were made from, which the code does not
    read (a network's folded convolutions read hundreds of tensors)."""
    if (
        not folded_plain
        or _in_inference_mode()
        or _function_modes()
        or _dispatch_modes()
        or _functorch_level() is not None
        or _jit_tracing() is not None
        or _compiling()
        or _forward_ad._current_level >= 0
    ):
        return None
    for tensor in inputs:
        if type(tensor) is not _Tensor or tensor.is_inference():
            return None
    if not state.plain():
        return None
    return _InferenceMode(True)


def normal_copies(*tensors) -> tuple:
    """``tensors``, each inference tensor among them replaced by a normal tensor with the
    same values, sizes, strides and offset; those that shared storage share the copy."""
    outside = _InferenceMode(False)
    try:
        copies: dict = {}
        result = []
        for tensor in tensors:
            if not tensor.is_inference():
                result.append(tensor)
                continue
            COPIES[0] += 1
            if type(tensor) is not _Tensor or tensor.layout is not torch.strided:
                result.append(tensor.detach().clone())
                continue
            storage = tensor.untyped_storage()
            key = (storage.device, storage.data_ptr())
            copied = copies.get(key)
            if copied is None:
                copied = copies[key] = storage.clone()
            made = torch.empty((0,), dtype=tensor.dtype, device=tensor.device)
            made.set_(copied, tensor.storage_offset(), tensor.size(), tensor.stride())
            result.append(made)
        return tuple(result)
    finally:
        del outside
