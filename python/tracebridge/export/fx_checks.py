"""The checks a GraphModule of :func:`~tracebridge.to_graph_module` makes at the start of
each call: what the runtime checks before it runs a graph, so that the GraphModule, and
what ``torch.compile`` and ``torch.export`` make of it, serve only the calls the trace
serves (every other call raises, never answers differently).

Note: the checks, and how each behaves eagerly / under ``torch.compile`` / ``torch.export``.
  * Inputs (:func:`tracebridge_check_inputs`): each input's rank and kind of dtype, as the
    runtime checks them (runtime/support.py ``check_inputs``, the same GuardError). A
    traced ``x.dim()`` is a number in the graph (``range(1, x.dim())`` unrolled), so an
    input of another rank would otherwise run a graph made for the traced rank. Under
    ``torch.compile`` the comparisons are on static facts (rank, dtype), which Dynamo
    folds into its own guards. Under ``torch.export`` the rank and dtype are static, and
    the exported program's own input check (``ep.module()``) checks neither (PyTorch
    2.13 checks ranks only where it has no ``_guards_fn``): the check leaves two
    operations in the exported program that refuse another dtype
    (``aten._assert_tensor_metadata``) and another rank (a ``permute`` of the input by the
    identity, which needs exactly that rank; free, a view). A dtype is static under
    export: the exported program serves the dtype it was exported with, not the kind.
  * Mode and state (:func:`tracebridge_check_call`): a graph recorded in one mode (dropout,
    BatchNorm's statistics) refuses a call with ``gm.training`` in the other, as the
    traced module does; a state tensor the traced module holds anew
    (``load_state_dict(..., assign=True)``, ``module.weight = nn.Parameter(...)``) is
    installed on the GraphModule before the call, as ``tracebridge.compile`` picks it
    up; one set on the GraphModule itself (``gm.fc.weight = ...``, ``gm.double()``,
    ``torch.func.functional_call(gm, ...)``) stays, as in any GraphModule. Both eagerly
    and under ``torch.compile`` (the flag and each tensor's identity become Dynamo's
    guards: a rebinding recompiles); under ``torch.export`` the mode check only (an
    exported program holds copies of the state).
  * Failures raise :class:`~tracebridge.GuardError` through :func:`fail`, which Dynamo
    does not trace: without ``fullgraph`` the call breaks the graph there and raises it;
    with ``fullgraph=True`` Dynamo's own error carries the reason, which names the trace.
"""

from __future__ import annotations

import contextvars
import types

import torch
from torch import fx

from ..errors import GuardError, TraceError
from ..ir import Graph
from ..runtime import support


def _exporting() -> bool:
    return torch.compiler.is_exporting()


def fail(message: str, guard: str, location: str, seen):
    """Raise GuardError: from a function Dynamo does not trace (below)."""
    raise GuardError(message, guard=guard, location=location, seen=seen)


# Marked as ``torch.compiler.disable`` marks a function, without importing Dynamo (loading
# an AOT package imports neither Dynamo nor inductor): Dynamo breaks the graph at the call,
# which runs eagerly and raises GuardError. Traced, constructing GuardError failed with
# "Attempted to call a super() attribute" under ``fullgraph=True``; now Dynamo's error
# there is "skip inlining a disabled function", whose reason names the trace.
fail._torchdynamo_disable = True
fail._torchdynamo_disable_msg = (
    "a check of the tracebridge trace failed (a guard, or an input check): this call takes "
    "another path than the traced one; without fullgraph=True the call raises "
    "tracebridge.GuardError naming the assumption and its source line"
)


def guard_text(what: str | None, expect, kind: str | None, loc: str | None, line: str) -> str:
    """The message of a guard's assertion in an exported program."""
    what = what or "a traced value"
    head = f"{what} is {expect}" if kind == "branch" else f"{what} == {expect!r}"
    where = (loc or "unknown location") + (f": {line}" if line else "")
    return (
        f"tracebridge guard: the trace assumed {head} (at {where}); this exported program "
        "does not serve this call: call the trace itself, or export from an example like it"
    )


def assert_in_export(holds, message: str) -> None:
    """An assertion of a symbolic condition that stays in the exported program."""
    if isinstance(holds, torch.SymBool):
        torch.ops.aten._assert_scalar.default(holds, message)


# -- pickling -------------------------------------------------------------------------------
# A GraphModule pickles as its code, and unpickling traces that code again with
# ``torch.fx.Tracer`` (``gm._tracer_cls``, which a GraphModule of to_graph_module sets to
# :class:`CheckTracer`): each check records itself as the node it was, rather than run.

# The tracer of a CheckTracer trace in progress.
_TRACER: contextvars.ContextVar[fx.Tracer | None] = contextvars.ContextVar(
    "tracebridge_check_tracer", default=None
)


