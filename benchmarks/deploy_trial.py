"""An adversarial trial of every deployment path: each case x each path against eager.

Paths (docs/deploy.md, docs/compile.md, docs/aot.md):
  trace    tracebridge.trace and its runtime (the baseline every other path starts from)
  fx       tracebridge.to_graph_module, run eagerly (must be bit for bit the trace's)
  loaded   save -> load -> to_graph_module (bit for bit)
  export   torch.export of the GraphModule (dynamic dims from the trace), run as a module
  compile  tracebridge.compile (inductor, whole graph; the documented default tolerance)
  onnx     tracebridge.export_onnx, run by ONNX Runtime (tolerance 1e-4)
  aot      save_compiled, then load_compiled(trust_compiled_code=True) in a FRESH process
           (timed; must not import inductor or Dynamo, i.e. must not recompile)

Each case is traced on its first input set and called on every set (other batch sizes and
lengths, other branches). For every call, the path's result is compared with eager PyTorch
on a fresh copy of the model (outputs and, for models that mutate buffers, the buffers).
A call may instead raise: a tracebridge error (TraceError and its subclasses, BackendError,
OnnxExportError) is a clear refusal; any other exception is recorded as an unclear error.

    PYTHONPATH=python .venv/bin/python benchmarks/deploy_trial.py --set hand
    PYTHONPATH=python /work/venvs/zoo/bin/python benchmarks/deploy_trial.py --set zoo \
        --paths trace fx export onnx compile

Verdicts: ``right`` (bit for bit where the path promises it, else within its tolerance),
``tol`` (a path that promises bits, within 1e-5 but not bit for bit), ``refused`` (a clear
error, before any result), ``refused?`` (an error that is not tracebridge's: judge its
message), ``WRONG`` (a result that differs from eager: silently wrong), ``-`` (not run).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
PATHS = ("trace", "fx", "loaded", "export", "compile", "onnx", "aot")
EXACT = {"trace", "fx", "loaded"}
TOLERANCE = {"export": 1e-5, "onnx": 1e-4}


class NotRunError(Exception):
    """The path has no way to take this case (not a refusal by tracebridge)."""


@dataclass
class Spec:
    """One case: ``build()`` -> a fresh model (or function); the input sets (the first is
    traced); how to trace; what it is."""

    name: str
    kind: str
    build: Callable[[], object]
    inputs: list[tuple]
    trace_kw: dict = field(default_factory=dict)
    method: str = "forward"  # the method compared (trace_module cases)
    methods: dict | None = None  # trace_module: method -> example args
    stateful: bool = False  # compare the module's buffers after every call too
    random: bool = False  # outputs are random: compare shapes and statistics only
    paths: tuple = PATHS[:-1]  # AOT (a minute of compiling each) where a case asks for it
    mode: str = "eval"  # "train": the model is traced and run in training mode
    note: str = ""


def invoke(fn, inputs):
    """Call ``fn`` with one input set: a tuple of positional arguments, or a dict of
    keyword arguments."""
    return fn(**inputs) if isinstance(inputs, dict) else fn(*inputs)


def as_call(inputs) -> tuple[tuple, dict]:
    return ((), inputs) if isinstance(inputs, dict) else (inputs, {})


# --- comparison -------------------------------------------------------------------------


def leaves(x) -> list:
    """The tensors of ``x``, numbers as 0-d tensors."""
    from tracebridge.ir import pytree

    flat, _ = pytree.flatten(x, lambda v: isinstance(v, torch.Tensor))
    return [torch.tensor(v) if isinstance(v, (int, float, bool)) else v for v in flat]


def structure(x):
    """The nesting of ``x`` without its tensors (to compare containers and scalars)."""
    if isinstance(x, (int, float, bool)) and not isinstance(x, torch.Tensor):
        x = torch.tensor(x)  # ONNX gives a number output as a 0-d tensor
    if isinstance(x, torch.Tensor):
        return ("T", x.dtype, tuple(x.shape))
    if isinstance(x, dict):
        return {k: structure(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, [structure(v) for v in x])
    if hasattr(x, "__dataclass_fields__"):
        return (type(x).__name__, {k: structure(getattr(x, k)) for k in x.__dataclass_fields__})
    return x


def difference(expected, got, random: bool = False) -> float:
    """The largest absolute difference (inf for another structure, dtype or shape)."""
    if structure(expected) != structure(got):
        a, b = leaves(expected), leaves(got)
        if not random or len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b)):
            return float("inf")
    worst = 0.0
    for x, y in zip(leaves(expected), leaves(got)):
        if x.shape != y.shape or x.dtype != y.dtype:
            return float("inf")
        if random:
            continue
        if x.is_floating_point() or x.is_complex():
            if not torch.equal(x.isnan(), y.isnan()):
                return float("inf")
            d = (x.detach().double() - y.detach().double()).abs()
            d = d[~x.isnan()] if d.numel() else d
            worst = max(worst, d.max().item() if d.numel() else 0.0)
        elif not torch.equal(x, y):
            return float("inf")
    return worst


def close(expected, got, tol: float) -> bool:
    """allclose(rtol=tol, atol=tol) on every leaf; exact when tol is 0."""
    for x, y in zip(leaves(expected), leaves(got)):
        if tol == 0:
            if not (
                torch.equal(x, y)
                or (
                    torch.equal(x.isnan(), y.isnan())
                    and torch.equal(x.nan_to_num(), y.nan_to_num())
                )
            ):
                return False
        elif x.is_floating_point():
            if not torch.allclose(x.double(), y.double(), rtol=tol, atol=tol, equal_nan=True):
                return False
        elif not torch.equal(x, y):
            return False
    return True


def buffers(model) -> dict:
    if isinstance(model, nn.Module):
        return {k: v.detach().clone() for k, v in model.named_buffers()}
    return {}


def is_clear(exc: BaseException) -> bool:
    from tracebridge.errors import TraceError

    try:
        from tracebridge.backends import BackendError
    except ImportError:  # pragma: no cover
        BackendError = TraceError
    return isinstance(exc, (TraceError, BackendError))


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {(text[0] if text else '')[:300]}"


# --- the paths ----------------------------------------------------------------------------
#
# Each maker takes (spec, model, workdir) and returns a callable ``run(*args)`` giving the
# traced call's nested result, or raises (a refusal before any result).


def _trace(spec: Spec, model):
    import tracebridge

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if spec.methods is not None:
            return tracebridge.trace_module(model, spec.methods, **spec.trace_kw)
        # a copy: a model that mutates its input must not change the case's inputs
        args, kwargs = as_call(copy.deepcopy(spec.inputs[0]))
        if kwargs:
            return tracebridge.trace(model, (), example_kwarg_inputs=kwargs, **spec.trace_kw)
        return tracebridge.trace(model, args, **spec.trace_kw)


def _method_of(traced, spec: Spec):
    return traced if spec.method == "forward" else getattr(traced, spec.method)


def make_trace(spec, model, workdir):
    return _method_of(_trace(spec, model), spec)


def make_fx(spec, model, workdir):
    import tracebridge
    from tracebridge.export import fx

    gm = tracebridge.to_graph_module(_trace(spec, model), spec.method)
    return lambda *a, **k: fx.call(gm, *a, **k)


def make_loaded(spec, model, workdir):
    import tracebridge
    from tracebridge.export import fx

    path = os.path.join(workdir, f"{spec.name}.tb")
    tracebridge.save(_trace(spec, model), path)
    loaded = tracebridge.load(path)
    if isinstance(model, nn.Module):
        loaded.train(model.training)
    gm = tracebridge.to_graph_module(loaded, spec.method)

    def run(*a, **k):
        return fx.call(gm, *a, **k)

    run.owner = loaded  # its buffers are the loaded file's, not the model's
    return run


def make_export(spec, model, workdir):
    import tracebridge
    from tracebridge.export import fx

    traced = _trace(spec, model)
    gm = tracebridge.to_graph_module(traced, spec.method, flat=True)
    args, kwargs = as_call(copy.deepcopy(spec.inputs[0]))
    flat = fx.flatten_inputs(gm, *args, **kwargs)
    ep = torch.export.export(gm, tuple(flat), dynamic_shapes=fx.dynamic_shapes(gm), strict=False)
    module = ep.module()
    return lambda *a, **k: fx.unflatten_outputs(gm, module(*fx.flatten_inputs(gm, *a, **k)))


def make_compile(spec, model, workdir):
    import tracebridge

    if spec.methods is not None:
        target = getattr(model, spec.method)
        args = spec.methods[spec.method]
    else:
        target, args = model, copy.deepcopy(spec.inputs[0])
    if isinstance(args, dict):
        raise NotRunError("tracebridge.compile takes no keyword example inputs")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kw = {k: v for k, v in spec.trace_kw.items() if k in ("check_trace", "strict")}
        compiled = tracebridge.compile(target, args, compiler_timeout=300, **kw)
    return compiled


def make_onnx(spec, model, workdir):
    import onnxruntime

    import tracebridge
    from tracebridge.export import fx

    traced = _trace(spec, model)
    path = os.path.join(workdir, f"{spec.name}.onnx")
    example = copy.deepcopy(spec.inputs[0]) if isinstance(spec.inputs[0], tuple) else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tracebridge.export_onnx(traced, path, method=spec.method, example_inputs=example)
    gm = tracebridge.to_graph_module(traced, spec.method)
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]

    def run(*args, **kwargs):
        flat = fx.flatten_inputs(gm, *args, **kwargs)
        feeds = {n: t.detach().numpy() for n, t in zip(names, flat)}
        out = session.run(None, feeds)
        return fx.unflatten_outputs(gm, [torch.from_numpy(o) for o in out])

    return run


AOT_CHILD = r"""
import sys, time, pickle
t0 = time.perf_counter()
import torch, tracebridge
t1 = time.perf_counter()
path, inputs_path, out_path = sys.argv[1:4]
m = tracebridge.load_compiled(path, trust_compiled_code=True)
torch.set_grad_enabled(False)  # the package serves calls without autograd (docs/aot.md)
t2 = time.perf_counter()
with open(inputs_path, "rb") as f:
    calls = pickle.load(f)
