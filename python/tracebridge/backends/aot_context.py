"""When an AOTInductor package serves a call: only where it computes what the plain
program (``AOTCompiled.fallback``, ``tracebridge.load`` of the same file) would.

Note: what a package cannot follow. A package is one graph, compiled once, and holds what
its compile decided; the plain program reads each of these on every call:

* **autocast**: the package's kernels are the traced graph's, at the traced dtypes. Under
  the caller's autocast for the package's device type, eager code and the plain program
  compute in the lower precision (bfloat16 results where the package gave float32).
* **autograd**: the package records none; its outputs never require grad. With grad mode
  on and an input or a state tensor requiring grad, eager outputs do, and a loss that
  mixes them with others trains through them (through the package, silently not).
* **state**: the package holds the weights it was compiled with. The plain object's own
  (``load_state_dict``, ``.parameters()`` handed to an optimiser, ``.double()``: all reach
  ``.fallback`` through ``AOTCompiled.__getattr__``) may change since.
* **modes**: the package runs the graph of the mode the file was saved in. ``.train()``
  reaches the plain object, whose call then runs the graph of its mode or refuses
  (GuardError, or the module tree's TraceError).
* **Python modes and function transforms**: a ``TorchFunctionMode`` or
  ``TorchDispatchMode`` active at the call (``torch._C._len_torch_function_stack()``,
  ``_len_torch_dispatch_stack()``), and torch.func's transforms (``vmap``, ``grad``, ...:
  a functorch level is current, inputs are wrapped tensors) see every op the plain program
  runs and may change it; the package's C++ kernels run none of them (a dispatch mode
  doubling ``relu`` was silently ignored, ``vmap`` failed with a refusal about sizes).
* **hooks**: a module hook on the loaded object (which reaches the plain object) or a
  global one (``nn.modules.module.register_module_forward_hook``) runs in the plain
  object's call and never in the package; a hook on a sub-module changes what the
  plain object's graphs compute, and its call refuses it (TraceError).
* **reads of the call's context in the traced code** (``torch.is_grad_enabled()``,
  ``x.requires_grad``, the autocast state, a process setting: ``ir.ops.DYNAMIC_READS``):
  the plain program guards each on every call; the package holds the answer of its
  export (``x * 2 if torch.is_grad_enabled() else x * 3``, compiled with grad mode on,
  gave ``x * 2`` under ``torch.no_grad()``). Such a package serves no call: the load
  gives the plain program (:func:`fixed_read`). Models whose fused path depends on grad
  mode (``nn.TransformerEncoderLayer``) are not among them: their graph with autograd
  reads nothing; the fused variant that reads it is the plain program's, not compiled.

A call outside what the package was compiled for runs on the plain program, with one
:class:`CompiledCodeWarning` per reason saying why and what to do. Where the plain
object was never loaded, its state and modes are the file's, which the package was
compiled from (the load checked the digest): nothing to compare. Once loaded, its state
is compared with a snapshot taken at its load: the identity, ``_version`` and data
pointer of each state tensor (``load_state_dict`` and in-place updates bump the
version, ``.data =`` and ``.to()`` move the pointer, ``assign=True`` replaces the
tensor) and the training flag of each module. An in-place write through ``p.data``
bumps no version; taking a parameter's ``.data`` marks it (runtime/data_writes.py), and
a marked tensor counts as changed, as for the runtime's own folds.
"""

from __future__ import annotations

import operator

import torch
from torch import nn
from torch.nn.modules import module as _module_hooks

from ..ir.ops import DYNAMIC_READS
from ..ir.program import graph_from_json, refs_in
from ..runtime import data_writes

_VERSION = operator.attrgetter("_version")
_TRAINING = operator.attrgetter("training")
_REQUIRES_GRAD = operator.attrgetter("requires_grad")
_DATA_PTR = torch.Tensor.data_ptr
_function_modes = torch._C._len_torch_function_stack
_dispatch_modes = torch._C._len_torch_dispatch_stack
_functorch_level = torch._C._functorch.maybe_current_level


