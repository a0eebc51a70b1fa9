"""Compiled objects: a traced function or module whose methods call compiled partitions.

They are :class:`~tracebridge.TracedFunction` / :class:`~tracebridge.TracedModule` in every
other respect (shared parameters, ``.to()``, ``.save()``); ``.graph`` shows the partitioned
graph and ``.coverage`` what the backend took.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from torch.nn.modules import module as _hooks

from ..api import TracedFunction, TracedModule
from ..errors import TraceError
from ..ir import Graph, Program
from ..ir.printer import graph_text
from ..runtime import Method
from ..runtime.method import for_mode
from .partition import Coverage, PartitionedCodeGen, Subgraph
from .whole import WholeGraphMethod, WholePlan


class LazySubgraph:
    """A partition that compiles itself at its first call (after ``load_compiled``)."""

    def __init__(self, compile_fn: Callable[[], Callable]):
        self._compile_fn = compile_fn
        self._fn: Callable | None = None
        self._lock = threading.Lock()

    def __call__(self, *args):
        if self._fn is None:
            with self._lock:
                if self._fn is None:
                    self._fn = self._compile_fn()
        return self._fn(*args)


@dataclass
class MethodPlan:
    """How one method runs compiled: its subgraphs, the partitioned graph, and the callable
    behind each ``backend.<name>`` node (``sources`` holds each partition's Python code)."""

    subgraphs: list[Subgraph]
    graph: Graph
    functions: dict[str, Callable] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    whole: WholePlan | None = None  # set: the whole graph is compiled at once (whole.py)


class CompiledMethod(Method):
    """A Method that runs the partitioned graph; argument handling is the runtime's."""

    def __init__(self, name: str, graph: Graph, slots: dict, plan: MethodPlan, methods=None):
        super().__init__(name, graph, slots, "codegen", methods)
        self.plan = plan

    def codegen(self, guards: bool = True) -> PartitionedCodeGen:
        return PartitionedCodeGen(
            self.plan.graph, self._slots, self.name, guards, self.plan.functions, self._methods
        )

    def set_functions(self, functions: dict[str, Callable]) -> None:
        self.plan.functions = dict(functions)
        self._compiled.clear()


def _compiled_method(name: str, graph: Graph, slots: dict, plan, methods) -> Method:
    if plan is None:
        return Method(name, graph, slots, "codegen", methods)
    if plan.whole is not None:
        return WholeGraphMethod(name, graph, slots, plan.whole, methods)
    return CompiledMethod(name, graph, slots, plan, methods)


def _compiled_methods(obj, slots: dict) -> dict[str, Method]:
    methods = {
        name: _compiled_method(name, g, slots, obj._plans.get(name), obj.program.methods)
        for name, g in obj.program.methods.items()
    }
    for method in methods.values():
        method.from_file = obj.program.from_file  # what an op's failure blames
    return methods


def _hooked(module) -> bool:
    """Whether a call of ``module`` must go through nn.Module's call (hooks to run)."""
    return bool(
        module._forward_hooks
        or module._forward_pre_hooks
        or module._backward_hooks
        or module._backward_pre_hooks
        or _hooks._global_forward_hooks
        or _hooks._global_forward_pre_hooks
        or _hooks._global_backward_hooks
        or _hooks._global_backward_pre_hooks
    )


class _CompiledMixin:
    _plans: dict[str, MethodPlan]
    coverage: Coverage

    @property
    def backend(self) -> str:
        return self.coverage.backend

    @property
    def subgraph_code(self) -> dict[str, str]:
        """The generated Python source of each partition, by subgraph name."""
        return {k: v for plan in self._plans.values() for k, v in plan.sources.items()}

    def _set_functions(self, method: str, functions: dict[str, Callable]) -> None:
        self._methods[method].set_functions(functions)

    def save(
        self,
        path,
        *,
        language: str | None = None,
        progress: bool | None = None,
        compiled_package: bool | str | os.PathLike = False,
        example_inputs=None,
    ) -> None:
        """Save to one file, as a traced object saves, with the backend and what it
        compiled recorded: ``tracebridge.load_compiled(path)`` recompiles it at the first
        call (tens of seconds on a CPU for inductor).

        ``compiled_package=True`` embeds an AOTInductor package of ``forward`` as well
        (what :func:`tracebridge.save_compiled` does: compiled here, on
        ``example_inputs`` or inputs of the trace's own sizes), so that
        ``tracebridge.load_compiled(path, trust_compiled_code=True)`` runs it without
        recompiling; a path embeds a package already made by
        :func:`~tracebridge.backends.aot.compile_package` from this object. Without trust
        (or on another torch, device or platform) the file recompiles as before. Opt-in
        because compiling a package costs as much again as ``tracebridge.compile`` did
        and makes the file larger (the package holds the weights a second time).
        """
        if compiled_package is False or compiled_package is None:
            if example_inputs is not None:
                raise TraceError(
                    "save(example_inputs=...) is for the compiled package: pass "
                    "compiled_package=True with it (or leave both out)"
                )
            super().save(path, language=language, progress=progress)
            return
        if not isinstance(path, (str, os.PathLike)):
            raise TraceError(
                f"save(compiled_package=...) writes a file name, not a "
                f"{type(path).__name__}: pass a path (or save without the package)"
            )
        from .aot import save_compiled  # aot imports backends.api, which imports us

        package = None if compiled_package is True else compiled_package
        save_compiled(self, path, example_inputs=example_inputs, package=package, language=language)


class CompiledFunction(_CompiledMixin, TracedFunction):
    """A compiled standalone function; call it like the original."""

    def __init__(
        self,
        program: Program,
        plans: dict[str, MethodPlan],
        coverage: Coverage,
        name: str = "forward",
    ):
        self._plans = plans
        self.coverage = coverage
        super().__init__(program, name=name)

    def _make_methods(self, slots: dict, runtime: str) -> None:
        self._methods = _compiled_methods(self, slots)

    @property
    def graph(self) -> str:
        """The partitioned graph: each compiled subgraph is one ``backend.*`` node."""
        return graph_text(self._plans["forward"].graph, self.__name__)

    def __repr__(self) -> str:
        return f"<tracebridge.CompiledFunction {self.__name__} ({self.backend})>"


class CompiledModule(_CompiledMixin, TracedModule):
    """A compiled module: shares the original's parameters, moves and saves like one."""

    def __init__(
        self, program: Program, plans: dict[str, MethodPlan], coverage: Coverage, original=None
    ):
        object.__setattr__(self, "_plans", plans)
        object.__setattr__(self, "coverage", coverage)
        super().__init__(program, original=original)

    def _make_methods(self, slots: dict, runtime: str) -> None:
        self._methods = _compiled_methods(self, slots)

    def __call__(self, *args, **kwargs):
        # nn.Module's call, without its own cost when nothing needs it (no hooks, one
        # ``forward`` for both modes): a compiled call should cost what torch.compile's does.
        program = self.program
        if (
            _hooked(self)
            or "forward" in program.dispatch
            or "forward" in program.mode_bound
            or self.__dict__.get("_tb_backward")  # sub-modules' backward hooks (api.py)
        ):
            return super().__call__(*args, **kwargs)
        self._watch()  # the traced module's checks: sub-modules' hooks, the module tree
        method = for_mode(self._methods["forward"], self.training)
        tree = self._tb_tree
        if tree is not None:  # and the modes of the sub-modules the graph was recorded with
            tree.check_modes("forward", method)
        return method(*args, **kwargs)

    @property
    def graph(self) -> str:
        """The partitioned graph of ``forward``."""
        method = self._method_for("forward")
        plan = self._plans.get(method.name)
        return graph_text(plan.graph if plan else method.graph, method.name)

    def extra_repr(self) -> str:
        return f"compiled: {self.backend}, {self.coverage.compiled}/{self.coverage.total} ops"
