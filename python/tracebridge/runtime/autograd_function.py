"""A custom autograd function of a program, rebuilt by the runtime.

Note: a ``prim.autograd_function`` node (trace/autograd_function.py) names two graphs of
the program. Its callable is a ``torch.autograd.Function`` subclass made here -- the same
class body for every node, never code from the file -- whose ``forward`` runs the forward
graph (outputs, then ``saved`` values it keeps with ``ctx.save_for_backward``; the outputs
listed in ``non_differentiable`` are marked so) and whose
``backward`` runs the backward graph on the saved values and the output gradients. Both
graphs run as methods of their own (generated code, guards checked, errors named after
the graph). Autograd runs the backward with gradients on when it builds a graph of the
gradient (``create_graph=True``), so a second derivative follows the backward's ops, as
in eager PyTorch.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..errors import ArtifactError
from ..ir import Graph, Node, pytree
from ..ir.program import referenced_graphs


def _graph(node: Node, methods: dict[str, Graph], key: str) -> tuple[str, Graph]:
    name = node.kwargs.get(key)
    graph = methods.get(name) if isinstance(name, str) else None
    if graph is None:
        raise ArtifactError(
            f"a prim.autograd_function node names {key} graph {str(name)[:60]!r}, which the "
            "program does not have; the file is corrupt (tracebridge validate lists every "
            "problem)"
        )
    return name, graph


def function_callable(node: Node, methods: dict[str, Graph]) -> Callable:
    """The callable of a ``prim.autograd_function`` node: ``run(inputs, **keywords)``
    applies a runtime-made autograd function to the list of input tensors and returns its
    outputs in the node's structure."""
    from .method import Method  # the method module imports the runtimes, which import us

    if len(set(referenced_graphs(node))) != 2:
        raise ArtifactError("a prim.autograd_function node must name two graphs")
    forward_name, forward_graph = _graph(node, methods, "forward")
    backward_name, backward_graph = _graph(node, methods, "backward")
    saved = node.kwargs.get("saved")
    n_out = len(node.outputs)
    if not isinstance(saved, int) or len(forward_graph.outputs) != n_out + saved:
        raise ArtifactError(
            f"a prim.autograd_function node's forward graph {forward_name!r} gives "
            f"{len(forward_graph.outputs)} values, not its {n_out} outputs and {saved} saved "
            "values; the file is corrupt"
        )
    non_differentiable = list(node.kwargs.get("non_differentiable") or ())
    forward = Method(forward_name, forward_graph, {}, "codegen", methods)
    backward = Method(backward_name, backward_graph, {}, "codegen", methods)

    class TracedFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *inputs):
            results = forward(*inputs)
            ctx.save_for_backward(*results[n_out:])
            if non_differentiable:
                ctx.mark_non_differentiable(*(results[k] for k in non_differentiable))
            return tuple(results[:n_out])

        @staticmethod
        def backward(ctx, *grads):
            return tuple(backward(*ctx.saved_tensors, *grads))

    spec = node.out_spec

    def run(inputs, **_keywords):
        outputs = TracedFunction.apply(*inputs)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        return pytree.unflatten(list(outputs), spec)

    return run
