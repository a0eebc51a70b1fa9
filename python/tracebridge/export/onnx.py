"""ONNX: a traced method through ``torch.onnx.export(..., dynamo=True)`` of its GraphModule.

Note: the path. ``to_graph_module`` (fx.py) gives the method as a GraphModule over the
traced tensors; ``torch.onnx.export`` runs ``torch.export`` on it with one dynamic
dimension per input symbol the trace left (``dynamic_shapes``) and translates the result
with onnxscript. The ONNX inputs are the flat input tensors (named after the traced
arguments, ``x``, ``tokens``), the outputs the flat output leaves (``output0``, ...), and
the symbolic dimensions are named after the trace's symbols (``s0``: the batch), so a
reader of the ONNX file sees the same sizes as ``tracebridge inspect``. A guard on sizes is
a range or an assertion of the exported program (fx.py's Note); a guard on tensor data
cannot be exported. An input size that export fixed, by a guard or by an op that needs
its value, is fixed in the file too (onnx_sizes.py). ``check`` runs the file with ONNX
Runtime on the example inputs, and at grown sizes the trace serves, and compares it with
the trace.

``onnx``, ``onnxscript`` and ``onnxruntime`` are an optional extra of the package
(``pip install tracebridge[onnx]``), pinned in requirements.txt.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import re
import warnings
from pathlib import Path

import torch

from ..errors import TraceError
from ..ir import ops
from . import fx as bridge
from . import onnx_sizes as sizes

NEEDED = ("onnx", "onnxscript")


class OnnxExportError(TraceError):
    """The ONNX exporter is missing, or refused the traced method, or its result differs."""


def require(modules=NEEDED) -> None:
    """Raise a clear error when an ONNX package is not installed."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise OnnxExportError(
            f"ONNX export needs the Python package(s) {', '.join(missing)}, which are not "
            "installed; install them with `pip install 'tracebridge[onnx]'` (or the pins in "
            "requirements.txt), or pass check=False to skip checking with onnxruntime"
            if missing == ["onnxruntime"]
            else f"ONNX export needs the Python package(s) {', '.join(missing)}, which are "
            "not installed; install them with `pip install 'tracebridge[onnx]'` (or the pins "
            "in requirements.txt)"
        )


def _unique_names(names: list[str], prefix: str) -> list[str]:
    out: list[str] = []
    for index, name in enumerate(names):
        clean = re.sub(r"\W", "_", name or "") or f"{prefix}{index}"
        while clean in out:
            clean = f"{clean}_{index}"
        out.append(clean)
    return out


def _loaded(obj_or_path):
    if isinstance(obj_or_path, (str, os.PathLike)):
        from ..api import load

        return load(obj_or_path)
    return obj_or_path