# How many CheckTracer traces run, in any thread: a check reads ``_TRACER`` only when
# some do (Dynamo cannot trace ``ContextVar.get``; it folds this global).
_TRACES = 0


class CheckTracer(fx.Tracer):
    """``torch.fx.Tracer`` that keeps the checks of this module as nodes, and reads
    buffers as nodes too (``proxy_buffer_attributes``): torch.fx's default runs an
    in-place write of a buffer (``count.add_(1)``) on the real tensor while tracing and
    keeps what it gave as a constant, so an unpickled GraphModule (whose unpickling traces
    its code with this tracer) wrote no state and returned stale values (prober21d F3)."""

    proxy_buffer_attributes = True

    def trace(self, root, concrete_args=None):
        global _TRACES
        self._autowrap_function_ids |= _runtime_functions(root)
        token = _TRACER.set(self)
        _TRACES += 1
        try:
            return super().trace(root, concrete_args)
        finally:
            _TRACES -= 1
            _TRACER.reset(token)


def _runtime_functions(root) -> set[int]:
    """The ids of tracebridge's own functions that the code of ``root`` (a GraphModule's
    ``forward``) calls by a global name: kept as calls when traced (torch.fx's
    ``autowrap_functions``), as the graph had them. Run on proxies instead, a checked op
    refused them (``group_norm: input needs 2+ dimensions`` unpickling HuBERT's
    GraphModule, prober21d F6). The checks of this module record themselves
    (:func:`_record`)."""
    forward = getattr(type(root), "forward", None) if isinstance(root, torch.nn.Module) else root
    names = getattr(forward, "__globals__", None) or {}
    return {
        id(value)
        for name, value in names.items()
        if isinstance(value, types.FunctionType)
        and not name.startswith("_")
        and (value.__module__ or "").startswith("tracebridge.")
        and value.__module__ != __name__
    }


def _record(function, *args):
    """The call of ``function`` as a node of the graph being traced: by a CheckTracer, or
    by any torch.fx tracer whose proxy is among ``args`` (``torch.fx.symbolic_trace(gm)``
    of a GraphModule: its checks stay checks); None where neither is."""
    tracer = _TRACER.get()
    if tracer is None:
        tracer = next((a.tracer for a in args if isinstance(a, fx.Proxy)), None)
    if tracer is None:
        return None
    return tracer.create_proxy("call_function", function, args, {})


def reduce_or_say_why(gm: fx.GraphModule):
    """``__reduce__`` of a flat GraphModule of to_graph_module: torch's, or a TraceError
    saying what to do where the graph calls a function pickle cannot import (a local
    one)."""
    try:
        return fx.GraphModule.__reduce__(gm)
    except Exception as error:  # torch.package's ObjNotFoundError, pickle's own
        raise TraceError(
            "this GraphModule cannot be pickled: its graph calls a function made for it "
            f"({str(error)[:200]}); save the trace instead (tracebridge.save) and make the "
            "GraphModule again after tracebridge.load (to_graph_module)"
        ) from error


# -- inputs ---------------------------------------------------------------------------------


def input_spec(graph: Graph) -> tuple:
    """Per graph input: ``(name, rank, type text, dtypes of its kind or None)``, literals
    the graph's code holds (a tuple of dtypes is what Dynamo folds: ``dtype in (...)``)."""
    by_kind: dict[str, tuple] = {}
    for dtype, kind in support.DTYPE_KIND.items():
        by_kind[kind] = (*by_kind.get(kind, ()), dtype)
    spec = []
    for index, value in enumerate(graph.inputs):
        kind = support.kind_of(value.dtype)
        spec.append(
            (
                value.name or f"in{index}",
                len(value.shape or []),
                value.type_str(),
                by_kind.get(kind) if kind is not None else None,
            )
        )
    return tuple(spec)


def tracebridge_check_inputs(spec: tuple, *inputs) -> tuple:
    """The GraphModule's inputs, checked (module Note); returns them (under export, as
    the views that keep the rank check in the exported program)."""
    if _exporting():
        return tuple(_in_export(x) for x in inputs)
    for (name, rank, type_text, dtypes), x in zip(spec, inputs):
        if not isinstance(x, torch.Tensor):
            if isinstance(x, fx.Proxy):
                return _record(tracebridge_check_inputs, spec, *inputs)
            raise TraceError(f"input {name} must be a tensor, got {type(x).__name__}")
        if x.dim() != rank:
            fail(
                f"input {name} has {x.dim()} dimensions, but the trace was made with "
                f"{rank} ({type_text}); pass a tensor of that rank",
                f"{name}.dim() == {rank}",
                "",
                x.dim(),
            )
        if dtypes is not None and x.dtype not in dtypes:
            _wrong_kind(name, type_text, x.dtype, dtypes)
    return inputs