def overridden() -> str | None:
    """What at this call sees the plain program's ops and the package would not (a
    TorchFunctionMode, a TorchDispatchMode, a torch.func transform), in words, or None."""
    if _functorch_level() is not None:
        return "a torch.func transform (vmap, grad, jacrev, ...)"
    if _dispatch_modes():
        return "a TorchDispatchMode"
    if _function_modes():
        return "a TorchFunctionMode"
    return None


# Why a call runs on the plain program, and what to do: one warning per reason and object.
AUTOCAST = "autocast"
GRAD = "grad"
STATE = "state"
MODES = "modes"
HOOKS = "hooks"
OVERRIDES = "overrides"
ADVICE = {
    AUTOCAST: (
        "autocast is on for {device}, and the package computes at the traced dtypes "
        "(float32 where autocast gives bfloat16); call it outside autocast to run the package"
    ),
    GRAD: (
        "grad mode is on and {what} requires grad, and the package records no autograd (its "
        "outputs never require grad); call it under torch.no_grad() or "
        "torch.inference_mode() to run the package (or turn requires_grad off: "
        ".requires_grad_(False))"
    ),
    STATE: (
        "the parameters or buffers of the plain object (.fallback) changed since it was "
        "loaded (load_state_dict, an in-place update, .to(), a tensor replaced), and the "
        "package holds the weights it was compiled with; save_compiled again after "
        "changing weights to run a package of the new ones"
    ),
    MODES: (
        "the plain object (or one of its sub-modules) is not in the mode the package was "
        "compiled for ({mode}: .train() or .eval() was called since), and the package runs "
        "that mode's graph; call .{call}() to run the package again"
    ),
    OVERRIDES: (
        "{what} is active, which sees every op of the plain program and may change it, and "
        "the package's compiled kernels run outside it; call it outside the mode or "
        "transform to run the package"
    ),
    HOOKS: (
        "a forward hook is registered on the loaded object or for every module, and the "
        "package runs no hook; remove the hook to run the package"
    ),
}


def global_forward_hooks() -> bool:
    """Whether a global module forward (pre-)hook is registered: it runs in the plain
    object's call (a call without autograd: the backward hooks have nothing to run on)."""
    return bool(_module_hooks._global_forward_hooks or _module_hooks._global_forward_pre_hooks)


def fixed_read(doc: dict, method: str) -> str | None:
    """The first read of the call's context (``DYNAMIC_READS``) in graph ``method`` of the
    file (the one the package was compiled from) or in the forward graphs of the custom
    autograd functions it calls, as ``"op at file:line"``; None where there is none."""
    todo, seen = [method], set()
    while todo:
        name = todo.pop()
        if name in seen or name not in doc["methods"]:
            continue
        seen.add(name)
        restores = _restoring_reads(doc["methods"][name])
        for node in doc["methods"][name]["nodes"]:
            op = node["op"]
            if op in DYNAMIC_READS and not (
                op == "prim.grad_enabled" and node["outputs"][0]["id"] in restores
            ):
                return f"{op} at {node.get('loc') or '?'}"
            forward = node["kwargs"].get("forward") if op == "prim.autograd_function" else None
            if isinstance(forward, str):
                todo.append(forward)
    return None


def _restoring_reads(graph_doc: dict) -> set:
    """The ids of the grad-mode reads (``prim.grad_enabled``) of a graph whose only use is
    to switch grad mode back (``set_grad_enabled(read)``) at the end of a ``no_grad``
    block -- a ``@torch.no_grad()`` forward, as every Hugging Face rotary embedding has.

    Note: why these are not reads of the context. The block runs without autograd
    whatever the caller's mode, and the switch back restores the caller's mode: no value
    depends on the read (the package records no autograd either way), so the package
    computes what the plain program does, as for nn.TransformerEncoderLayer (prober24a
    F3: such a package was compiled, saved and never served). A read used by anything
    else (a guard, an arithmetic op, an output) is a read of the context."""
    graph = graph_from_json(graph_doc)
    reads = {v.id for n in graph.nodes if n.op == "prim.grad_enabled" for v in n.outputs}
    if not reads:
        return set()
    other = {ref.id for ref in refs_in(graph.outputs)}
    for node in graph.nodes:
        used = {ref.id for ref in refs_in((node.args, node.kwargs))} & reads
        if used and not (node.op == "set_grad_enabled" and len(node.args) == 1 and not node.kwargs):
            other |= used
    return reads - other