def export_onnx(
    obj_or_path,
    out: str | os.PathLike,
    *,
    method: str = "forward",
    example_inputs: tuple | None = None,
    opset_version: int | None = None,
    check: bool = True,
    tolerance: float | None = None,
) -> Path:
    """Write a traced method as an ONNX model to ``out``; return its path.

    ``obj_or_path`` is a traced object (``tracebridge.trace``/``load``) or an artifact's
    path. ``example_inputs`` (the traced call's own arguments) are what the exporter runs
    on; by default, tensors of the sizes and dtypes the trace was made with (random floats,
    zero integers). Every dimension the trace kept symbolic is a named dynamic dimension of
    the ONNX model. With ``check``, ONNX Runtime runs the file on the example inputs and
    its outputs must match the trace's within ``tolerance`` (absolute and relative; by
    default 1e-4, 1e-2 for float16 and 5e-2 for bfloat16 models: :data:`TOLERANCES`). A
    method that draws random numbers (dropout in training, ``randn_like``) is checked for
    its outputs' shapes and dtypes only, with a warning: ONNX Runtime draws its own.

    Refused with :class:`OnnxExportError`, before anything is written: a method that
    updates buffers in place (BatchNorm's running statistics in training mode, a counter),
    since an ONNX model has no state and would run every call on the values saved in it.
    ``opset_version`` is the ONNX op-set the file targets (by default the exporter's own).

    A dimension that ``torch.export`` made static (the features of a Linear's input, ``3``
    below, which the weight fixes; ``math.sqrt(q.size(-1))``, which needs the value) is
    a fixed size in the file, so ONNX Runtime refuses other sizes rather than answering
    them with the example's number (onnx_sizes.py: where the trace serves other sizes
    there, a warning says so). The check also runs the file at grown sizes of its dynamic
    dimensions that the trace serves, where a size fixed unseen would answer wrongly.

    >>> import torch, tracebridge, tempfile, os
    >>> traced = tracebridge.trace(torch.nn.Linear(3, 2), torch.rand(4, 3))
    >>> path = tracebridge.export_onnx(traced, os.path.join(tempfile.mkdtemp(), "m.onnx"))
    >>> import onnx; [d.dim_param or d.dim_value for d in
    ...     onnx.load(path).graph.input[0].type.tensor_type.shape.dim]
    ['s0', 3]
    """
    require(NEEDED + (("onnxruntime",) if check else ()))
    obj = _loaded(obj_or_path)
    source, resolved, _, _ = bridge._resolve(obj, method)
    graph = source.methods[resolved]
    _refuse_state_writes(graph, source.methods, resolved)
    gm = bridge.to_graph_module(obj, method, flat=True)  # export takes the flat inputs
    _zero_rows_without_keys(gm)
    meta = bridge.info(gm)
    if example_inputs is None:
        flat = list(bridge.example_inputs(gm))
    else:
        args = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
        flat = bridge.flatten_inputs(gm, *args)
    n_outputs = len(gm.graph.find_nodes(op="output")[0].args[0])
    input_names = _unique_names(meta.input_names, "input")
    output_names = [f"output{i}" for i in range(n_outputs)]
    guards = sizes.GuardLog()
    token = bridge.EXPORTED_GUARDS.set(guards)
    try:
        with torch.no_grad(), _quiet():
            program = torch.onnx.export(
                gm,
                tuple(flat),
                dynamic_shapes=bridge.dynamic_shapes(gm),
                input_names=input_names,
                output_names=output_names,
                opset_version=opset_version,
                dynamo=True,
                verbose=False,
            )
    except Exception as exc:  # the exporter's errors are long: the first line, and the cause
        raise OnnxExportError(
            f"torch.onnx.export refused method {meta.method!r}: {_exporter_error(exc)}; "
            "ops without an ONNX form (or that the exporter cannot translate on a dynamic "
            "size: chunk or split of one), or a guard on tensor data (if x.sum() > 0), "
            "cannot be exported (docs/deploy.md)"
        ) from exc
    finally:
        bridge.EXPORTED_GUARDS.reset(token)
    model = program.model_proto
    _name_dimensions(model, meta)
    exporter_static = sizes.exporter_static_dimensions(model, meta)
    named = sizes.fix_guarded_dimensions(model, program.exported_program, guards)
    sizes.fix_static_dimensions(model, program.exported_program, meta, gm, flat, exporter_static)
    if not check:
        sizes.warn_of_small_sizes(model, meta, gm, flat, guards, named)
    out = Path(out)
    import onnx

    onnx.save(model, os.fspath(out))
    if check:
        with torch.no_grad():
            # on clones: a method that writes its input in place must not change what
            # ONNX Runtime is then given
            expected = [t for t in gm(*[x.clone() for x in flat])]
        random = _random_ops(graph)
        if random:
            warnings.warn(
                f"export_onnx: method {meta.method!r} draws random numbers "
                f"({', '.join(random)}); ONNX Runtime draws its own, so only the outputs' "
                "shapes and dtypes were checked",
                stacklevel=2,
            )
        if tolerance is None:
            tolerance = default_tolerance(flat, source)
        session = check_onnx(out, flat, expected, tolerance, values=not random)
        for inputs, want in sizes.grown_calls_to_check(model, meta, gm, flat):
            _check_grown(session, out, inputs, want, tolerance, values=not random)

        def run(inputs):
            feeds = {i.name: _numpy(t) for i, t in zip(session.get_inputs(), inputs)}
            return session.run(None, feeds)

        sizes.warn_of_small_sizes(model, meta, gm, flat, guards, named, run)
    return out


