"""Symbolic shapes for the values of a graph, found by probing it on meta tensors.

Note: the tracer sees one set of sizes. To say which dimensions of an intermediate value
follow which input dimension, we run the recorded graph again with no data (meta tensors,
guards off), once per input symbol, with that one dimension doubled. A dimension ``d`` that
moves with symbol ``s`` fits ``d = a*s + b``; integer ``a`` and ``b`` print as ``s0``,
``2*s0``, ``s0-2``; any other dependence (``(s0-3)//2``, ``s0*s1``) prints as ``?``.
A dimension that no probe moves is fixed by the model and prints as its size. A probe that
the graph cannot run (a Linear layer needs its feature size) means the model fixes that
dimension, so it proves nothing and is skipped. Shapes are informative: the runtime never
checks them, the guards are what the trace assumed.

The probes import PyTorch's Python meta kernels (and with them ``torch._dynamo``): about two
seconds, once per process. So labels are made only to show a graph, never to save one: a
file carries the example sizes of intermediates (SPEC section 4 allows either), and saving
costs what writing the weights costs.
"""

from __future__ import annotations

import contextlib
import warnings

import torch

from ..ir import Graph, Value
from .interpreter import Interpreter


def _probe(graph: Graph, state: dict[str, torch.Tensor], sizes: list[list[int]], methods=None):
    """Run ``graph`` on meta tensors of the given input sizes; value id -> shape."""
    inputs = [
        torch.empty(shape, dtype=_dtype(v), device="meta") for v, shape in zip(graph.inputs, sizes)
    ]
    meta_state = {k: torch.empty_like(t, device="meta") for k, t in state.items()}
    slots = {k: (meta_state, k) for k in meta_state}
    seen: dict[int, list[int]] = {}
    interp = _RecordingInterpreter(graph, slots, seen, methods)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        interp(*inputs)
    return seen


class _RecordingInterpreter(Interpreter):
    def __init__(self, graph, slots, seen, methods=None):
        super().__init__(graph, slots, guards=False, methods=methods)
        self.seen = seen

    def run_op(self, node, env) -> None:
        super().run_op(node, env)
        for value in node.outputs:
            result = env.get(value.id)
            if isinstance(result, torch.Tensor):
                self.seen[value.id] = list(result.shape)


def _dtype(value: Value) -> torch.dtype:
    from ..ir import DTYPES

    return DTYPES.get(value.dtype or "float32", torch.float32)


def _fit(base: int, moved: int, symbol_base: int) -> str:
    """The expression for a dimension that went from ``base`` to ``moved`` when its
    symbol went from ``symbol_base`` to ``2 * symbol_base``."""
    slope, rem = divmod(moved - base, symbol_base)
    if rem or slope <= 0:
        return "?"
    offset = base - slope * symbol_base
    head = "s" if slope == 1 else f"{slope}*s"
    return head, offset


def symbolize(graph: Graph, state: dict[str, torch.Tensor], methods=None) -> None:
    """Label the shapes of ``graph``'s intermediate values with input symbols, in place
    (``Value.labels``: for display; ``Value.shape`` keeps the example sizes); ``methods``
    are the program's graphs, which nodes may run (custom autograd functions)."""
    symbols = []  # (input index, dim index, symbol name, example size)
    base_sizes = []
    for i, value in enumerate(graph.inputs):
        dims = []
        for d, name in enumerate(value.shape or []):
            size = _example_size(graph, value, d)
            if size is None:
                return
            dims.append(size)
            symbols.append((i, d, name, size))
        base_sizes.append(dims)
    if not symbols:
        return
    try:
        base = _probe(graph, state, base_sizes, methods)
    except Exception:
        return
    moved_by: dict[str, dict[int, list[int]]] = {}
    for i, d, name, size in symbols:
        if size < 1:
            continue
        sizes = [list(s) for s in base_sizes]
        sizes[i][d] = 2 * size
        with contextlib.suppress(Exception):
            moved_by[name] = _probe(graph, state, sizes, methods)
    sizes_of = {name: size for _, _, name, size in symbols}
    for node in graph.nodes:
        for value in node.outputs:
            if value.kind != "Tensor" or value.id not in base:
                continue
            shape = base[value.id]
            labels: list = []
            for d, size in enumerate(shape):
                movers = [
                    (name, probe[value.id][d])
                    for name, probe in moved_by.items()
                    if value.id in probe
                    and len(probe[value.id]) == len(shape)
                    and probe[value.id][d] != size
                ]
                labels.append(_label(size, movers, sizes_of))
            value.labels = labels


def _label(size: int, movers: list, sizes_of: dict):
    if not movers:
        return size
    if len(movers) > 1:
        return "?"
    name, moved = movers[0]
    fit = _fit(size, moved, sizes_of[name])
    if fit == "?":
        return "?"
    head, offset = fit
    symbol = head + name[1:]
    if offset == 0:
        return symbol
    return f"{symbol}{offset:+d}"


def _example_size(graph: Graph, value: Value, dim: int) -> int | None:
    """The example size of an input dimension, kept by the tracer in ``meta``."""
    sizes = getattr(value, "example", None)
    if sizes is None:
        return None
    return sizes[dim]
