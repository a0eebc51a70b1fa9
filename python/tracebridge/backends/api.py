"""``tracebridge.compile`` (the ``torch.neuron.trace`` analogue) and ``load_compiled``.

Note: the steps, each in its own function below.
  1. trace (the core ``tracebridge.trace``, with its own check against eager);
  2. partition the traced graph by what the backend supports, and report coverage (printed
     with ``verbose``, written to ``compiler_workdir/partition.txt``) before compiling;
  3. run the partitioned graph once on the example inputs with plain generated functions,
     recording each partition's inputs, so the backend can warm up on real values;
  4. compile every partition in a worker thread, under ``compiler_timeout``;
  5. check the compiled object against eager on the example and check inputs; on a mismatch,
     run again comparing every partition with its uncompiled self to name the culprit;
  6. embed the partition (backend, compiler args, node indices) in ``program.backend``:
     compiled code is never stored (nothing is pickled); ``load_compiled`` recompiles.
A backend that compiles whole graphs (``Backend.whole_graph``: inductor) takes another
road after step 2 (``_compile_whole``, whole.py): the method's GraphModule from
export/fx.py is compiled once, Dynamo splitting it only around the nodes the backend does
not support; the first call on the example inputs warms it up under ``compiler_timeout``,
the check compares it with eager, and ``whole_graph: {"eager_nodes": [...]}`` is embedded.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import re
import subprocess
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from .. import api, artifact
from ..check.verify import compare_outputs
from ..errors import ArtifactError, TraceError, TracerWarning, TracingCheckError
from ..ir import Graph, Program, pytree
from ..ir.printer import graph_text
from ..ir.pytree import is_tensor
from ..trace.capture import preserved
from .base import Backend, BackendError, backend_class
from .compiled import CompiledFunction, CompiledModule, LazySubgraph, MethodPlan
from .fake_cuda_guard import pin_fake_cuda_guard
from .partition import (
    Coverage,
    Subgraph,
    SubgraphCodeGen,
    _is_shape,
    boundary,
    check_subgraphs,
    generate,
    partition,
    partitioned_graph,
    subgraph_graph,
)
from .tolerance import default_tolerance
from .whole import WholePlan, eager_nodes, small_runs

log = logging.getLogger("tracebridge.backends")
META_KEY = "backend"
META_VERSION = 1


def _owner_module(model) -> nn.Module | None:
    if isinstance(model, nn.Module):
        return model
    if inspect.ismethod(model) and isinstance(model.__self__, nn.Module):
        return model.__self__
    return None


def _plan(graph: Graph, subgraphs: list[Subgraph]) -> MethodPlan:
    """Generate each partition's Python function (uncompiled) and the partitioned graph."""
    plan = MethodPlan(subgraphs, partitioned_graph(graph, subgraphs))
    for sub in subgraphs:
        source, fn = generate(
            SubgraphCodeGen(subgraph_graph(graph, sub), {}, sub.name, False),
            f"<tracebridge:{sub.name}>",
        )
        plan.functions[f"backend.{sub.name}"] = fn
        plan.sources[sub.name] = source
    return plan


