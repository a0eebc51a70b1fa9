"""A callable method: takes the user's (nested) arguments, runs the graph, rebuilds outputs."""

from __future__ import annotations

import contextlib
import threading

from ..errors import TraceError
from ..ir import Graph, pytree
from ..ir.pytree import is_tensor
from .codegen import generate
from .interpreter import Interpreter

_local = threading.local()


@contextlib.contextmanager
def guards_disabled():
    """Within this block, traced calls skip their guards (for speed; at your own risk).

    >>> with tracebridge.guards_disabled():  # doctest: +SKIP
    ...     y = traced(x)
    """
    previous = getattr(_local, "off", False)
    _local.off = True
    try:
        yield
    finally:
        _local.off = previous


def guards_active(method: Method) -> bool:
    """Whether a call of ``method`` now checks guards (object switch and block switch)."""
    return method.check_guards and not getattr(_local, "off", False)


def _simple_spec(spec: dict, n: int) -> bool:
    args, kwargs = spec["c"]
    return (
        args["t"] == "tuple"
        and len(args["c"]) == n
        and all(c["t"] == "leaf" for c in args["c"])
        and not kwargs["keys"]
    )


class Method:
    """One graph, ready to call. ``state`` maps state names to ``(dict, key)`` slots."""

    def __init__(self, name: str, graph: Graph, state_slots: dict, runtime: str = "codegen"):
        if runtime not in ("codegen", "interpreter"):
            raise ValueError(f"runtime must be 'codegen' or 'interpreter', not {runtime!r}")
        self.name = name
        self.graph = graph
        self.runtime = runtime
        self.check_guards = True
        self._slots = state_slots
        self._n_inputs = len(graph.inputs)
        self._simple = _simple_spec(graph.in_spec, self._n_inputs)
        self._compiled: dict[bool, object] = {}

    @property
    def code(self) -> str:
        return generate(self.graph, self._slots, self.name, guards=True)[0]

    def _function(self, guards: bool):
        fn = self._compiled.get(guards)
        if fn is None:
            if self.runtime == "codegen":
                fn = generate(self.graph, self._slots, self.name, guards)[1]
            else:
                fn = Interpreter(self.graph, self._slots, guards)
            self._compiled[guards] = fn
        return fn

    def __call__(self, *args, **kwargs):
        guards = self.check_guards and not getattr(_local, "off", False)
        fn = self._compiled.get(guards) or self._function(guards)
        if self._simple and not kwargs and len(args) == self._n_inputs:
            return fn(*args)
        leaves, spec = pytree.flatten((args, kwargs), is_tensor)
        if spec != self.graph.in_spec:
            raise TraceError(
                f"{self.name}() was called with arguments shaped differently from the example "
                f"inputs it was traced with: expected {describe(self.graph.in_spec)}, got "
                f"{describe(spec)}"
            )
        return fn(*leaves)


def describe(spec: dict) -> str:
    kind = spec["t"]
    if kind == "leaf":
        return "Tensor"
    if kind == "none":
        return "None"
    if kind == "const":
        return repr(spec["v"])
    inner = [describe(c) for c in spec.get("c", [])]
    if kind == "dict":
        return "{" + ", ".join(f"{k!r}: {v}" for k, v in zip(spec["keys"], inner)) + "}"
    if kind == "list":
        return "[" + ", ".join(inner) + "]"
    return "(" + ", ".join(inner) + ("," if len(inner) == 1 else "") + ")"
