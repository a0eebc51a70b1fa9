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

Note: without autograd, the forward graph called directly. Where no gradient can be
recorded (gradients off, or no input requires one; no forward-mode AD, no ``torch.func``
transform), ``Function.apply`` only adds its own bookkeeping (a context, saved values that
no backward will read): a fifth of BLOOM's calls went to it, once per layer for its GeLU.
Such a call runs the forward method with autograd off, as ``apply`` runs it, and returns
its outputs, which is what ``apply`` returns, when the forward graph's outputs are fresh
tensors: where one may be an input or share its memory (a view, ``contiguous()`` of a
contiguous input, ``broadcast_tensors`` of a tensor of the broadcast shape, an in-place
write that returns its input), ``apply`` gives a view of it, and it still runs.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..check.state_writes import VIEW_OPS, writes_by_node
from ..errors import ArtifactError
from ..ir import Graph, Node, pytree, refs_in
from ..ir import ops as opset
from ..ir.program import AUTOGRAD_FUNCTION, referenced_graphs

_grad_enabled = torch.is_grad_enabled
_set_grad_enabled = torch._C._set_grad_enabled
_functorch_level = torch._C._functorch.maybe_current_level
_forward_ad = torch.autograd.forward_ad


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
    direct = _fresh_outputs(forward_graph, n_out, methods)

    def run(inputs, **_keywords):
        if direct and _forward_ad._current_level < 0 and _functorch_level() is None:
            if not _grad_enabled():
                return pytree.unflatten(list(forward(*inputs)[:n_out]), spec)  # module Note
            if not any(_needs_grad(t) for t in inputs):
                # apply runs forward with autograd off: so does this call (a forward that
                # asks torch.is_grad_enabled() guards the False it was traced with)
                _set_grad_enabled(False)
                try:
                    results = forward(*inputs)
                finally:
                    _set_grad_enabled(True)
                return pytree.unflatten(list(results[:n_out]), spec)
        outputs = TracedFunction.apply(*inputs)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        return pytree.unflatten(list(outputs), spec)

    return run


def _needs_grad(value) -> bool:
    return isinstance(value, torch.Tensor) and value.requires_grad


def _fresh_outputs(graph: Graph, n_out: int, methods: dict[str, Graph]) -> bool:
    """Whether each of the first ``n_out`` outputs of ``graph`` (a forward graph) is a
    tensor no input shares memory with, and the graph writes no input in place: then
    running it directly gives what ``Function.apply`` gives (module Note)."""
    if any(kind == "input" for _, roots in writes_by_node(graph, methods) for kind, _ in roots):
        return False
    shared = {v.id for v in graph.inputs}  # values that may be, or view, an input
    for node in graph.nodes:
        info = opset.info(node.op)
        if info is None and not node.op.startswith(("prim.", "scalar.")):
            return False  # an op the set does not know
        first = node.args[0] if node.args else node.kwargs.get("self", node.kwargs.get("input"))
        passes_on = (
            node.op in VIEW_OPS
            or (info is not None and "inplace" in info.flags)
            or node.op == AUTOGRAD_FUNCTION
        )
        argument = (
            refs_in((node.args, node.kwargs)) if node.op == AUTOGRAD_FUNCTION else refs_in(first)
        )
        if passes_on and any(r.id in shared for r in argument):
            shared.update(v.id for v in node.outputs)
    outputs = graph.outputs[:n_out]
    return all(r.id not in shared for r in refs_in(outputs)) and all(refs_in(o) for o in outputs)
