"""Whole-graph compiling: one compiler call over the method's GraphModule (export/fx.py).

Note: why whole graphs. Compiling partitions one by one (partition.py) hands the compiler
Python functions whose parameters arrive as arguments on every call, and splits the graph
at every guard; on a GPU that made compiled models slower than plain ones and CUDA graphs
impossible. A backend that can take a GraphModule (``Backend.whole_graph``) gets the
method's whole graph instead, as ``torch.compile(model)`` would: parameters are the
module's own attributes (static inputs for CUDA graphs, never copied), guards are inside
(Dynamo makes them guards of its own), sizes are symbolic. The nodes it does not support
are kept out with ``torch._dynamo.disable``, so Dynamo splits the graph only around them
(and around runs shorter than ``min_subgraph_size``).
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from ..errors import TraceError
from ..export.fx import graph_module
from ..export.fx import info as fx_info
from ..export.fx_checks import install_anew
from ..ir import Graph, pytree
from ..runtime import Method, support
from .partition import STRUCTURAL, _is_shape, find_runs

_grad_enabled = torch.is_grad_enabled
_functorch_level = torch._C._functorch.maybe_current_level


@dataclass
class WholePlan:
    """How one method runs whole-graph compiled: the nodes left to eager PyTorch and the
    function that compiles the method's GraphModule (``compile(gm) -> callable``)."""

    compile: Callable
    eager_nodes: list[int] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"eager_nodes": list(self.eager_nodes)}


def small_runs(graph: Graph, supports: Callable, min_size: int) -> list[list[int]]:
    """Runs of supported nodes with fewer than ``min_size`` tensor ops between two
    unsupported ones. Guards do not end a run here: they are inside the compiled graph,
    so a guard between two ops splits nothing (counting them as splits, as partitions
    must, left the transpose before a transformer's first guard to eager PyTorch: a
    graph break at the start of every call)."""
    small = []
    for run in find_runs(graph, supports, guards_split=False):
        if sum(not _is_shape(graph.nodes[i]) for i in run) < max(1, min_size):
            small.append(run)
    return small


def eager_nodes(graph: Graph, supports: Callable, min_size: int = 1) -> list[int]:
    """Nodes the compiler must not take: unsupported ops, and the tensor ops of supported
    runs shorter than ``min_size`` (:func:`small_runs`)."""
    small = {i for run in small_runs(graph, supports, min_size) for i in run}
    return [
        i
        for i, node in enumerate(graph.nodes)
        if node.op not in STRUCTURAL
        and (not supports(node) or (i in small and not _is_shape(node)))
    ]


def _requires_grad(tensor) -> bool:
    return isinstance(tensor, torch.Tensor) and tensor.requires_grad


_REQUIRES_GRAD = _requires_grad


def _warn_autograd(method: str) -> None:
    from .aot import CompiledCodeWarning  # aot imports backends.api, which imports us

    warnings.warn(
        f"{method}(): a call with autograd (grad mode on and a parameter or an input "
        "requiring grad) or through torch.func runs the plain traced program, not the "
        "compiled graph, which runs for inference (its outputs would not require grad); "
        "call it under torch.no_grad() or torch.inference_mode() to run the compiled "
        "graph, or compile with compiler_args=['--autograd'] for gradients through it",
        CompiledCodeWarning,
        stacklevel=4,
    )


def _eager(fn: Callable) -> Callable:
    """``fn`` run by eager PyTorch inside a compiled graph (Dynamo breaks the graph there).
    A function of this module, not Dynamo's wrapper: FX writes a function that says it comes
    from ``torch`` by its name (``torch.cumsum``), which would drop the wrapper."""
    disabled = torch._dynamo.disable(fn, recursive=True)

    def tracebridge_eager(*args, **kwargs):
        return disabled(*args, **kwargs)

    return tracebridge_eager


