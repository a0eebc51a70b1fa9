"""The ``inductor`` backend: ``torch.compile(gm, backend="inductor", dynamic=True)`` of the
method's whole GraphModule (export/fx.py), warmed up on the example inputs, so the compile
cost is paid in ``tracebridge.compile``, not at the first call.

compiler_args: ``--mode {default,reduce-overhead,max-autotune,max-autotune-no-cudagraphs}``,
``--dynamic`` (sizes stay symbolic: the default, except in the CUDA graph modes),
``--no-dynamic`` or ``--auto-dynamic`` (``torch.compile``'s default: sizes of the first
call, a size made symbolic when it changes; the default of ``reduce-overhead`` and
``max-autotune``, whose CUDA graphs are recorded per size anyway), ``--fullgraph`` (fail
instead of letting Dynamo split the graph), ``--debug`` (inductor's debug trace, into
``compiler_workdir``), ``--autograd`` (see below).

Inductor compiles whole graphs (``whole_graph``, see whole.py) with
``compile_graph_module``; ``compile`` (one partition's function) remains for artifacts saved
partitioned by earlier versions, which ``load_compiled`` still reads.

Note: compiled partitions are for inference, as with ``torch.neuron.trace``: by default they
run under ``torch.no_grad()``, so the one graph compiled and warmed up in ``compile`` is the
one every call uses, whether or not the caller is in a ``no_grad`` block (Dynamo compiles a
separate graph per grad mode, and a training graph costs more to compile and to run).
``--autograd`` keeps the caller's grad mode instead: gradients flow through the partitions,
and the warm-up happens in the grad mode that ``compile`` was called in.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Callable

import torch

from ..ir import Node
from .base import Backend, BackendError
from .opsets import SUPPORTED, supported_by_set, supported_whole

MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")
_UNSET = "unset"  # --dynamic not given (parse_args resolves it by mode)


@contextlib.contextmanager
def _environment(workdir, debug: bool):
    """Inductor's cache (generated code) and debug trace go to ``workdir`` while compiling."""
    if workdir is None:
        yield
        return
    import torch._inductor.config as inductor_config

    previous = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(os.fspath(workdir), "inductor_cache")
    patch = {"trace.enabled": True, "trace.debug_dir": os.fspath(workdir)} if debug else {}
    try:
        with inductor_config.patch(patch):
            yield
    finally:
        if previous is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = previous


class InductorBackend(Backend):
    name = "inductor"
    whole_graph = True

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--mode", choices=MODES, default="default")
        # unset: see parse_args (symbolic sizes, or torch.compile's own rule for CUDA graphs)
        parser.add_argument("--dynamic", dest="dynamic", action="store_true", default=_UNSET)
        parser.add_argument("--no-dynamic", dest="dynamic", action="store_false")
        # torch.compile's own default: specialise, make a size symbolic once it changes
        parser.add_argument("--auto-dynamic", dest="dynamic", action="store_const", const=None)
        parser.add_argument("--fullgraph", action="store_true")
        parser.add_argument("--debug", action="store_true")
        parser.add_argument("--autograd", action="store_true")

    @classmethod
    def parse_args(cls, args) -> argparse.Namespace:
        """As every backend's, with the default of ``dynamic`` resolved by mode: sizes stay
        symbolic (``--dynamic``), except in the CUDA graph modes, where torch.compile's own
        rule (``--auto-dynamic``) applies. A CUDA graph is recorded per input size anyway,
        and a graph compiled for symbolic sizes computes them on the host at every replay:
        on an H200, resnet18 at batch 1 ran at 439 µs with symbolic sizes and 309 µs with
        the example's, as torch.compile's 308."""
        parsed = super().parse_args(args)
        if parsed.dynamic is _UNSET:
            parsed.dynamic = None if parsed.mode in CUDA_GRAPH_MODES else True
        return parsed

    def supports(self, node: Node) -> bool:
        # Whole graphs: every op but random ones (opsets.supported_whole). The op sets of
        # opsets.py still decide what old partitioned artifacts may hold (load_compiled).
        return supported_whole(node) or supported_by_set(node, SUPPORTED)

    def compiles_in_callers_thread(self, tensors) -> bool:
        """CUDA graphs (``reduce-overhead``, ``max-autotune`` on a GPU): inductor's CUDA
        graph trees live in the thread that first made one, and a call from another
        thread fails an ``AssertionError`` in ``cudagraph_trees.get_obj``
        (pytorch/pytorch#123177): what ``--mode reduce-overhead`` hit on every model
        when the warm-up ran in the timeout's worker thread."""
        return self.records_cuda_graphs(tensors)

    def records_cuda_graphs(self, tensors) -> bool:
        return self.args.mode in CUDA_GRAPH_MODES and any(t.is_cuda for t in tensors)

    def compile(self, subgraph_fn: Callable, example_inputs, args, workdir) -> Callable:
        return _compiled(subgraph_fn, example_inputs, args, workdir)

    def compile_graph_module(self, gm, example_inputs, args, workdir) -> Callable:
        """One ``torch.compile`` of the method's GraphModule, as ``torch.compile(model)``
        does it: parameters stay module attributes (static inputs for CUDA graphs under
        ``reduce-overhead``, never copied per call)."""
        return _compiled(gm, example_inputs, args, workdir)