results = []
for args in calls:
    try:
        results.append(("ok", m(**args) if isinstance(args, dict) else m(*args)))
    except Exception as exc:
        text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
        results.append(("err", f"{type(exc).__name__}: {text}",
                        isinstance(exc, tracebridge.TraceError)))
t3 = time.perf_counter()
mods = sorted(k for k in sys.modules if k.startswith(("torch._inductor", "torch._dynamo")))
with open(out_path, "wb") as f:
    pickle.dump({"form": m.compiled_form, "reason": getattr(m, "compiled_reason", ""),
                 "import_s": t1 - t0, "load_s": t2 - t1, "calls_s": t3 - t2,
                 "inductor": any(k.startswith("torch._inductor") for k in mods),
                 "dynamo": any(k == "torch._dynamo" for k in mods),
                 "results": results}, f)
"""


def run_aot(spec: Spec, model, workdir, calls):
    """AOT: compiled and saved here, loaded and called in a fresh process."""
    import tracebridge

    traced = _trace(spec, model)
    path = os.path.join(workdir, f"{spec.name}.tb")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tracebridge.save_compiled(traced, path, method=spec.method)
    inputs_path = os.path.join(workdir, f"{spec.name}.inputs.pkl")
    out_path = os.path.join(workdir, f"{spec.name}.out.pkl")
    with open(inputs_path, "wb") as f:
        pickle.dump([copy.deepcopy(a) for a in calls], f)
    child = os.path.join(workdir, "aot_child.py")
    with open(child, "w") as f:
        f.write(AOT_CHILD)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, child, path, inputs_path, out_path],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"child failed ({proc.returncode}): {proc.stderr.strip()[-400:]}")
    with open(out_path, "rb") as f:
        return pickle.load(f)


MAKERS = {
    "trace": make_trace,
    "fx": make_fx,
    "loaded": make_loaded,
    "export": make_export,
    "compile": make_compile,
    "onnx": make_onnx,
}


def tolerance_of(path: str, spec: Spec) -> float:
    if path in EXACT:
        return 0.0
    if path in ("compile", "aot"):
        from tracebridge.backends.tolerance import default_tolerance

        model = spec.build()
        state = [t for t in model.state_dict().values()] if isinstance(model, nn.Module) else []
        return default_tolerance((spec.inputs[0], state), None)
    if path == "onnx":  # export_onnx's own default: by the least precise dtype
        from tracebridge.export.onnx import TOLERANCES as ONNX

        dtypes = {x.dtype for a in spec.inputs for x in leaves(a)}
        return max([ONNX.get(d, TOLERANCE["onnx"]) for d in dtypes], default=TOLERANCE["onnx"])
    return TOLERANCE.get(path, 1e-4)


def eager_results(spec: Spec) -> list:
    """Eager PyTorch on a fresh model, call after call: (result or exception, buffers)."""
    model = spec.build()
    out = []
    for args in spec.inputs:
        torch.manual_seed(1)
        try:
            r = invoke(
                model if spec.method == "forward" else getattr(model, spec.method),
                copy.deepcopy(args),
            )
            out.append(("ok", r, buffers(model)))
        except Exception as exc:
            out.append(("err", first_line(exc), {}))
    return out


def judge(
    spec: Spec, path: str, run: Callable | None, eager: list, model, make_error=None, aot=None
) -> dict:
    """Call ``run`` on every input set; the verdict of the worst call."""
    tol = tolerance_of(path, spec)
    verdicts, notes, worst = [], [], 0.0
    if make_error is not None:
        clear = is_clear(make_error)
        return {
            "verdict": "refused" if clear else "refused?",
            "at": "build",
            "detail": first_line(make_error),
        }
    for index, (args, (kind, expected, bufs)) in enumerate(zip(spec.inputs, eager)):
        torch.manual_seed(1)
        if aot is not None:
            got = aot["results"][index]
            if got[0] == "ok":
                result, error = got[1], None
            else:
                result, error, clear = None, got[1], got[2]
        else:
            try:
                result, error = invoke(run, copy.deepcopy(args)), None
            except Exception as exc:
                result, error, clear = None, first_line(exc), is_clear(exc)
        if error is not None:
            if kind == "err":
                verdicts.append("right")  # eager fails too
            else:
                verdicts.append("refused" if clear else "refused?")
                notes.append(f"call {index}: {error}")
            continue
        if kind == "err":
            verdicts.append("WRONG")
            notes.append(f"call {index}: eager raised {expected} but the path answered")
            continue
        d = difference(expected, result, spec.random)
        worst = max(worst, d)
        ok = d != float("inf") and (spec.random or close(expected, result, tol))
        state_ok = True
        if spec.stateful and aot is None and path != "onnx":
            mine = buffers(getattr(run, "owner", model))
            for k, v in bufs.items():
                if k in mine and not close(v, mine[k], max(tol, 0.0)):
                    state_ok = False
                    notes.append(f"call {index}: buffer {k} differs from eager")
        if ok and state_ok:
            verdicts.append("right")
        elif d <= 1e-5 and tol == 0 and state_ok:
            verdicts.append("tol")
            notes.append(f"call {index}: not bit for bit (max diff {d:.2e})")
        else:
            verdicts.append("WRONG")
            if not ok:
                notes.append(f"call {index}: max diff {d:.3g} (tolerance {tol})")
    order = ["WRONG", "refused?", "refused", "tol", "right"]
    verdict = next(v for v in order if v in verdicts) if verdicts else "-"
    if verdict == "refused" and "right" in verdicts:
        verdict = "right+refused"  # refused the calls it cannot serve, right on the others
    if verdict == "refused?" and "right" in verdicts:
        verdict = "right+refused?"
    return {"verdict": verdict, "max_diff": worst, "detail": "; ".join(notes)[:900]}


def run_case(spec: Spec, paths: tuple, workdir: str) -> dict:
    eager = eager_results(spec)
    row = {"case": spec.name, "kind": spec.kind, "note": spec.note}
    for path in paths:
        if path not in spec.paths:
            row[path] = {"verdict": "-"}
            continue
        start = time.perf_counter()
        model = spec.build()
        try:
            if path == "aot":
                aot = run_aot(spec, model, workdir, spec.inputs)
                row[path] = judge(spec, path, None, eager, model, aot=aot)
                row[path].update(
                    {k: aot[k] for k in ("form", "load_s", "import_s", "inductor", "dynamo")}
                )
                if aot["form"] != "aot" or aot["inductor"] or aot["dynamo"]:
                    row[path]["verdict"] += " (RECOMPILED)"
            else:
                torch.manual_seed(1)
                run = MAKERS[path](spec, model, workdir)
                row[path] = judge(spec, path, run, eager, model)
        except NotRunError as exc:
            row[path] = {"verdict": "-", "detail": str(exc)}
        except Exception as exc:  # the path refused before any call
            row[path] = judge(spec, path, None, eager, model, make_error=exc)
            row[path]["trace"] = traceback.format_exc(limit=-3)[-600:]
        row[path]["seconds"] = round(time.perf_counter() - start, 2)
    return row


# --- extra checks on a compiled / traced object (not a path x case cell) ---------------------


def extra_checks(workdir: str) -> list[dict]:
    """State changes after compile, pickling, copying, compiling twice, threads."""
    import tracebridge

    out = []

    def record(name, fn):
        start = time.perf_counter()
        try:
            verdict, detail = fn()
        except Exception as exc:
            verdict, detail = ("refused" if is_clear(exc) else "refused?"), first_line(exc)
        out.append(
            {
                "check": name,
                "verdict": verdict,
                "detail": detail,
                "seconds": round(time.perf_counter() - start, 2),
            }
        )
        print(f"  {name:55s} {verdict:10s} {detail[:120]}", flush=True)

    def mlp():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 3)).eval()

    x, x2 = torch.randn(4, 6), torch.randn(9, 6)

    def compare(a, b, tol=1e-4):
        return (
            ("right", "")
            if close(a, b, tol) and difference(a, b) != float("inf")
            else ("WRONG", f"max diff {difference(a, b):.3g}")
        )

    def state_dict_after_compile():
        net = mlp()
        compiled = tracebridge.compile(net, (x,))
        compiled(x)
        new = mlp()
        with torch.no_grad():
            for p in new.parameters():
                p.mul_(-2.0)
        net.load_state_dict(new.state_dict())
        return compare(new(x2), compiled(x2))

    def state_dict_into_compiled():
        net = mlp()
        compiled = tracebridge.compile(net, (x,))
        compiled(x)
        new = mlp()
        with torch.no_grad():
            for p in new.parameters():
                p.add_(1.0)
        compiled.load_state_dict(new.state_dict())
        return compare(new(x2), compiled(x2))

    def parameter_rebound_after_compile():
        net = mlp()
        compiled = tracebridge.compile(net, (x,))
        compiled(x)
        net[0].weight = nn.Parameter(torch.randn(12, 6))
        try:
            got = compiled(x2)
        except Exception as exc:
            return ("refused" if is_clear(exc) else "refused?"), first_line(exc)
        return compare(net(x2), got)

    def state_dict_after_to_graph_module():
        net = mlp()
        gm = tracebridge.to_graph_module(tracebridge.trace(net, (x,)))
        with torch.no_grad():
            net[2].bias.add_(3.0)
        return compare(net(x2), gm(x2)[0], 0)

    def dtype_after_compile():
        net = mlp()
        compiled = tracebridge.compile(net, (x,))
        compiled(x)
        compiled.double()
        try:
            got = compiled(x2.double())
        except Exception as exc:
            return ("refused" if is_clear(exc) else "refused?"), first_line(exc)
        return compare(net.double()(x2.double()), got, 1e-7)

    def pickle_compiled():
        net = mlp()
        compiled = tracebridge.compile(net, (x,))
        again = pickle.loads(pickle.dumps(compiled))
        return compare(net(x2), again(x2))

    def deepcopy_compiled():
        net = mlp()
        compiled = tracebridge.compile(net, (x,))
        again = copy.deepcopy(compiled)
        with torch.no_grad():
            net[0].bias.add_(1.0)  # the copy must not follow the original
        a = compare(mlp()(x2), again(x2))
        b = compare(net(x2), compiled(x2))
        return ("right", "") if a[0] == b[0] == "right" else ("WRONG", f"copy {a}, original {b}")

    def compile_twice():
        net = mlp()
        a = tracebridge.compile(net, (x,))
        b = tracebridge.compile(net, (x2,))
        r1, r2 = compare(net(x2), a(x2)), compare(net(x), b(x))
        return ("right", "") if r1[0] == r2[0] == "right" else ("WRONG", f"{r1} {r2}")

    def compile_a_traced_module():
        net = mlp()
        traced = tracebridge.trace(net, (x,))
        compiled = tracebridge.compile(traced, (x,))
        return compare(net(x2), compiled(x2))

    def compile_a_loaded_module():
        net = mlp()
        path = os.path.join(workdir, "extra_loaded.tb")
        tracebridge.save(tracebridge.trace(net, (x,)), path)
        compiled = tracebridge.compile(tracebridge.load(path), (x,))
        return compare(net(x2), compiled(x2))

    def threads():
        net = mlp()
        compiled = tracebridge.compile(net, (x,))
        inputs = [torch.randn(n, 6) for n in (2, 3, 5, 7, 4, 6, 8, 9)]
        errors, bad = [], []

        def work(t):
            for _ in range(20):
                try:
                    if not close(net(t), compiled(t), 1e-4):
                        bad.append(t.shape)
                except Exception as exc:  # noqa: BLE001
                    errors.append(first_line(exc))

        ts = [threading.Thread(target=work, args=(t,)) for t in inputs]
        [t.start() for t in ts]
        [t.join() for t in ts]
        if bad:
            return "WRONG", f"{len(bad)} wrong results"
        if errors:
            return "refused?", errors[0]
        return "right", ""

    def saved_compiled_reloads():
        net = mlp()
        compiled = tracebridge.compile(net, (x,))
        path = os.path.join(workdir, "extra_compiled.tb")
        compiled.save(path)
        again = tracebridge.backends.load_compiled(path)
        return compare(net(x2), again(x2))

    def grad_through_compiled():
        net = mlp()
        compiled = tracebridge.compile(net, (x,))
        xx = x2.clone().requires_grad_()
        try:
            y = compiled(xx)
            y.sum().backward()
        except Exception as exc:
            return ("refused" if is_clear(exc) else "refused?"), first_line(exc)
        x3 = x2.clone().requires_grad_()
        net(x3).sum().backward()
        if xx.grad is None:
            return "WRONG", "no gradient reached the input (silently detached)"
        return compare(x3.grad, xx.grad)

    def train_after_compile():
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(6, 12), nn.BatchNorm1d(12), nn.Dropout(0.3)).eval()
        compiled = tracebridge.compile(net, (x,))
        compiled.train()
        net.train()
        torch.manual_seed(3)
        try:
            got = compiled(x2)
        except Exception as exc:
            return ("refused" if is_clear(exc) else "refused?"), first_line(exc)
        torch.manual_seed(3)
        return compare(net(x2), got)

    for name, fn in [
        ("train() on a compiled eval-mode module", train_after_compile),
        ("load_state_dict on the original after compile", state_dict_after_compile),
        ("load_state_dict on the compiled object", state_dict_into_compiled),
        ("parameter rebound on the original after compile", parameter_rebound_after_compile),
        ("in-place weight change after to_graph_module", state_dict_after_to_graph_module),
        (".double() on the compiled object", dtype_after_compile),
        ("pickle round trip of a compiled object", pickle_compiled),
        ("deepcopy of a compiled object", deepcopy_compiled),
        ("compile the same module twice", compile_twice),
        ("compile a traced module", compile_a_traced_module),
        ("compile a loaded module", compile_a_loaded_module),
        ("compiled object called from 8 threads", threads),
        ("compiled.save -> backends.load_compiled", saved_compiled_reloads),
        ("backward through a compiled module", grad_through_compiled),
    ]:
        record(name, fn)
    return out


# --- the summary table ------------------------------------------------------------------


def merge(rows: list[dict], more: list[dict]) -> list[dict]:
    """``rows`` with the cells of ``more`` (another run's paths) added by case name."""
    by_case = {r["case"]: r for r in rows}
    for row in more:
        if row["case"] in by_case:
            by_case[row["case"]].update({k: v for k, v in row.items() if isinstance(v, dict)})
        else:
            rows.append(row)
    return rows


def summary(rows: list[dict], paths: tuple = PATHS) -> str:
    """A markdown table: case kind x path -> how many cases were right, refused some calls
    clearly (right on the others), refused the case clearly, and were wrong."""
    kinds: dict[str, list[dict]] = {}
    for row in rows:
        kinds.setdefault(row["kind"], []).append(row)
    used = [p for p in paths if any(r.get(p, {}).get("verdict", "-") != "-" for r in rows)]
    lines = [
        "| case kind (cases) | " + " | ".join(used) + " |",
        "|---|" + "---|" * len(used),
    ]
    for kind, members in kinds.items():
        cells = []
        for path in used:
            counts: dict[str, int] = {}
            for row in members:
                verdict = row.get(path, {}).get("verdict", "-").split(" ")[0]
                counts[verdict] = counts.get(verdict, 0) + 1
            shown = [f"{counts[v]} {v}" for v in VERDICT_ORDER if counts.get(v)]
            cells.append(", ".join(shown) or "-")
        lines.append(f"| {kind} ({len(members)}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def per_case(rows: list[dict], paths: tuple = PATHS) -> str:
    """A markdown table: one row per case, its verdict on each path."""
    used = [p for p in paths if any(r.get(p, {}).get("verdict", "-") != "-" for r in rows)]
    lines = ["| case | " + " | ".join(used) + " |", "|---|" + "---|" * len(used)]
    for row in rows:
        cells = [row.get(p, {}).get("verdict", "-") for p in used]
        lines.append(f"| {row['case']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


VERDICT_ORDER = (
    "right",
    "right+refused",
    "refused",
    "tol",
    "right+refused?",
    "refused?",
    "WRONG",
    "-",
)


# --- main ---------------------------------------------------------------------------------


def zoo_specs(names: list[str] | None) -> list[Spec]:
    sys.path.insert(0, HERE)
    import zoo_models

    cases = zoo_models.all_cases()
    if names:
        cases = [c for c in cases if c.name in names]

    def evaluating(build):
        def make():
            torch.manual_seed(0)
            return build().eval()

        return make

    return [
        Spec(
            c.name,
            f"zoo {c.category}",
            evaluating(c.build),
            c.inputs(),
            note=c.notes,
            paths=("trace", "fx", "export", "compile", "onnx"),
        )
        for c in cases
    ]


ZOO_DEFAULT = [  # varied kinds first: a run cut short still covers several
    "resnet18",
    "bert",
    "gpt2",
    "vit_b_16 (small)",
    "whisper",
    "t5",
    "convnext_tiny",
    "llama",
    "wav2vec2",
    "mobilenet_v3_small",
    "swin_t (small)",
    "clip",
    "detr",
    "bart",
    "segformer",
    "distilbert",
    "efficientnet_b0",
    "modernbert (rotary, local)",
    "timm levit_128s",
    "bloom (alibi)",
    "timm eva (rope)",
    "squeezenet1_1",
    "lraspp_mobilenet_v3_large",
    "timm mobilevit_xxs",
    "timm ghostnet_050",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=("hand", "zoo", "extra"), default="hand")
    parser.add_argument("--paths", nargs="*", default=list(PATHS))
    parser.add_argument("--only", nargs="*", help="case names")
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument(
        "--table", nargs="*", help="print the summary table of these --json files, merged"
    )
    parser.add_argument("--per-case", action="store_true", help="--table: a row per case")
    args = parser.parse_args()
    if args.table:
        rows: list[dict] = []
        for name in args.table:
            with open(name) as f:
                rows = merge(rows, json.load(f))
        print(per_case(rows) if args.per_case else summary(rows))
        return
    torch.set_num_threads(1)
    workdir = tempfile.mkdtemp(prefix="deploy-trial-")
    if args.set == "extra":
        rows = extra_checks(workdir)
    else:
        if args.set == "hand":
            sys.path.insert(0, HERE)
            from deploy_trial_cases import hand_specs

            specs = hand_specs()
            if args.only:
                specs = [s for s in specs if s.name in args.only]
        else:
            names = args.only or ZOO_DEFAULT
            specs = sorted(zoo_specs(names), key=lambda spec: names.index(spec.name))
        rows = []
        for spec in specs:
            row = run_case(spec, tuple(args.paths), workdir)
            rows.append(row)
            if args.json:  # after every case: a run cut short keeps what it did
                with open(args.json, "w") as f:
                    json.dump(rows, f, indent=1, default=str)
            cells = "  ".join(f"{p}={row[p]['verdict']}" for p in args.paths if p in row)
            print(f"{spec.name:34s} {cells}", flush=True)
            for p in args.paths:
                cell = row.get(p, {})
                if cell.get("verdict", "-") not in ("right", "-") and cell.get("detail"):
                    print(f"    {p}: {cell['detail'][:400]}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1, default=str)


if __name__ == "__main__":
    main()
