"""Run a Graph node by node: slower than generated code, but easy to step through."""

from __future__ import annotations

import torch

from ..ir import Graph, Node, Ref, pytree
from ..ir.ops import VARIADIC_OUTPUTS
from . import support


class Interpreter:
    """``Interpreter(graph, slots, guards)(*input_tensors)`` runs one call.

    Each node is handled by ``run_<kind>``: ``state``, ``guard`` or ``op`` (every other op,
    including the ``prim.*`` value ops and ``scalar.*`` arithmetic).
    """

    def __init__(self, graph: Graph, slots: dict, guards: bool = True):
        self.graph = graph
        self.slots = slots
        self.guards = guards
        self.functions = {
            n.op: support.op_function(n.op)
            for n in graph.nodes
            if n.op not in ("prim.state", "prim.guard")
        }

    def __call__(self, *inputs):
        support.check_inputs(self.graph, inputs)
        env = {value.id: leaf for value, leaf in zip(self.graph.inputs, inputs)}
        grad_mode = torch.is_grad_enabled()  # the graph may switch it (torch.no_grad())
        try:
            for node in self.graph.nodes:
                kind = node.op if node.op in ("prim.state", "prim.guard") else "op"
                getattr(self, "run_" + kind.replace("prim.", ""))(node, env)
        finally:
            torch._C._set_grad_enabled(grad_mode)
        outputs = [self.resolve(o, env) for o in self.graph.outputs]
        return pytree.unflatten(outputs, self.graph.out_spec)

    def resolve(self, arg, env):
        if isinstance(arg, Ref):
            return env[arg.id]
        if isinstance(arg, list):
            return [self.resolve(a, env) for a in arg]
        if isinstance(arg, tuple):
            return tuple(self.resolve(a, env) for a in arg)
        if isinstance(arg, dict):
            return {self.resolve(k, env): self.resolve(v, env) for k, v in arg.items()}
        if isinstance(arg, slice):
            return slice(*(self.resolve(a, env) for a in (arg.start, arg.stop, arg.step)))
        return arg

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
            support.raise_guard(node, seen)

    def run_op(self, node: Node, env) -> None:
        args = self.resolve(node.args, env)
        kwargs = {k: self.resolve(v, env) for k, v in node.kwargs.items()}
        result = self.functions[node.op](*args, **kwargs)
        if node.out_spec is None:
            return
        if node.op in VARIADIC_OUTPUTS and node.out_spec["t"] in ("tuple", "list"):
            support.check_count(result, len(node.out_spec["c"]), node)
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
