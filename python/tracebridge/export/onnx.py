"""ONNX: a traced method through ``torch.onnx.export(..., dynamo=True)`` of its GraphModule.

Note: the path. ``to_graph_module`` (fx.py) gives the method as a GraphModule over the
traced tensors; ``torch.onnx.export`` runs ``torch.export`` on it with one dynamic
dimension per input symbol the trace left (``dynamic_shapes``) and translates the result
with onnxscript. The ONNX inputs are the flat input tensors (named after the traced
arguments, ``x``, ``tokens``), the outputs the flat output leaves (``output0``, ...), and
the symbolic dimensions are named after the trace's symbols (``s0``: the batch), so a
reader of the ONNX file sees the same sizes as ``tracebridge inspect``. A guard on sizes is
a range or an assertion of the exported program (fx.py's Note); a guard on tensor data
cannot be exported. ``check`` runs the file with ONNX Runtime on the example inputs and
compares it with the trace.

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

    A dimension stays symbolic in the ONNX model even where the weights fix it (the
    features of a Linear's input, ``s1`` below): export derives such a constraint from the
    example as readily as a spurious one (a convolution's 1x1 output pins its input size
    through export's size-1 rule), so tracebridge keeps the trace's symbols and ONNX
    Runtime checks the sizes when it runs.

    >>> import torch, tracebridge, tempfile, os
    >>> traced = tracebridge.trace(torch.nn.Linear(3, 2), torch.rand(4, 3))
    >>> path = tracebridge.export_onnx(traced, os.path.join(tempfile.mkdtemp(), "m.onnx"))
    >>> import onnx; [d.dim_param or d.dim_value for d in
    ...     onnx.load(path).graph.input[0].type.tensor_type.shape.dim]
    ['s0', 's1']
    """
    require(NEEDED + (("onnxruntime",) if check else ()))
    obj = _loaded(obj_or_path)
    source, resolved, _, _ = bridge._resolve(obj, method)
    graph = source.methods[resolved]
    _refuse_state_writes(graph, source.methods, resolved)
    gm = bridge.to_graph_module(obj, method)
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
    guards: list = []
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
        first = str(exc).strip().splitlines()[0][:400] if str(exc).strip() else ""
        raise OnnxExportError(
            f"torch.onnx.export refused method {meta.method!r}: {type(exc).__name__}: {first}; "
            "ops without an ONNX form, or a guard on tensor data (if x.sum() > 0), cannot be "
            "exported (docs/deploy.md)"
        ) from exc
    finally:
        bridge.EXPORTED_GUARDS.reset(token)
    model = program.model_proto
    _name_dimensions(model, meta)
    _fix_pinned_dimensions(model, program.exported_program, guards)
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
        check_onnx(out, flat, expected, tolerance, values=not random)
    return out


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
    exported as if it did not, every call of the file using the values saved in it."""
    written = bridge.state_written(graph, methods)
    if written:
        shown = ", ".join(written[:6]) + (", ..." if len(written) > 6 else "")
        raise OnnxExportError(
            f"export_onnx: method {name!r} updates state in place ({shown}): BatchNorm's "
            "running statistics in training mode, or a buffer the model writes. An ONNX "
            "model has no state, so ONNX Runtime would answer every call with the values "
            "saved in the file, not the updated ones. Trace the module in eval mode "
            "(model.eval() before tracing, or trace with respect_mode=True and call "
            ".eval()), or keep the update out of the traced method"
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


def _fix_pinned_dimensions(model, exported, guards: list) -> None:
    """Make static every input dimension that one of the trace's guards decides.

    A guard on a size (an unrolled loop over ``x.shape[1]``, traced at 4; a branch on
    ``x.shape[1] > 4``) is ``torch._check`` under export (fx.py), an assertion that an ONNX
    model cannot carry: the file would keep the dimension dynamic and ONNX Runtime would
    answer a call that breaks the guard silently wrong. So each input dimension a guard
    reads becomes a fixed size in the file, the size the trace was made with, which ONNX
    Runtime checks (``Got invalid dimensions for input``). A guard ``size == value`` fixes
    its size to that value and says nothing; a guard ONNX cannot state (``s1 > 4``,
    ``s1 // 4 == 2``) fixes the sizes it reads and a warning says which and why, since
    the trace itself accepts other sizes there. A guard that holds for every size export
    serves anyway (``s > 1`` under its size-1 rule) fixes nothing
    (``_holds_for_every_exported_size``). (Export's own constraints, such as its size-1
    rule, are left as they were: see ``export_onnx``.)"""
    if not guards:
        return
    pinned: dict = {}
    narrowed: list[str] = []
    size_one: dict = {}  # symbol -> a guard that size 1 of it breaks, which the file drops
    for value, expect, line in guards:
        expr = value.node.expr
        if isinstance(value, torch.SymInt) and expr.is_Symbol and not isinstance(expect, bool):
            pinned[expr] = int(expect)
            continue
        known = value.node.shape_env.var_to_val
        if _holds_for_every_exported_size(expr, expect, known):
            for symbol in _broken_at_size_one(expr, expect):
                size_one.setdefault(symbol, line.strip())
            continue
        for symbol in expr.free_symbols:
            if symbol in known:
                pinned.setdefault(symbol, int(known[symbol]))
        narrowed.append(f"{expr} == {expect} ({line.strip()})")
    user = set(exported.graph_signature.user_inputs)
    placeholders = [n for n in exported.graph.nodes if n.op == "placeholder" and n.name in user]
    fixed = []
    for value, node in zip(model.graph.input, placeholders):
        fake = node.meta.get("val")
        if not isinstance(fake, torch.Tensor):
            continue
        for index, (dim, size) in enumerate(zip(value.type.tensor_type.shape.dim, fake.shape)):
            if isinstance(size, torch.SymInt) and size.node.expr in pinned:
                dim.ClearField("dim_param")
                dim.dim_value = pinned[size.node.expr]
                fixed.append(f"{value.name}[{index}] = {dim.dim_value}")
    _warn_of_size_one(model, placeholders, size_one)
    if narrowed:
        warnings.warn(
            "an ONNX model cannot check these guards of the trace on sizes, so the sizes they "
            f"read are fixed in the file ({', '.join(fixed) or 'none of its inputs'}), and "
            "ONNX Runtime refuses other sizes where the trace would take some: "
            f"{'; '.join(narrowed)}",
            stacklevel=3,
        )


def _broken_at_size_one(expr, expect) -> list:
    """The symbols of a guard that holds for every exported size (each at least 2) where
    it may not hold with that symbol at 1 (``s > 1``): ONNX Runtime serves size 1 there
    with the exported graph, which the trace does not take."""
    from torch.utils._sympy.numbers import int_oo
    from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy

    broken = []
    for symbol in expr.free_symbols:
        ranges = {s: ValueRanges(2, int_oo) for s in expr.free_symbols}
        ranges[symbol] = ValueRanges(1, 1)
        try:
            bounds = bound_sympy(expr, ranges)
        except Exception:  # an expression sympy cannot bound: say so
            broken.append(symbol)
            continue
        if not (bounds.is_singleton() and bool(bounds.lower) is expect):
            broken.append(symbol)
    return broken


def _warn_of_size_one(model, placeholders, size_one: dict) -> None:
    """Say which ONNX input dimensions answer size 1 wrongly: an ONNX model carries no
    assertion, and export serves each dynamic size from 2 up (its size-1 rule), so a
    guard of the trace that only size 1 breaks (``if x.size(1) > 1:``) is dropped."""
    if not size_one:
        return
    dims = []
    for value, node in zip(model.graph.input, placeholders):
        fake = node.meta.get("val")
        if not isinstance(fake, torch.Tensor):
            continue
        for index, size in enumerate(fake.shape):
            if isinstance(size, torch.SymInt) and size.node.expr in size_one:
                dims.append(f"{value.name}[{index}] (the guard at `{size_one[size.node.expr]}`)")
    if dims:
        warnings.warn(
            "the ONNX file serves these dimensions from size 2 up, as torch.export makes "
            "them, and ONNX Runtime cannot refuse size 1 there: at size 1 the trace takes "
            f"another path than the file does, so its answer would be wrong: {'; '.join(dims)}. "
            "Call the trace itself for size 1, or export a second file from an example of "
            "size 1 there (example_inputs=...), which fixes that size",
            stacklevel=3,
        )


def _holds_for_every_exported_size(expr, expect, known) -> bool:
    """Whether a guard holds for every size the exported program takes anyway: export
    makes each dynamic input size at least 2 (its size-1 rule, left as it is, see
    ``export_onnx``), so a guard that only says that (``s > 1``, transformers' ``is_causal =
    q_length > 1 and ...``), or says nothing (``(s + 0) - s > 0`` is False), narrows
    nothing and fixes no size. Ranges are taken from that rule, not from the shape
    environment, which the guard's own ``torch._check`` has already narrowed."""
    from torch.utils._sympy.numbers import int_oo
    from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy

    if not isinstance(expect, bool) or not all(s in known for s in expr.free_symbols):
        return False
    try:
        bounds = bound_sympy(expr, {s: ValueRanges(2, int_oo) for s in expr.free_symbols})
    except Exception:  # an expression sympy cannot bound: keep the guard
        return False
    return bounds.is_singleton() and bool(bounds.lower) is expect


def check_onnx(
    path, inputs: list[torch.Tensor], expected: list, tolerance: float, values: bool = True
) -> None:
    """Run the ONNX file with ONNX Runtime (CPU) and compare with ``expected`` (their
    shapes and dtypes only, without ``values``)."""
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
    for index, (g, want) in enumerate(zip(got, expected)):
        want = want.detach().cpu() if isinstance(want, torch.Tensor) else torch.tensor(want)
        g = torch.from_numpy(g)
        if not values:
            if g.shape != want.shape or g.dtype != want.dtype:
                raise OnnxExportError(
                    f"{os.fspath(path)}: ONNX Runtime's output{index} is {g.dtype} "
                    f"{list(g.shape)} where the trace's is {want.dtype} {list(want.shape)}"
                )
            continue
        if g.shape != want.shape or not torch.allclose(
            g.double(), want.double(), rtol=tolerance, atol=tolerance, equal_nan=True
        ):
            error = (
                (g.double() - want.double()).abs().max().item() if g.shape == want.shape else None
            )
            raise OnnxExportError(
                f"{os.fspath(path)}: ONNX Runtime's output{index} differs from the trace's "
                f"(shape {list(g.shape)} vs {list(want.shape)}, max absolute error {error}, "
                f"tolerance {tolerance:g}); raise tolerance= if the difference is expected"
            )


def _numpy(t: torch.Tensor):
    """A tensor as numpy for ONNX Runtime (numpy has no bfloat16: ONNX Runtime then gets
    the float32 values and refuses them by dtype, which the caller reports)."""
    t = t.detach().cpu()
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()