class WholeGraphMethod(Method):
    """A Method whose graph runs as one compiled GraphModule; argument handling (pytree
    in, input checks) is the runtime's, the result is rebuilt from the flat outputs."""

    def __init__(self, name: str, graph: Graph, slots: dict, plan: WholePlan, methods=None):
        super().__init__(name, graph, slots, "codegen", methods)
        self.plan = plan
        self.graph_module = None
        self._whole = None  # the compiled GraphModule, one for both guard settings
        self._autograd = None  # the plain program, for the calls with autograd (below)
        self._autograd_lock = threading.Lock()

    def plain_call(self, leaves) -> object:
        """A call on the plain traced program (the graph's own code, with autograd), for
        the calls a compiled graph that runs for inference would answer detached.

        Note: why. The inductor backend runs its graph under ``no_grad`` (inductor.py). A
        call with grad mode on where a parameter requires grad (any model called without
        ``torch.no_grad()``), an input does, or through torch.func (``functional_call``
        with tensors that require grad, ``grad``, ``vmap``: functorch's wrapped tensors)
        came back detached: gradients silently missing or zero (prober24a F8). Such a
        call runs here instead and gives eager's gradients, as the plain traced object
        does; one warning per method says so and how to run the compiled graph."""
        method = self._autograd
        if method is None:
            with self._autograd_lock:
                method = self._autograd
                if method is None:
                    method = Method(self.name, self.graph, self._slots, "codegen", self._methods)
                    method.from_file = self.from_file
                    method.frozen = self.frozen
                    method.seal = self.seal
                    self._autograd = method
                    _warn_autograd(self.name)
        return method._function((True, False))(*leaves)

    def __call__(self, *args, **kwargs):
        # The runtime's argument handling, minus what a compiled graph does not need (the
        # guard switch: guards are inside the graph), so that a call costs what a call of
        # ``torch.compile(model)`` costs.
        fn = self._compiled.get(True)
        if fn is None or kwargs or not self._simple or len(args) != self._n_inputs:
            return super().__call__(*args, **kwargs)
        try:
            return fn(*args)
        except TraceError:
            raise
        except Exception as exc:
            raise self.failure(exc) from exc

    def _function(self, guards: bool):
        return super()._function(True)

    def build(self):
        """The method's GraphModule over the object's state (made once)."""
        if self.graph_module is None:
            self.graph_module = graph_module(
                self.graph,
                self.name,
                self._slots,
                self._methods,
                eager=_eager,
                eager_nodes=self.plan.eager_nodes,
            )
        return self.graph_module

    def _bindings(self) -> list[tuple[dict, str, nn.Module, str]]:
        """``(table, key, holder, leaf)`` for each state tensor of the GraphModule: where
        the traced object reads it (``module._parameters``, ...) and where the GraphModule
        holds it (``holder.leaf``)."""
        gm = self.build()
        out = []
        for name, path in fx_info(gm).state.items():
            table, key = self._slots[name]
            owner, _, leaf = path.rpartition(".")
            out.append((table, key, gm.get_submodule(owner), leaf))
        return out

    def _make(self, guards: bool):
        # Guards are inside the compiled graph: they are checked whatever ``guards`` says.
        if self._whole is None:
            self._whole = self.plan.compile(self.build())
        compiled = self._whole
        no_grad = bool(getattr(compiled, "tracebridge_no_grad", False))
        requires_grad = _REQUIRES_GRAD
        plain_call = self.plain_call
        # Note: rebinding. The GraphModule holds the state tensors themselves; a parameter
        # set anew on the original (``net.fc.weight = nn.Parameter(...)``) replaces the
        # entry of the original's table, which the plain runtime reads at every call but
        # the GraphModule never saw: the compiled call answered with the old weight,
        # silently. One identity test per state tensor (what the plain runtime's own
        # reads cost) finds it, and the new tensor is put into the GraphModule, where
        # Dynamo's guards take it (a recompile only if its shape or dtype changed).
        bindings = self._bindings()
        held = [getattr(holder, leaf) for _, _, holder, leaf in bindings]

        def rebind():
            for index, (table, key, holder, leaf) in enumerate(bindings):
                tensor = table[key]
                if tensor is not held[index]:
                    install_anew(holder, leaf, tensor)  # a buffer where it held a parameter too
                    held[index] = tensor

        graph, spec = self.graph, self.graph.out_spec
        ranks = [len(v.shape or []) for v in graph.inputs]
        kinds = [support.kind_of(v.dtype) for v in graph.inputs]
        kind_of = support.DTYPE_KIND.get
        single = spec.get("t") == "leaf"

        def run(*leaves):
            # The runtime's input checks (rank, kind of dtype), inline: this wrapper is
            # all that a compiled call costs beyond torch.compile's own.
            for (table, key, _, _), tensor in zip(bindings, held):
                if table.get(key) is not tensor:
                    rebind()
                    break
            for leaf, rank, kind in zip(leaves, ranks, kinds):
                if leaf.dim() != rank or (kind is not None and kind_of(leaf.dtype) != kind):
                    support.check_inputs(graph, leaves)
            if _functorch_level() is not None or (
                no_grad
                and _grad_enabled()
                and (any(map(requires_grad, held)) or any(map(requires_grad, leaves)))
            ):
                return plain_call(leaves)  # autograd or torch.func: see plain_call
            flat = compiled(*leaves)
            return flat[0] if single else pytree.unflatten(list(flat), spec)

        run.__name__ = self.name
        return run