def state_requires_grad(doc: dict) -> bool:
    """Whether a state tensor of the file requires grad (``requires_grad`` of its entries,
    as saved): what the call's grad rule reads while the plain object is not loaded."""
    return any(info.get("requires_grad") for info in doc["state"].values())


class PlainWatch:
    """The plain object's state and modes as loaded (those the package was compiled with),
    and what a call compares with them (see the module's Note)."""

    __slots__ = (
        "root",
        "watch",
        "tables",
        "keys",
        "tensors",
        "versions",
        "pointers",
        "modules",
        "flags",
    )

    def __init__(self, plain):
        self.root = plain
        # A traced module's own checks of its sub-modules' hooks and tree: they raise
        # where its call would.
        self.watch = getattr(plain, "_watch", None) if isinstance(plain, nn.Module) else None
        slots = list(plain._state_slots().values())
        self.tables = tuple(table for table, _ in slots)
        self.keys = tuple(key for _, key in slots)
        self.tensors = self._now()
        self.versions = tuple(map(_VERSION, self.tensors))
        self.pointers = tuple(map(_DATA_PTR, self.tensors))
        data_writes.keep(self.tensors)
        modules = list(plain.modules()) if isinstance(plain, nn.Module) else []
        self.modules = tuple(modules)
        self.flags = tuple(map(_TRAINING, modules))

    def _now(self) -> tuple:
        return tuple(map(operator.getitem, self.tables, self.keys))

    def requires_grad(self) -> bool:
        """Whether a state tensor of the plain object requires grad now."""
        try:
            return any(map(_REQUIRES_GRAD, self._now()))
        except KeyError:
            return True  # a tensor removed: the plain call says what it makes of it

    def changed(self) -> str | None:
        """The reason (``STATE``, ``MODES`` or ``HOOKS``) the plain object no longer
        computes what the package does, or None. A sub-module replaced, or given a hook,
        raises the TraceError the plain call would."""
        if self.watch is not None:
            self.watch()
            root = self.root
            if root._forward_hooks or root._forward_pre_hooks:
                return HOOKS
        if tuple(map(_TRAINING, self.modules)) != self.flags:
            return MODES
        try:
            tensors = self._now()
        except KeyError:
            return STATE
        if (
            any(map(operator.is_not, tensors, self.tensors))
            or tuple(map(_VERSION, tensors)) != self.versions
            or tuple(map(_DATA_PTR, tensors)) != self.pointers
            or data_writes.taken(tensors)
        ):
            return STATE
        return None

    def compiled_mode(self) -> tuple[str, str]:
        """The mode the package was compiled for, in words, and the call that restores it."""
        training = bool(self.flags[0]) if self.flags else False
        return ("training", "train") if training else ("evaluation", "eval")


class ServeRule:
    """Whether the package may serve a call (see the module's Note), from the file's
    document and, once loaded, the plain object's :class:`PlainWatch`."""

    __slots__ = ("device", "doc_requires_grad")

    def __init__(self, doc: dict, device: str):
        self.device = device
        self.doc_requires_grad = state_requires_grad(doc)

    def why_plain(self, flat: list, watch: PlainWatch | None) -> tuple[str, dict] | None:
        """The reason this call runs on the plain program, with the words for its
        message, or None where the package computes what the plain program would."""
        if torch._C._is_any_autocast_enabled() and torch.is_autocast_enabled(self.device):
            return AUTOCAST, {"device": self.device}
        if global_forward_hooks():
            return HOOKS, {}
        what = overridden()
        if what is not None:
            return OVERRIDES, {"what": what}
        if torch.is_grad_enabled():
            state = self.doc_requires_grad if watch is None else watch.requires_grad()
            if state:
                return GRAD, {"what": "a parameter (or other state tensor) of the program"}
            if any(isinstance(x, torch.Tensor) and x.requires_grad for x in flat):
                return GRAD, {"what": "an input"}
        if watch is not None:
            why = watch.changed()
            if why == MODES:
                mode, call = watch.compiled_mode()
                return MODES, {"mode": mode, "call": call}
            if why is not None:
                return why, {}
        return None