def _write_report(workdir: str, name: str, coverage: Coverage, plan: MethodPlan) -> None:
    os.makedirs(workdir, exist_ok=True)
    lines = [str(coverage), "", graph_text(plan.graph, name), ""]
    for sub in plan.subgraphs:
        lines.append(
            f"{sub.name}: nodes {sub.nodes}, inputs {len(sub.inputs)}, outputs {len(sub.outputs)}"
        )
    with open(os.path.join(workdir, "partition.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    for sub_name, source in plan.sources.items():
        with open(os.path.join(workdir, f"{sub_name}.py"), "w") as f:
            f.write(source)


def _record_inputs(obj, plan: MethodPlan, args: tuple, module) -> dict[str, tuple]:
    """Run once with recording wrappers; return each partition's example inputs."""
    seen: dict[str, tuple] = {}
    plain = dict(plan.functions)

    def recorder(op: str, fn: Callable) -> Callable:
        def record(*inputs):
            seen.setdefault(op, inputs)
            return fn(*inputs)

        return record

    obj._set_functions("forward", {op: recorder(op, fn) for op, fn in plain.items()})
    try:
        with preserved(module), torch.no_grad():
            obj(*_fresh(args))
    finally:
        obj._set_functions("forward", plain)
    return seen


def _in_worker(work: Callable[[], None], backend: str, timeout: float | None) -> None:
    """Run ``work`` in a worker thread in the caller's grad mode (it is per thread);
    TimeoutExpired past ``timeout``.

    Note: a thread cannot be killed; past the timeout it finishes in the background and its
    result is dropped. A subprocess could be killed, but compiled code cannot cross a
    process boundary without pickling, which tracebridge never does. Before the worker
    starts, torch's fake CUDA guard is given a thread that outlives it (fake_cuda_guard.py:
    on torch 2.11 without a CUDA device, the guard a worker installs dies with it, and the
    next compile crashed the process)."""
    pin_fake_cuda_guard()
    grad = torch.is_grad_enabled()

    def run():
        torch.set_grad_enabled(grad)
        work()

    worker = threading.Thread(target=run, name="tracebridge-compile", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise subprocess.TimeoutExpired(f"tracebridge.compile(backend={backend!r})", timeout)


def _compile_all(
    impl: Backend,
    plan: MethodPlan,
    examples: dict[str, tuple],
    workdir,
    timeout: float | None,
    verbose: bool,
) -> dict[str, Callable]:
    """Compile every partition in a worker thread; TimeoutExpired past ``timeout``."""
    result: dict[str, Callable] = {}
    failure: list[BaseException] = []

    def work():
        for sub in plan.subgraphs:
            op = f"backend.{sub.name}"
            start = time.perf_counter()
            try:
                result[op] = impl.compile(plan.functions[op], examples.get(op), impl.args, workdir)
            except BaseException as exc:  # noqa: BLE001 - reported in the caller's thread
                failure.append(
                    BackendError(
                        f"backend {impl.name!r} failed to compile {sub.name} (nodes {sub.nodes}): "
                        f"{type(exc).__name__}: {exc}"
                    )
                )
                failure[-1].__cause__ = exc
                return
            message = f"compiled {sub.name} in {time.perf_counter() - start:.2f} s"
            log.info(message)
            if verbose:
                print(message)

    _in_worker(work, impl.name, timeout)
    if failure:
        raise failure[0]
    return result


def _max_error(a, b) -> float:
    a_leaves, _ = pytree.flatten(a, is_tensor)
    b_leaves, _ = pytree.flatten(b, is_tensor)
    worst = 0.0
    for x, y in zip(a_leaves, b_leaves):
        if isinstance(x, torch.Tensor) and (
            not isinstance(y, torch.Tensor) or x.shape != y.shape or x.dtype != y.dtype
        ):
            worst = float("inf")
        elif isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel():
            worst = max(worst, (x.detach().double() - y.detach().double()).abs().max().item())
        elif isinstance(x, torch.Tensor) and not torch.equal(x, y):
            worst = float("inf")
    return worst


def _culprit(obj, plan: MethodPlan, plain: dict[str, Callable], args, module) -> str:
    """Run with every partition compared to its uncompiled self; the worst one's name."""
    compiled = dict(plan.functions)
    errors: dict[str, float] = {}

    def comparer(op: str) -> Callable:
        def compare(*inputs):
            got = compiled[op](*inputs)
            errors[op] = max(errors.get(op, 0.0), _max_error(plain[op](*inputs), got))
            return got

        return compare

    obj._set_functions("forward", {op: comparer(op) for op in compiled})
    try:
        with preserved(module), torch.no_grad():
            obj(*_fresh(args))
    finally:
        obj._set_functions("forward", compiled)
    if not errors:
        return "?"
    op = max(errors, key=errors.get)
    return f"{op.split('.', 1)[1]} (max absolute error {errors[op]:.3g} on its own)"


def _fresh(args: tuple) -> tuple:
    """A copy of ``args`` whose tensors are clones: each run of the warm-up and the check
    gets inputs of its own, so a model that writes its input in place (``x.add_(1)``) is
    compared on the values the user passed, not on what the previous run left (the check
    refused such models as "differs between the code and the trace"), and compiling leaves
    the user's example inputs as they were."""
    leaves, spec = pytree.flatten(args, is_tensor)
    return pytree.unflatten([x.clone() if is_tensor(x) else x for x in leaves], spec)


def _check(model, obj, args, check_inputs, tolerance, module, backend, advice) -> None:
    """The compiled object against the model on the example and check inputs, from the same
    RNG state; ``advice(case)`` says, after the comparison's message, what to try."""
    cases = [args] + [api._as_args(c) for c in (check_inputs or [])]
    for index, given in enumerate(cases):
        case = _fresh(given)
        label = (
            f"backend {backend!r} on the example inputs"
            if index == 0
            else f"backend {backend!r} on check input {index - 1}"
        )
        rng = torch.get_rng_state()
        with preserved(module), torch.no_grad():
            expected = model(*case)
        torch.set_rng_state(rng)
        with preserved(module), torch.no_grad():
            got = obj(*_fresh(given))
        try:
            compare_outputs(expected, got, tolerance, label)
        except TracingCheckError as exc:
            raise TracingCheckError(f"{exc}\n  {advice(case)}") from None


def _embed(
    program: Program,
    backend: str,
    compiler_args,
    min_size: int,
    subgraphs: list[Subgraph],
    coverage: Coverage,
) -> None:
    program.backend = {
        "version": META_VERSION,
        "name": backend,
        "compiler_args": list(compiler_args or []),
        "min_subgraph_size": min_size,
        "methods": {"forward": {"subgraphs": [s.to_json() for s in subgraphs]}},
        "coverage": coverage.to_json(),
    }


def _takes_whole_graph(
    impl: Backend, graph: Graph, coverage: Coverage, min_size: int, tensors: list
) -> bool:
    """Whether a ``whole_graph`` backend compiles the method as one graph.

    Where partitions would compile something, yes. Where every run is "too small" (a guard
    after each op: nn.TransformerEncoderLayer's fused path checks the dtype and the grad
    mode around each layer), only for CUDA graphs: a graph replay pays even for lone ops,
    which compiling alone does not fuse (on an H200 the 4-layer encoder ran at 251 µs
    replayed, as torch.compile's 253, against 544 on the runtime; compiled without CUDA
    graphs it ran slower than on the runtime, as torch.compile does). The CUDA graph case
    is decided on the whole graph's runs, where guards split nothing."""
    if not impl.whole_graph:
        return False
    if coverage.compiled:
        return True
    if not impl.records_cuda_graphs(tensors):
        return False
    eager = set(eager_nodes(graph, impl.supports, min_size))
    return any(i not in eager and not _is_shape(n) for i, n in enumerate(graph.nodes))


def _tensors(args, program: Program) -> list[torch.Tensor]:
    """The tensors a compiled call sees: its inputs and the program's state."""
    leaves = pytree.flatten(args, is_tensor)[0] + [e.tensor for e in program.state.values()]
    return [t for t in leaves if isinstance(t, torch.Tensor)]


def _whole_plan(impl: Backend, graph: Graph, min_size: int, workdir) -> MethodPlan:
    whole = WholePlan(
        compile=lambda gm: impl.compile_graph_module(gm, None, impl.args, workdir),
        eager_nodes=eager_nodes(graph, impl.supports, min_size),
    )
    return MethodPlan([], graph, whole=whole)


def _whole_coverage(coverage: Coverage, graph: Graph, plan: MethodPlan) -> Coverage:
    """Coverage of a whole-graph compile: one graph, every op but the eager ones."""
    ops = [i for i, n in enumerate(graph.nodes) if n.op not in ("prim.state", "prim.guard")]
    coverage.compiled = len(ops) - len(plan.whole.eager_nodes)
    coverage.subgraphs = [f"{coverage.backend}_graph"]
    return coverage


def _warm_up(impl: Backend, obj, args: tuple, module, timeout, verbose: bool) -> None:
    """The first call (where the compiler runs) on the example inputs, in a worker thread
    under ``timeout``, as partitions are compiled (see _compile_all) -- or in this thread
    when the backend keeps per-thread state (CUDA graphs), where no timeout can stop it."""
    failure: list[BaseException] = []
    here = impl.compiles_in_callers_thread(_tensors(args, obj.program))

    def work():
        start = time.perf_counter()
        try:
            # A backend that runs for inference (inductor without --autograd) is warmed
            # without autograd: a call with it runs the plain program (whole.py).
            inference = getattr(impl.args, "autograd", True) is False
            with preserved(module), torch.no_grad() if inference else contextlib.nullcontext():
                obj(*_fresh(args))
        except BaseException as exc:  # noqa: BLE001 - reported in the caller's thread
            failure.append(exc)
            return
        message = f"compiled {impl.name}_graph in {time.perf_counter() - start:.2f} s"
        log.info(message)
        if verbose:
            print(message)

    if here:
        if timeout is not None:
            log.warning(
                "compiler_timeout is not enforced: CUDA graphs are compiled in the calling "
                "thread (inductor keeps them per thread)"
            )
        work()
    else:
        _in_worker(work, impl.name, timeout)
    if failure:
        exc = failure[0]
        said = _fake_kernel_failure(exc, obj)
        if said is None:
            first = str(exc).strip().splitlines()[0][:500] if str(exc) else ""
            said = f"{type(exc).__name__}: {first}"
        error = BackendError(f"backend {impl.name!r} failed to compile the whole graph: {said}")
        raise error from exc


_FAKE_CALL = re.compile(
    r"failed to run FX node with fake tensors: call_\w+ <(?:built-in )?(?:method|function) "
    r"(\w+)[^>]*>.*?: got (\w+)\((['\"])(.*?)\3\)",
    re.S,
)


def _fake_kernel_failure(exc: BaseException, obj) -> str | None:
    """Where Dynamo could not run an op on fake tensors (torch's meta kernel refused what
    the eager kernel takes): the op, its line in the traced code and the kernel's words,
    in place of the OpError that blamed the call's inputs (prober24a F4); None otherwise."""
    seen, cause = set(), exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        found = _FAKE_CALL.search(str(cause))
        if found:
            op, kind, words = found.group(1), found.group(2), found.group(4)
            where = ""
            graph = obj.program.methods.get("forward")
            for node in graph.nodes if graph is not None else ():
                if node.op.rpartition(".")[2] == op and node.loc:
                    where = f" at {node.loc}"
                    break
            return (
                f"torch's fake (meta) kernel of {op}{where}, which the compiler runs to "
                f"capture the graph, refused it: {kind}: {words} -- the eager kernel ran it "
                "in the trace, so this is the compiler's limit, not the inputs'. Compile "
                "with backend='reference', or call the op on inputs its fake kernel takes"
            )
        cause = cause.__cause__ or cause.__context__
    return None


def _compile_whole(
    model, module, traced, impl, coverage, args, workdir, timeout, verbose, check, embed
):
    """tracebridge.compile for a ``whole_graph`` backend (whole.py): one compile of the
    method's GraphModule, Dynamo splitting it only around the ops the backend leaves out."""
    program = traced.program
    graph = program.methods["forward"]
    plan = _whole_plan(impl, graph, embed[1], workdir)
    coverage = _whole_coverage(coverage, graph, plan)
    coverage.too_small = small_runs(graph, impl.supports, embed[1])
    name = getattr(traced, "__name__", "forward")
    log.info("%s", coverage)
    if verbose:
        print(coverage)
    if workdir is not None:
        os.makedirs(workdir, exist_ok=True)
        with open(os.path.join(workdir, "partition.txt"), "w") as f:
            f.write(f"{coverage}\n\neager nodes: {plan.whole.eager_nodes}\n\n")
            f.write(graph_text(graph, name) + "\n")
    plans = {"forward": plan}
    if module is not None:
        obj = CompiledModule(program, plans, coverage, original=module)
    else:
        obj = CompiledFunction(program, plans, coverage, name=name)
    _warm_up(impl, obj, args, module, timeout, verbose)
    check_trace, check_inputs, tolerance = check
    if check_trace:
        _check(
            model,
            obj,
            args,
            check_inputs,
            tolerance,
            module,
            impl.name,
            lambda case: (
                f"the whole graph was compiled at once by {impl.name!r}; compile with a larger "
                "check_tolerance, another --mode, or backend='reference' to find the op that "
                "differs"
            ),
        )
    compiler_args, min_size = embed
    _embed(program, impl.name, compiler_args, min_size, [], coverage)
    program.backend["methods"]["forward"]["whole_graph"] = plan.whole.to_json()
    return obj


def _no_kept_generators(generators) -> None:
    if generators:
        raise TraceError(
            f"compile() does not take a program whose random ops draw from a generator the "
            f"code keeps ({', '.join(map(repr, generators))}): its compiled parts hold no "
            "generator. Run the traced module itself (tracebridge.trace), or draw the noise "
            "outside and pass it in as an input"
        )


def compile(
    model: Callable | nn.Module,
    example_inputs: Any,
    compiler_args: Sequence[str] | None = None,
    *,
    compiler_timeout: float | None = None,
    compiler_workdir: str | os.PathLike | None = None,
    check_trace: bool = True,
    check_inputs: list | None = None,
    check_tolerance: float | None = None,
    backend: str = "inductor",
    min_subgraph_size: int = 2,
    verbose: bool = False,
    strict: bool = True,
) -> CompiledFunction | CompiledModule | nn.Module:
    """Trace ``model`` on ``example_inputs``, compile the subgraphs ``backend`` supports,
    run the rest on the torch runtime, and return an object that runs, with ``.graph``
    (partitioned), ``.coverage`` and ``.save(path)``. The arguments mean what they mean for
    ``torch.neuron.trace``; a module in training mode is returned as it is, with a warning.

    Args:
        model: a function or ``nn.Module`` to trace and compile (as for :func:`trace`).
        example_inputs: the inputs to trace it on (as for :func:`trace`).
        compiler_args: a list of strings, parsed by the backend (docs/compile.md); an
            unknown argument is a ``BackendError`` that shows the backend's usage.
        compiler_timeout: seconds; compiling longer raises ``subprocess.TimeoutExpired``.
        compiler_workdir: a folder for the partition report, each partition's Python
            source and the compiler's own files.
        check_trace: check the trace before compiling (as for :func:`trace`).
        check_inputs: more inputs for that check (as for :func:`trace`).
        check_tolerance: the tolerance of that check (as for :func:`trace`).
        backend: the compiler: ``"inductor"`` (default) or ``"reference"``.
        min_subgraph_size: runs with fewer supported tensor ops stay on the runtime.
        verbose: print the coverage report before compiling and each partition's compile
            time.
        strict: as for :func:`trace`: ``False`` lets the model return mutable containers
            (dicts, lists).

    >>> import torch, tracebridge
    >>> from tracebridge.backends import compile
    >>> def foo(x, y):
    ...     return 2 * x + y
    >>> f = compile(foo, (torch.rand(3), torch.rand(3)), backend="reference")
    >>> f(torch.ones(3), torch.ones(3))
    tensor([3., 3., 3.])
    >>> print(f.coverage)
    reference: 2/2 ops supported (100%), 2 compiled in 1 subgraph(s)
    """
    module = _owner_module(model)
    if module is not None and module.training:
        warnings.warn(
            f"tracebridge.compile: {type(module).__name__} is in training mode, so it is "
            "returned as it is, uncompiled (compiled graphs are for inference: dropout and "
            "batch-norm statistics would be frozen in training form). Call model.eval() "
            "before compiling.",
            TracerWarning,
            stacklevel=2,
        )
        return model
    impl = backend_class(backend)(backend_class(backend).parse_args(compiler_args))
    impl.name = backend
    args = api._as_args(example_inputs)
    workdir = os.fspath(compiler_workdir) if compiler_workdir is not None else None
    _no_kept_generators(getattr(getattr(model, "program", None), "generators", None))

    traced = api.trace(
        model,
        args,
        check_trace=check_trace,
        check_inputs=check_inputs,
        check_tolerance=1e-5 if check_tolerance is None else check_tolerance,
        strict=strict,
    )
    if check_tolerance is None:
        check_tolerance = default_tolerance(args, traced)
    program = traced.program
    _no_kept_generators(program.generators)
    graph = program.methods["forward"]
    subgraphs, coverage = partition(graph, impl.supports, backend, min_subgraph_size)
    if _takes_whole_graph(impl, graph, coverage, min_subgraph_size, _tensors(args, program)):
        return _compile_whole(
            model,
            module,
            traced,
            impl,
            coverage,
            args,
            workdir,
            compiler_timeout,
            verbose,
            check=(check_trace, check_inputs, check_tolerance),
            embed=(compiler_args, min_subgraph_size),
        )
    plan = _plan(graph, subgraphs)
    name = getattr(traced, "__name__", "forward")
    log.info("%s", coverage)
    if verbose:
        print(coverage)
    if workdir is not None:
        _write_report(workdir, name, coverage, plan)

    plans = {"forward": plan}
    if module is not None:
        obj = CompiledModule(program, plans, coverage, original=module)
    else:
        obj = CompiledFunction(program, plans, coverage, name=name)
    plain = dict(plan.functions)
    examples = _record_inputs(obj, plan, args, module) if subgraphs else {}
    compiled = _compile_all(impl, plan, examples, workdir, compiler_timeout, verbose)
    obj._set_functions("forward", compiled)
    if check_trace and subgraphs:
        _check(
            model,
            obj,
            args,
            check_inputs,
            check_tolerance,
            module,
            backend,
            lambda case: (
                "the compiled subgraph that differs most: "
                f"{_culprit(obj, plan, plain, case, module)}; compile with a larger "
                "check_tolerance, another --mode, or min_subgraph_size large enough to leave "
                "it on the runtime"
            ),
        )
    _embed(program, backend, compiler_args, min_subgraph_size, subgraphs, coverage)
    return obj


def _add_coverage(total: Coverage, method: Coverage) -> None:
    total.total += method.total
    total.supported += method.supported
    for op, count in method.unsupported.items():
        total.unsupported[op] = total.unsupported.get(op, 0) + count


def _stored_whole_plan(path, impl: Backend, graph: Graph, entry, workdir) -> MethodPlan:
    """The plan of a method saved whole-graph compiled; its eager nodes checked."""
    where = os.fspath(path)
    nodes = entry.get("eager_nodes") if isinstance(entry, dict) else None
    if not isinstance(nodes, list) or not all(
        type(i) is int and 0 <= i < len(graph.nodes) for i in nodes
    ):
        raise ArtifactError(
            f"{where}: {META_KEY} whole_graph.eager_nodes must be a list of node indices of "
            "the method; the file is corrupt"
        )
    if not impl.whole_graph:
        raise BackendError(
            f"{where}: compiled whole-graph, but backend {impl.name!r} does not compile "
            "whole graphs; the file was made by another tracebridge version"
        )
    whole = WholePlan(
        compile=lambda gm: impl.compile_graph_module(gm, None, impl.args, workdir),
        eager_nodes=sorted(set(nodes) | set(eager_nodes(graph, impl.supports))),
    )
    return MethodPlan([], graph, whole=whole)


def load_compiled(
    path: str | os.PathLike,
    map_location: str | torch.device | None = None,
    compiler_workdir: str | os.PathLike | None = None,
) -> CompiledFunction | CompiledModule:
    """Load an artifact saved from :func:`compile`; each partition is recompiled by its
    backend, with the stored compiler arguments, at its first call.

    >>> import torch, tempfile, os
    >>> from tracebridge.backends import compile, load_compiled
    >>> f = compile(lambda x: (x * 2).relu(), torch.rand(3), backend="reference")
    >>> path = os.path.join(tempfile.mkdtemp(), "f_neuron.pt")
    >>> f.save(path)
    >>> load_compiled(path)(torch.tensor([-1.0, 2.0]))
    tensor([0., 4.])
    """
    program = artifact.read(path)
    meta = program.backend
    if not isinstance(meta, dict) or "name" not in meta:
        raise ArtifactError(
            f"{os.fspath(path)}: not saved by tracebridge.compile (no "
            f"{META_KEY}); load it with tracebridge.load"
        )
    if meta.get("version", 1) > META_VERSION:
        raise ArtifactError(
            f"{os.fspath(path)}: {META_KEY} version {meta['version']} is "
            f"newer than this tracebridge reads ({META_VERSION}); upgrade"
        )
    backend = meta["name"]
    cls = backend_class(backend)
    impl = cls(cls.parse_args(meta.get("compiler_args")))
    impl.name = backend
    workdir = os.fspath(compiler_workdir) if compiler_workdir is not None else None
    plans: dict[str, MethodPlan] = {}
    coverage = Coverage(backend)
    for method, entry in meta.get("methods", {}).items():
        if method not in program.methods:
            raise ArtifactError(
                f"{os.fspath(path)}: {META_KEY} names method {method!r}, "
                "which the program does not have"
            )
        graph = program.methods[method]
        if "whole_graph" in entry:
            plans[method] = _stored_whole_plan(path, impl, graph, entry["whole_graph"], workdir)
            _, method_coverage = partition(graph, impl.supports, backend, 1)
            _add_coverage(coverage, method_coverage)
            coverage.compiled += _whole_coverage(Coverage(backend), graph, plans[method]).compiled
            coverage.subgraphs.append(f"{backend}_graph")
            continue
        try:
            subgraphs = [
                boundary(graph, Subgraph(str(s["name"]), [int(i) for i in s["nodes"]]))
                for s in entry["subgraphs"]
            ]
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise ArtifactError(f"{os.fspath(path)}: {META_KEY} is malformed ({exc})") from None
        check_subgraphs(graph, subgraphs)
        for sub in subgraphs:
            for index in sub.nodes:
                if not impl.supports(graph.nodes[index]):
                    raise BackendError(
                        f"{os.fspath(path)}: {sub.name} holds node {index} "
                        f"({graph.nodes[index].op}), which backend {backend!r} does not "
                        "support here; the file was made by another tracebridge version"
                    )
        plan = _plan(graph, subgraphs)
        for sub in subgraphs:
            op = f"backend.{sub.name}"
            fn = plan.functions[op]
            plan.functions[op] = LazySubgraph(
                lambda fn=fn: impl.compile(fn, None, impl.args, workdir)
            )
        plans[method] = plan
        _, method_coverage = partition(graph, impl.supports, backend, 1)
        _add_coverage(coverage, method_coverage)
        coverage.compiled += sum(len(s.nodes) for s in subgraphs)
        coverage.subgraphs += [s.name for s in subgraphs]
    if program.kind == "function":
        if map_location is not None:
            for entry in program.state.values():
                entry.tensor = entry.tensor.to(map_location)
        return CompiledFunction(program, plans, coverage)
    module = CompiledModule(program, plans, coverage)
    if map_location is not None:
        module.to(map_location)
    return module