def _compiled(fn: Callable, example_inputs, args, workdir) -> Callable:
    """``torch.compile`` of ``fn`` (a partition's function or a GraphModule) with the
    backend's arguments, compiled now on ``example_inputs``, or at the first call (in
    ``workdir``) when there are none, as after load."""
    mode = None if args.mode == "default" else args.mode
    whole = isinstance(fn, torch.fx.GraphModule)
    if whole:
        # Note: the bound ``forward``, not the GraphModule. Dynamo compiles the frame of
        # ``forward`` either way (``self`` is the GraphModule, its parameters and buffers
        # are module attributes: static inputs for CUDA graphs, as with
        # ``torch.compile(model)``), but a compiled GraphModule runs the frames of
        # nn.Module's call and of GraphModule's ``_WrappedCall`` around it on every call,
        # 6 µs on the CPU: 1.15x torch.compile on a 50 µs MLP.
        fn = fn.forward
    compiled = torch.compile(
        fn, backend="inductor", dynamic=args.dynamic, fullgraph=args.fullgraph, mode=mode
    )
    run = compiled if args.autograd else _inference(compiled, refuse_grad_inputs=whole)
    if example_inputs is None:
        run = _FirstCallIn(run, workdir, args.debug) if workdir is not None else run
        run.tracebridge_no_grad = not args.autograd  # whole.py: autograd calls run plain
        return run
    with _environment(workdir, args.debug):
        run(*example_inputs)
    run.tracebridge_no_grad = not args.autograd  # whole.py: autograd calls run plain
    return run


def _inference(fn: Callable, refuse_grad_inputs: bool = False) -> Callable:
    """``fn`` run under ``no_grad``. With ``refuse_grad_inputs`` (a whole graph, whose inputs
    are the call's own tensors, not parameters), an input that requires grad while grad
    mode is on is refused: its gradient would be silently missing (a loss summing this
    output with others trains on the others only)."""

    def run(*inputs):
        if not torch.is_grad_enabled():  # already inference: skip entering no_grad
            return fn(*inputs)
        if refuse_grad_inputs:
            for index, x in enumerate(inputs):
                if isinstance(x, torch.Tensor) and x.requires_grad:
                    raise BackendError(
                        f"input {index} requires grad, but this compiled model runs for "
                        "inference (under no_grad), so no gradient would reach it: call it "
                        "under torch.no_grad() or on a detached input, or compile with "
                        "compiler_args=['--autograd'] for gradients through it"
                    )
        with torch.no_grad():
            return fn(*inputs)

    return run


class _FirstCallIn:
    """Runs the first call (where torch.compile compiles) with the workdir environment."""

    def __init__(self, fn: Callable, workdir, debug: bool):
        self.fn, self.workdir, self.debug, self.first = fn, workdir, debug, True

    def __call__(self, *inputs):
        if self.first:
            with _environment(self.workdir, self.debug):
                result = self.fn(*inputs)
            self.first = False
            return result
        return self.fn(*inputs)