def _check_grown(session, path, inputs: list, expected: list, tolerance, values: bool) -> None:
    """The file at sizes it declares dynamic and the trace serves, other than the
    example's: a size the export fixed unseen answers wrongly here (onnx_sizes.py)."""
    shown = ", ".join(str(list(t.shape)) for t in inputs)
    try:
        got = session.run(None, {i.name: _numpy(t) for i, t in zip(session.get_inputs(), inputs)})
    except Exception as exc:  # a refusal, not a wrong answer: say so and keep the file
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
        warnings.warn(
            f"{os.fspath(path)}: ONNX Runtime refuses inputs of shapes {shown}, which the "
            f"trace serves and the file declares dynamic: {type(exc).__name__}: {first}",
            stacklevel=3,
        )
        return
    _compare(path, got, expected, tolerance, values, f" at input shapes {shown}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:300] if text else ''}"


def _exporter_error(exc: BaseException) -> str:
    """The exporter's error, with the root of its chain where that names more: a pass of
    onnxscript wraps the op that failed (``node_split (::SplitToSequence)``) in two or
    three ``PassError: An error occurred when running '<... object at 0x...>'``."""
    chain = [exc]
    while (cause := chain[-1].__cause__ or chain[-1].__context__) is not None and len(chain) < 20:
        chain.append(cause)
    shown = _first_line(exc)
    named = [e for e in chain[1:] if "An error occurred" not in str(e)]
    if named:
        shown += " (from " + "; ".join(_first_line(e) for e in named[-2:]) + ")"
    return shown


# The check's default tolerance by the least precise floating dtype of the inputs and the
# state (ONNX Runtime's kernels are not PyTorch's: a float16 Gemm rounds otherwise).
TOLERANCES = {torch.float16: 1e-2, torch.bfloat16: 5e-2}
DEFAULT_TOLERANCE = 1e-4


def default_tolerance(inputs: list, program) -> float:
    """The check's tolerance for these inputs and ``program``'s state."""
    dtypes = {t.dtype for t in inputs if isinstance(t, torch.Tensor)}
    dtypes |= {e.tensor.dtype for e in program.state.values() if e.tensor is not None}
    return max([TOLERANCES.get(d, DEFAULT_TOLERANCE) for d in dtypes], default=DEFAULT_TOLERANCE)


def _refuse_state_writes(graph, methods: dict, name: str) -> None:
    """An ONNX model has no state: a method that updates buffers in place would be
    exported as if it did not, every call of the file using the values saved in it. The
    refusal names each write's line; only BatchNorm-style statistics, which a training
    graph updates, are advised to be traced in eval mode (a counter written in eval mode
    is not helped by that: prober21d F4)."""
    from ..check.state_writes import writes_by_node

    writes: dict = {}  # (loc, statistics?) -> state names, in order
    statistics_owners: set[str] = set()
    for index, roots in writes_by_node(graph, methods):
        node = graph.nodes[index]
        if not bridge._writes_statistics(node):
            continue
        states = sorted({where for kind, where in roots if kind == "state"})
        is_statistics = node.op in bridge._STATISTICS_FLAG
        if is_statistics:
            statistics_owners |= {state.rpartition(".")[0] for state in states}
        for state in states:
            writes.setdefault((node.loc, is_statistics), {}).setdefault(state, None)
    statistics: list[str] = []
    other: list[str] = []
    for (loc, is_statistics), states in writes.items():
        # BatchNorm's num_batches_tracked is an add_ of the module's own, beside its
        # running statistics: a training graph's update as well
        owned = all(
            state.rpartition(".")[2] == "num_batches_tracked"
            and state.rpartition(".")[0] in statistics_owners
            for state in states
        )
        line = (graph.sources.get(loc) or "").strip() if loc else ""
        at = (f" at {loc}" + (f" (`{line}`)" if line else "")) if loc else ""
        (statistics if is_statistics or owned else other).append(f"{', '.join(states)}{at}")
    if not statistics and not other:
        return
    listed = statistics + other
    shown = "; ".join(listed[:6]) + ("; ..." if len(listed) > 6 else "")
    if other:
        advice = (
            "ONNX cannot hold such an update: keep it out of the traced method, or serve "
            "the trace (or its GraphModule, to_graph_module), which updates the buffers"
            + (
                "; BatchNorm's running statistics are written only in training mode: trace "
                "the module in eval mode (model.eval() before tracing)"
                if statistics
                else ""
            )
        )
    else:
        advice = (
            "these are BatchNorm's running statistics, which a training graph updates: "
            "trace the module in eval mode (model.eval() before tracing, or trace with "
            "respect_mode=True and call .eval()), or keep the update out of the traced "
            "method"
        )
    raise OnnxExportError(
        f"export_onnx: method {name!r} updates state in place: {shown}. An ONNX model has "
        "no state, so ONNX Runtime would answer every call with the values saved in the "
        f"file, not the updated ones. {advice[0].upper()}{advice[1:]}"
    )


def _random_ops(graph) -> list[str]:
    """The ops of ``graph`` that draw random numbers (dropout with a literal
    ``train=False`` draws none)."""
    found = []
    for node in graph.nodes:
        if not ops.draws_random(node):
            continue
        train = node.kwargs.get("train", node.args[2] if len(node.args) > 2 else True)
        if node.op in ("dropout", "feature_dropout", "alpha_dropout") and train is False:
            continue
        if node.op not in found:
            found.append(node.op)
    return found


def _attention_output_where_keys_allowed(out: torch.Tensor, mask) -> torch.Tensor:
    """PyTorch's attention gives zeros for a query whose boolean mask allows no key;
    ``torch.onnx.export`` writes ``Where(mask, 0, min) + Softmax``, which gives that query
    the mean of the values instead (ModernBERT's padded local windows: docs/zoo.md). Stated
    explicitly, the zeros survive the translation; in eager this changes nothing."""
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        return out
    return torch.where(mask.any(-1, keepdim=True), out, torch.zeros((), dtype=out.dtype))


def _zero_rows_without_keys(gm: torch.fx.GraphModule) -> None:
    """After each ``scaled_dot_product_attention`` that takes a mask, the rows the mask
    leaves without a key are set to zeros as eager computes them (see above). The dtype of
    the mask is known only when export runs the graph, so the helper decides there."""
    attention = torch.nn.functional.scaled_dot_product_attention
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not attention:
            continue
        mask = node.kwargs.get("attn_mask", node.args[3] if len(node.args) > 3 else None)
        if mask is None:
            continue
        with gm.graph.inserting_after(node):
            fixed = gm.graph.call_function(_attention_output_where_keys_allowed, (node, mask))
        users = [user for user in node.users if user is not fixed]
        for user in users:
            user.replace_input_with(node, fixed)
    gm.recompile()


@contextlib.contextmanager
def _quiet():
    """The exporter logs what it skips (``torchvision is not installed``) and warns about
    its internals; a user of export_onnx gets a result or an OnnxExportError."""
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def _name_dimensions(model, meta: bridge.BridgeInfo) -> None:
    """Name the model's symbolic dimensions after the trace's symbols: export names them
    ``s77``, ``s27`` (its own numbering); each input dimension the trace called ``s0`` is
    renamed ``s0`` everywhere it appears (outputs and intermediate shapes too)."""
    rename: dict[str, str] = {}
    for value, shape in zip(model.graph.input, meta.input_shapes):
        for dim, symbol in zip(value.type.tensor_type.shape.dim, shape):
            if dim.dim_param and isinstance(symbol, str):
                rename.setdefault(dim.dim_param, symbol)
    if not rename:
        return
    # Two passes through placeholders, so that renaming s1 -> s0 and s0 -> s1 cannot collide.
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, rename)) + r")\b")
    marked = {old: f"\0{index}\0" for index, old in enumerate(rename)}
    final = {marked[old]: new for old, new in rename.items()}
    values = [*model.graph.input, *model.graph.output, *model.graph.value_info]
    for value in values:
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param:
                text = pattern.sub(lambda m: marked[m.group(1)], dim.dim_param)
                dim.dim_param = re.sub("\0\\d+\0", lambda m: final[m.group(0)], text)