def _wrong_kind(name: str, type_text: str, dtype: torch.dtype, dtypes: tuple) -> None:
    kind = support.KIND_WORDS[support.DTYPE_KIND[dtypes[0]]]
    got = str(dtype).replace("torch.", "")
    fail(
        f"input {name} has dtype {got}, but the trace was made with {type_text}; pass a "
        f"{kind} tensor (the traced code may depend on the kind of dtype)",
        f"{name} is {kind}",
        "",
        got,
    )


def _in_export(x):
    if not isinstance(x, torch.Tensor):
        return x
    torch.ops.aten._assert_tensor_metadata.default(x, dtype=x.dtype)
    return x.permute(*range(x.dim()))


# -- mode and state -------------------------------------------------------------------------


class CallCheck:
    """What :func:`tracebridge_check_call` compares: the mode the graph was recorded in
    (``training`` None where the graph is the same in both), and per state tensor
    ``(table, key, module, attribute)``: where the traced module holds it (its
    ``_parameters`` or ``_buffers``, or a constants table), and where the GraphModule
    does."""

    def __init__(self, method: str, training: bool | None, advice: str, slots: list):
        self.method = method
        self.training = training
        self.advice = advice
        self.slots = slots
        # Per slot, the traced module's tensor when the GraphModule last took it. Only a
        # tensor set anew THERE is installed: one set on the GraphModule itself (an
        # assignment, ``.double()``, ``functional_call``'s swap) is the GraphModule's own,
        # as in any GraphModule (prober23a F4: it was put back, silently).
        self.followed = [table.get(key) for table, key, _, _ in slots]

    def follow(self, table: dict, key: str, module: torch.nn.Module, attribute: str) -> None:
        """Add a slot: the traced module's ``table[key]``, held by the GraphModule's
        ``module`` as ``attribute``."""
        self.slots.append((table, key, module, attribute))
        self.followed.append(table.get(key))

    def stale(self) -> bool:
        # Dict reads, not getattr: nn.Module.__getattr__ costs ten times more per tensor.
        for (table, key, _, _), followed in zip(self.slots, self.followed):
            if table.get(key) is not followed:
                return True
        return False

    def rebind(self) -> None:
        """Install on the GraphModule each tensor the traced module holds anew."""
        for index, (table, key, module, attribute) in enumerate(self.slots):
            tensor = table.get(key)
            if tensor is None:
                raise TraceError(
                    f"state {key!r} of the traced module is gone (deleted after "
                    "to_graph_module); make the GraphModule again"
                )
            if tensor is not self.followed[index]:
                install_anew(module, attribute, tensor)
                self.followed[index] = tensor


def tracebridge_check_call(check: CallCheck, training: bool) -> None:
    """The GraphModule's mode and state, checked (module Note)."""
    tracer = _TRACER.get() if _TRACES else None
    if tracer is not None:
        from .fx import CALL_CHECK

        read = [tracer.create_proxy("get_attr", name, (), {}) for name in (CALL_CHECK, "training")]
        _record(tracebridge_check_call, *read)
        return
    if check.training is not None and training != check.training:
        recorded = "training" if check.training else "eval"
        fail(
            f"this GraphModule runs the {recorded}-mode graph of {check.method}, but it is "
            f"in {'training' if training else 'eval'} mode now (gm.training is {training}); "
            f"{check.advice}",
            f"{check.method}: training == {check.training}",
            "",
            training,
        )
    # Not under export: an exported program holds copies of the state. Under Dynamo the
    # comparisons become guards on each tensor's identity, so a rebinding recompiles,
    # and the rebinding itself breaks the graph (``rebind`` runs eagerly).
    if check.slots and not _exporting() and check.stale():
        rebind(check)


def rebind(check: CallCheck) -> None:
    check.rebind()


rebind._torchdynamo_disable = True  # as fail is: run eagerly under torch.compile
rebind._torchdynamo_disable_msg = (
    "a state tensor of the traced module was set anew (load_state_dict(assign=True), a "
    "parameter assigned): the GraphModule installs it eagerly; without fullgraph=True the "
    "call does so and recompiles"
)


def install_anew(module: torch.nn.Module, attribute: str, tensor: torch.Tensor) -> None:
    """Put the traced module's tensor where the GraphModule reads it."""
    persistent = attribute not in module._non_persistent_buffers_set  # as installed
    module._parameters.pop(attribute, None)
    module._buffers.pop(attribute, None)
    if isinstance(tensor, torch.nn.Parameter):
        module.register_parameter(attribute, tensor)
    else:
        module.register_buffer(attribute, tensor, persistent=persistent)
