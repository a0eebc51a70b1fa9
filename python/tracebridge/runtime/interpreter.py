"""Run a Graph node by node: slower than generated code, but easy to step through."""

from __future__ import annotations

import torch

from ..errors import ArtifactError
from ..ir import GeneratorRef, Graph, Node, Ref, pytree
from ..ir.ops import VARIADIC_OUTPUTS
from ..ir.program import map_literal
from . import generators, support


class Interpreter:
    """``Interpreter(graph, slots, guards, methods)(*input_tensors)`` runs one call.

    Each node is handled by ``run_<kind>``: ``state``, ``guard`` or ``op`` (every other op,
    including the ``prim.*`` value ops and ``scalar.*`` arithmetic), whose callable comes
    from ``support.node_callable``, as in generated code. Nothing in the graph is looked
    up by name at run time: the callables are resolved once, here.
    """

    def __init__(
        self,
        graph: Graph,
        slots: dict,
        guards: bool = True,
        methods: dict[str, Graph] | None = None,
        name: str = "forward",
    ):
        support.check_graph(graph, name)
        self.graph = graph
        self.slots = slots
        self.guards = guards
        self.callables = {}  # id(node) -> its function, resolved once
        self.reshaped = support.reshaped_inputs(graph)  # inputs never to be passed twice
        for index, node in enumerate(graph.nodes):
            if node.op == "prim.state":
                if not node.args or not isinstance(node.args[0], str) or node.args[0] not in slots:
                    raise ArtifactError(
                        f"method {name!r}, node {index}: reads state "
                        f"{(node.args or [None])[0]!r}, which the file lacks"
                    )
            elif node.op != "prim.guard":
                self.callables[id(node)] = support.node_callable(node, methods or {})

    def __call__(self, *inputs):
        support.check_inputs(self.graph, inputs)
        if self.reshaped:
            support.check_not_repeated(self.graph, inputs, self.reshaped)
        env = {value.id: leaf for value, leaf in zip(self.graph.inputs, inputs)}
        grad_mode = torch.is_grad_enabled()  # the graph may switch it (torch.no_grad())
        try:
            for node in self.graph.nodes:
                if node.op == "prim.state":
                    self.run_state(node, env)
                elif node.op == "prim.guard":
                    self.run_guard(node, env)
                else:
                    self.run_op(node, env)
        finally:
            torch._C._set_grad_enabled(grad_mode)
        outputs = [self.resolve(o, env) for o in self.graph.outputs]
        return pytree.unflatten(outputs, self.graph.out_spec)

    def resolve(self, arg, env):
        return map_literal(arg, lambda x: self._leaf(x, env))

    def _leaf(self, x, env):
        if isinstance(x, Ref):
            return env[x.id]
        if isinstance(x, GeneratorRef):
            table, key = generators.slot(self.slots, x.name, "the graph")
            return generators.read(table, key, x.name)
        return x

    def run_state(self, node: Node, env) -> None:
        owner, key = self.slots[node.args[0]]
        env[node.outputs[0].id] = owner[key]

    def run_guard(self, node: Node, env) -> None:
        if not self.guards:
            return
        seen = self.resolve(node.args[0], env)
        expect = node.kwargs["expect"]
        ok = seen is expect if isinstance(expect, bool) else seen == expect
        if not ok:
            support.raise_guard(node, seen, support.source_of(self.graph, node.loc))

    def run_op(self, node: Node, env) -> None:
        args = self.resolve(node.args, env)
        kwargs = {k: self.resolve(v, env) for k, v in node.kwargs.items()}
        result = self.callables[id(node)](*args, **kwargs)
        if node.out_spec is None:
            return
        if node.op in VARIADIC_OUTPUTS and node.out_spec["t"] in ("tuple", "list"):
            count = len(node.out_spec["c"])
            support.check_count(result, count, node, support.source_of(self.graph, node.loc))
        leaves = _leaves(result, node.out_spec)
        for value, leaf in zip(node.outputs, leaves):
            env[value.id] = leaf


def _leaves(result, spec) -> list:
    """Split an op's result into the leaves its out_spec names (positional unpacking)."""
    kind = spec["t"]
    if kind == "leaf":
        return [result]
    if kind in ("none", "const"):
        return []
    out = []
    for child, part in zip(spec["c"], result):
        out.extend(_leaves(part, child))
    return out