def check_onnx(
    path, inputs: list[torch.Tensor], expected: list, tolerance: float, values: bool = True
):
    """Run the ONNX file with ONNX Runtime (CPU) and compare with ``expected`` (their
    shapes and dtypes only, without ``values``); return the ONNX Runtime session."""
    import onnxruntime

    try:
        session = onnxruntime.InferenceSession(os.fspath(path), providers=["CPUExecutionProvider"])
        feeds = {i.name: _numpy(t) for i, t in zip(session.get_inputs(), inputs)}
        got = session.run(None, feeds)
    except Exception as exc:  # ONNX Runtime's own errors: no kernel for a dtype, ...
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
        raise OnnxExportError(
            f"{os.fspath(path)}: the file was written, but ONNX Runtime cannot run it: "
            f"{type(exc).__name__}: {first}. ONNX Runtime's CPU provider has no kernel for "
            "many ops in bfloat16 and some in float64: export a float32 copy "
            "(traced.float() before export), or pass check=False to keep the file for a "
            "runtime that has them"
        ) from exc
    _compare(path, got, expected, tolerance, values, "")
    return session


def _compare(path, got: list, expected: list, tolerance, values: bool, where: str) -> None:
    """Raise OnnxExportError where ONNX Runtime's outputs differ from the trace's: by
    shape (which no tolerance explains: a size the file computes otherwise), by dtype, or
    by value beyond ``tolerance``."""
    for index, (g, want) in enumerate(zip(got, expected)):
        want = want.detach().cpu() if isinstance(want, torch.Tensor) else torch.tensor(want)
        g = torch.from_numpy(g)
        if g.shape != want.shape:
            raise OnnxExportError(
                f"{os.fspath(path)}: ONNX Runtime's output{index}{where} has shape "
                f"{list(g.shape)} where the trace's has {list(want.shape)}: the file computes "
                "a size otherwise than the trace (a size torch.export or the ONNX translation "
                "fixed, or an op translated wrongly), which no tolerance explains; call the "
                "trace for these sizes, or export from an example of the sizes you serve"
            )
        if not values:
            if g.dtype != want.dtype:
                raise OnnxExportError(
                    f"{os.fspath(path)}: ONNX Runtime's output{index}{where} is {g.dtype} "
                    f"where the trace's is {want.dtype}"
                )
            continue
        if not torch.allclose(
            g.double(), want.double(), rtol=tolerance, atol=tolerance, equal_nan=True
        ):
            error = (g.double() - want.double()).abs().max().item()
            hint = (
                "raise tolerance= if the difference is expected"
                if not where
                else "the example's sizes agree, so the file fixed a size-dependent value "
                "(a size torch.export made a constant) that it declares dynamic; export from "
                "an example of the sizes you serve, or call the trace for these"
            )
            raise OnnxExportError(
                f"{os.fspath(path)}: ONNX Runtime's output{index}{where} differs from the "
                f"trace's (max absolute error {error}, tolerance {tolerance:g}); {hint}"
            )


def _numpy(t: torch.Tensor):
    """A tensor as numpy for ONNX Runtime (numpy has no bfloat16: ONNX Runtime then gets
    the float32 values and refuses them by dtype, which the caller reports)."""
    t = t.detach().cpu()
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()
