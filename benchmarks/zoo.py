"""The model zoo: published architectures traced once, called on other shapes, reloaded.

For every model of ``zoo_models.all_cases()`` and every tool (tracebridge, torch.jit.trace,
torch.export with dynamic dimensions):

1. trace on the first input set;
2. call the traced model on every input set (other batch sizes, batch size 1, other
   sequence lengths and image sizes, padding) and compare with eager PyTorch;
3. save it, and reload every artifact in ONE fresh process that runs it on the same inputs
   (for tracebridge, the reloaded artifact must also compute bit for bit what the
   in-process trace computed).

Each cell of the table says what a user meets: ``right`` (every shape that eager runs is
right, in process and after reloading), ``WRONG`` (some output differs from eager and no
error was raised), or the first error (at trace time or at a call). Results are kept in
``benchmarks/zoo_results.json`` (``--only`` re-runs some models and keeps the rest), and the
table is written to ``docs/zoo.md``.

    .venv/bin/python benchmarks/zoo.py                    # everything (make zoo)
    .venv/bin/python benchmarks/zoo.py --only bert --only resnet18 --tools tracebridge
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import inspect
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402

import zoo_env  # noqa: E402, F401 - before torchvision
from tracebridge.progress import stage, track  # noqa: E402

TOOLS = ("tracebridge", "jit", "export", "onnx")
RESULTS = os.path.join(HERE, "zoo_results.json")
TABLE = os.path.join(ROOT, "docs", "zoo.md")
EXTENSIONS = {"tracebridge": "tb", "jit": "pt", "export": "pt2", "onnx": "onnx"}


class Timeout(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds: int):
    def fire(signum, frame):
        raise Timeout(f"took more than {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# --- comparing outputs ----------------------------------------------------------------------


def leaves(obj) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (tuple, list)):
        return [t for x in obj for t in leaves(x)]
    if isinstance(obj, dict):
        return [t for k in obj for t in leaves(obj[k])]
    if obj is None:
        return []
    if isinstance(obj, (bool, int, float)):  # a size or a count returned beside tensors
        return [torch.tensor(obj)]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):  # an output class
        return [t for f in dataclasses.fields(obj) for t in leaves(getattr(obj, f.name))]
    raise TypeError(f"unexpected output of type {type(obj).__name__}")


def compare(expected, got, tolerance: float) -> str | None:
    """None when ``got`` matches ``expected``; else what differs."""
    a, b = leaves(expected), leaves(got)
    if len(a) != len(b):
        return f"{len(b)} output tensors, eager gives {len(a)}"
    for i, (x, y) in enumerate(zip(a, b)):
        if x.shape != y.shape:
            return f"output {i} has shape {list(y.shape)}, eager {list(x.shape)}"
        if x.dtype != y.dtype:
            return f"output {i} has dtype {y.dtype}, eager {x.dtype}"
        if x.numel() == 0:
            continue
        if not x.is_floating_point():
            if not torch.equal(x, y):
                return f"output {i} (integers) differs"
            continue
        x64, y64 = x.detach().double(), y.detach().double()
        scale = max(1.0, x64.abs().max().item())
        if not torch.allclose(x64, y64, rtol=tolerance, atol=tolerance * scale, equal_nan=True):
            return f"output {i} differs: max abs error {(x64 - y64).abs().max().item():.3g}"
    return None


def identical(a, b) -> bool:
    la, lb = leaves(a), leaves(b)
    return len(la) == len(lb) and all(
        x.shape == y.shape and x.dtype == y.dtype and torch.equal(x, y) for x, y in zip(la, lb)
    )


def short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return " ".join(text.split())[:400]


# --- the tools ------------------------------------------------------------------------------


class OnnxModel:
    """An ONNX file written by ``tracebridge.export_onnx`` from a tracebridge trace, run by
    ONNX Runtime (CPU). It is called with the traced call's flat input tensors (``flat``
    turns a call's own arguments into them) and returns the flat output leaves, which
    ``compare`` matches against eager's leaves in order."""

    def __init__(self, path: str, flat=None, fixed: str | None = None):
        import onnxruntime

        self.path, self.flat = path, flat
        self.fixed = fixed  # export_onnx's warning: input sizes fixed in the file, and why
        self.session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])

    def __call__(self, *args):
        inputs = self.flat(*args) if self.flat else args
        names = [i.name for i in self.session.get_inputs()]
        feeds = {n: t.detach().cpu().numpy() for n, t in zip(names, inputs)}
        return tuple(torch.from_numpy(a) for a in self.session.run(None, feeds))


def trace_onnx(model, args: tuple, workdir: str):
    """tracebridge traces, ``tracebridge.export_onnx`` writes the ONNX file (dynamic
    dimensions from the trace's symbols), ONNX Runtime runs it."""
    import tracebridge
    from tracebridge.export import fx as bridge

    traced = tracebridge.trace(model, args)
    handle, path = tempfile.mkstemp(suffix=".onnx", dir=workdir)
    os.close(handle)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        tracebridge.export_onnx(traced, path, example_inputs=args, check=False)
    fixed = next((str(w.message) for w in seen if "fixed in the file" in str(w.message)), None)
    gm = bridge.to_graph_module(traced, "forward")
    return OnnxModel(path, lambda *a: bridge.flatten_inputs(gm, *a), fixed)


def trace_with(tool: str, model, args: tuple, workdir: str | None = None):
    if tool == "onnx":
        return trace_onnx(model, args, workdir or tempfile.gettempdir())
    if tool == "tracebridge":
        import tracebridge

        return tracebridge.trace(model, args)
    if tool == "jit":
        return torch.jit.trace(model, args)
    if tool == "export":
        from zoo_models import all_dims

        dims = all_dims(args)
        if any(
            p.kind == p.VAR_POSITIONAL for p in inspect.signature(model.forward).parameters.values()
        ):
            dims = (dims,)  # export binds ``*tensors`` to one argument
        return torch.export.export(model, args, dynamic_shapes=dims)
    raise ValueError(tool)


def runner(tool: str, traced):
    return traced.module() if tool == "export" else traced


def save_with(tool: str, traced, path: str) -> None:
    if tool == "onnx":
        shutil.copyfile(traced.path, path)
    elif tool == "tracebridge":
        traced.save(path)
    elif tool == "jit":
        torch.jit.save(traced, path)
    else:
        torch.export.save(traced, path)


def load_with(tool: str, path: str):
    if tool == "onnx":
        return OnnxModel(path)  # called with the flat inputs saved beside it
    if tool == "tracebridge":
        import tracebridge

        return tracebridge.load(path)
    if tool == "jit":
        return torch.jit.load(path)
    return torch.export.load(path).module()


# --- one model ------------------------------------------------------------------------------


def run_case(case, tools, workdir: str, index: int, limit: int) -> tuple[dict, list]:
    """Trace ``case`` with each tool; returns its results and what to reload."""
    torch.manual_seed(0)
    started = time.time()
    entry = {"category": case.category, "source": case.source, "tools": {}}
    try:
        with time_limit(limit):
            model = case.build().eval()
            inputs = case.inputs()
    except Exception as exc:
        entry["eager"] = f"cannot build: {short(exc)}"
        return entry, []
    expected = []
    shapes = []
    with torch.no_grad():
        for i, args in enumerate(inputs):
            shapes.append(" ".join("x".join(map(str, a.shape)) for a in args))
            try:
                seeded(i)
                expected.append(model(*args))
            except Exception as exc:  # the model itself does not take this shape
                expected.append(None)
                shapes[-1] += f" (eager refuses: {short(exc)[:80]})"
    entry["shapes"] = shapes
    if expected[0] is None:
        entry["eager"] = "eager fails on the trace input"
        return entry, []
    reloads = []
    for tool in tools:
        cell = {"calls": [], "trace_error": None}
        entry["tools"][tool] = cell
        stage(tool)
        t0 = time.time()
        try:
            with time_limit(limit), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                traced = trace_with(tool, model, inputs[0], workdir)
        except Exception as exc:
            cell["trace_error"] = short(exc)
            cell["trace_s"] = round(time.time() - t0, 1)
            continue
        cell["trace_s"] = round(time.time() - t0, 1)
        if getattr(traced, "fixed", None):
            cell["fixed"] = traced.fixed[:1200]
        fn = runner(tool, traced)
        got_all = []
        for i, (args, want) in enumerate(zip(inputs, expected)):
            if want is None:
                cell["calls"].append({"status": "skip"})
                got_all.append(None)
                continue
            try:
                with time_limit(limit), torch.no_grad(), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    seeded(i)
                    got = fn(*args)
            except Exception as exc:
                cell["calls"].append({"status": "error", "error": short(exc)})
                got_all.append(None)
                continue
            got_all.append(got)
            diff = compare(want, got, case.tolerance)
            cell["calls"].append(
                {"status": "wrong", "error": diff} if diff else {"status": "right"}
            )
        path = os.path.join(workdir, f"m{index}.{EXTENSIONS[tool]}")
        try:
            with time_limit(limit), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                save_with(tool, traced, path)
        except Exception as exc:
            cell["save_error"] = short(exc)
            continue
        data = os.path.join(workdir, f"m{index}.{tool}.data")
        # ONNX Runtime is called with flat input tensors: the fresh process gets them so.
        saved = [tuple(fn.flat(*a)) for a in inputs] if tool == "onnx" else inputs
        torch.save({"inputs": saved, "expected": expected, "in_process": got_all}, data)
        reloads.append(
            {"model": case.name, "tool": tool, "path": path, "data": data, "tol": case.tolerance}
        )
    entry["seconds"] = round(time.time() - started, 1)
    return entry, reloads


THREADS = 1  # every process of the zoo: bit-for-bit comparisons need one thread count


def seeded(call: int) -> None:
    """Seed the global generator for call ``call`` of an input list: eager's call and each
    tool's (in process and reloaded) start from the same state, so a model that draws random
    numbers in evaluation (ViLT picks its image patches with ``torch.multinomial``) is
    compared draw for draw; a deterministic model is unaffected."""
    torch.manual_seed(1000 + call)


# --- the fresh process that reloads everything ----------------------------------------------


def reload_all(manifest_path: str) -> None:
    """Run in a fresh process: load every artifact and run it on its inputs."""
    import torchvision  # noqa: F401 - as a user's process would (registers its ops)

    # The thread count of the process that traced: kernels split reductions by thread, so
    # another count rounds differently, for every tool alike.
    torch.set_num_threads(THREADS)

    zoo_env.allow_python_ops()

    with open(manifest_path) as f:
        manifest = json.load(f)
    out = []
    for item in manifest:
        record = {"model": item["model"], "tool": item["tool"], "calls": []}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fn = load_with(item["tool"], item["path"])
            data = torch.load(item["data"], weights_only=False)
        except Exception as exc:
            record["load_error"] = short(exc)
            out.append(record)
            continue
        calls = zip(data["inputs"], data["expected"], data["in_process"])
        for i, (args, want, before) in enumerate(calls):
            if want is None:
                record["calls"].append({"status": "skip"})
                continue
            try:
                with torch.no_grad(), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    seeded(i)
                    got = fn(*args)
            except Exception as exc:
                record["calls"].append({"status": "error", "error": short(exc)})
                continue
            diff = compare(want, got, item["tol"])
            call = {"status": "wrong", "error": diff} if diff else {"status": "right"}
            if before is not None:
                call["same_as_in_process"] = identical(before, got)
            record["calls"].append(call)
        out.append(record)
    with open(manifest_path + ".out", "w") as f:
        json.dump(out, f)


def run_reloads(reloads: list, workdir: str) -> dict:
    manifest = os.path.join(workdir, "manifest.json")
    with open(manifest, "w") as f:
        json.dump(reloads, f)
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    proc = subprocess.run(
        [sys.executable, __file__, "--reload", manifest], env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        raise SystemExit("the reload process failed")
    with open(manifest + ".out") as f:
        return {(r["model"], r["tool"]): r for r in json.load(f)}


# --- summarising ----------------------------------------------------------------------------


def verdict(cell: dict | None) -> tuple[str, str]:
    """(status, detail) of one model and tool; status is one of right, WRONG, error."""
    if cell is None:
        return "-", ""
    if cell.get("trace_error"):
        return "error", "at trace: " + cell["trace_error"]
    calls = [c for c in cell["calls"] if c["status"] != "skip"]
    reload = cell.get("reload", {})
    reload_calls = [c for c in reload.get("calls", []) if c["status"] != "skip"]
    wrong = [c for c in calls if c["status"] == "wrong"]
    wrong_after = [c for c in reload_calls if c["status"] == "wrong"]
    if wrong or wrong_after:
        first = (wrong or wrong_after)[0]["error"]
        where = "in process" if wrong else "after reloading"
        return "WRONG", f"{len(wrong)}/{len(calls)} calls wrong {where}: {first}"
    errors = [c for c in calls if c["status"] == "error"]
    if errors:
        right = len(calls) - len(errors)
        why = f" (why: {cell['fixed']})" if cell.get("fixed") else ""
        return "error", f"{right}/{len(calls)} calls right; then: {errors[0]['error']}{why}"
    if cell.get("save_error"):
        return "error", "at save: " + cell["save_error"]
    if reload.get("load_error"):
        return "error", "at load: " + reload["load_error"]
    errors_after = [c for c in reload_calls if c["status"] == "error"]
    if errors_after:
        return "error", "after reloading: " + errors_after[0]["error"]
    return "right", ""


# Why tracebridge's remaining refusals stay, written under the table for the models they
# concern (documentation: the tracer treats these models like any other code).
_DETECTION = (
    "torchvision's detectors take a list of images and return a list with one dict of "
    "boxes, scores and labels per image, so the number of results is the batch size by the "
    "model's own interface. The zoo's wrapper (`Detection` in `benchmarks/zoo_models.py`) "
    "only turns the batch tensor into that list (`images.unbind(0)`, line 116) and each "
    "dict into a tuple; traced without it, the input is itself a list whose length is the "
    "batch size, and a call with a list of another length is refused as arguments shaped "
    "differently. A traced graph has one output structure: it serves the batch size it was "
    "traced at and, through a size-1 specialisation, batch 1 where the rest of its guards "
    "hold; a batch of 3 raises GuardError at `zoo_models.py:116` (`unbind` gives 3 results, "
    "not 2). torch.jit.trace fails the same calls (`Expected 2 elements in a list`) and "
    "torch.export refuses at trace time. No tracer that records one graph can serve an output "
    "structure it did not record; to serve every batch size, trace the tensor part (backbone "
    "and heads) and keep the per-image post-processing eager, or trace at batch 1 and loop. "
    "Non-maximum suppression is one node, `torchvision.nms` (op-set 6), run by whatever "
    "kernel torchvision registers: here the zoo's CPU stand-in (`benchmarks/zoo_env.py`, "
    "for the C++ kernel that the CUDA build of torchvision 0.28 on the CPU torch wheel "
    "lacks), in process and in the fresh process alike."
)
LIMITS = {
    "timm mobilevit_xxs": (
        "MobileViT interpolates a feature map whose height or width is odd up to the next "
        "even size before cutting it into 2x2 patches (`timm/models/mobilevit.py:252`: "
        "`if new_h != H or new_w != W`, with `new_h = ceil(H / 2) * 2`). At 64x64 every "
        "stage's map is even; at 96x96 the last stage's map is 3x3, so the call takes the "
        "other branch and raises GuardError naming that line (torch.jit.trace fails in the "
        "patch reshape at line 258; torch.export fails a guard on the patch sizes). Size "
        "specialisation cannot cover it: it re-traces where a size is cut to 1, and no general "
        "rule finds the input sizes that flip an arbitrary arithmetic condition on "
        "intermediate sizes (here the parity of a map after several strided stages; each "
        "MobileViT stage has its own parity in each direction, so a graph per combination "
        "would be needed, found by a search over input sizes that works for this formula "
        "only). "
        "A trace serves the image sizes whose maps have the parities of the traced size's "
        "(every multiple of 64 keeps every map even, as MobileViT's own 256x256 does)."
    ),
    "ssdlite320_mobilenet_v3_large": _DETECTION,
    "retinanet_resnet50_fpn": _DETECTION,
}
LIMITS.update(
    {
        "wav2vec2_conformer (rotary)": (
            "The rotary embedding keeps the last sequence length and its table on the module "
            "(`transformers/models/wav2vec2_conformer/modeling_wav2vec2_conformer.py:150`: "
            "`if sequence_length == self.cached_sequence_length and ...: return "
            "self.cached_...`), a cache keyed on a size, as in issue 20 item 3. The trace "
            "guards the comparison, so a call whose length equals the cached one raises "
            "GuardError naming line 150 (here 1x200: 19 frames after the feature encoder). "
            "torch.jit.trace fails its own check (graphs differ across invocations), "
            "torch.export refuses a data-dependent guard."
        ),
        "funnel (pooling)": (
            "Funnel's relative position tables are built in Python from the sequence length "
            "(`transformers/models/funnel/modeling_funnel.py:152`: `pos = list(range(seq_len))`"
            ", then a loop over it): the trace unrolls the loop and guards the length, so "
            "another length raises GuardError naming that line. torch.jit.trace is silently "
            "wrong at every other length (max abs error 0.18 and 0.35); torch.export fails "
            "its guard `size()[1] == 8`."
        ),
        "bigbird (block sparse)": (
            "BigBird's block-sparse attention builds its random-block plan with numpy from "
            "the sequence length (`transformers/models/big_bird/modeling_big_bird.py:373`, "
            "`torch.tensor(np.stack(rand_attn))`): the plan is a constant of the trace, and "
            "the sizes it was built from are guarded, so another length raises GuardError "
            "(at 40 tokens: `shape[1] == 32`). All three tools serve only the traced length "
            "(jit fails in the interpreter, export fails a guard `size // 4 == 8`). Also, "
            "BigBird rewrites its own configuration to full attention the first time it sees "
            "a sequence of 28 tokens or fewer, so the zoo calls it above that length only."
        ),
    }
)
# The onnx column's cells that are not right, explained (the trace itself is right).
ONNX_NOTES = {
    "xlnet (relative)": (
        "torch.onnx.export fails while decomposing the GraphModule: `Cannot find a "
        "compatible OpOverload for aten.sub` with the float `1.0` first. The trace records "
        "`input_mask = 1.0 - attention_mask` (`transformers/models/xlnet/modeling_xlnet.py:"
        "1078`, an int64 mask) as `rsub(mask, 1.0)`, as eager runs it; torch.onnx.export "
        "refuses `1.0 - m` for an integer tensor `m` in plain eager code too (`-m + 1.0` "
        "exports), so this is the exporter's limit. The trace itself is right."
    ),
    "bigbird (block sparse)": (
        "torch.onnx.export fails while decomposing the GraphModule: `Cannot find a "
        "compatible OpOverload for aten.sub` with the float `1.0` first, from `rsub(x, 1.0)` "
        "(`1.0 - mask`, `transformers/models/big_bird/modeling_big_bird.py:403` and others), "
        "the exporter's limit described for xlnet. The trace itself serves only the traced "
        "length (see above)."
    ),
    "raft_small": (
        "torch.onnx.export fails in onnxscript's constant folding (`FoldConstantsPass`: "
        "`Error during constant folding for node 'node_split' (::SplitToSequence)`, "
        "`AttributeError: 'NoneType' object has no attribute 'ndim'`), on the node that "
        "`torch.chunk(fmaps, chunks=2, dim=0)` (`torchvision/models/optical_flow/raft.py:"
        "493`) becomes. The trace itself is right."
    ),
    "longformer": (
        "torch.export, run on the trace's GraphModule, refuses a data-dependent size "
        "(`Could not guard on data-dependent expression 4*u1 < s94`), as it refuses the "
        "model itself: Longformer computes its chunk count with `torch.div(seq_len, 2 * w, "
        "rounding_mode='trunc')`, a 0-dim tensor, and passes it to `view` as a size; the "
        "trace records that as eager runs it, and export treats a size read from a tensor as "
        "data. The trace itself is right."
    ),
    "ssdlite320_mobilenet_v3_large": (
        "torch.export, run on the trace's GraphModule, refuses a data-dependent size "
        "(`_shape_as_tensor` of a tensor whose length is the number of boxes over the score "
        "threshold, which depends on the scores: `Could not extract specialized integer from "
        "data-dependent expression u0`). torch.export of the model refuses too."
    ),
    "deformable_detr": (
        "ONNX Runtime fails at the other image size (`Attempting to broadcast an axis by a "
        "dimension other than 1. 84 by 189` in an Add). The cause is torch.export's own "
        "guard, not the trace's: torch.export of the trace's GraphModule fixes the image "
        "size class itself (its program refuses 96x96 with `Guard failed: 1 + (-1 + "
        "tensors0.size()[2]) // 8 == 8`, as torch.export of the model does), an ONNX file "
        "cannot carry that guard, and export_onnx fixes only the sizes of the trace's own "
        "guards, so the file keeps the image dimensions dynamic around a size export baked "
        "in. Here ONNX Runtime fails loudly; an export guard of this kind could also give a "
        "wrong answer, so export_onnx should fix the sizes of export's guards too (not done "
        "yet). The trace itself is right."
    ),
    "timm maxvit (small)": (
        "torch.export, run on the trace's GraphModule, fails in its own solver "
        "(`NotImplementedError: The inequality, Eq(x/4 - (((x/2)//2)), 0), cannot be solved "
        "using solve_univariate_inequality`): a size guard of the window partition that "
        "export cannot simplify. torch.export of the model itself is right; the trace is right."
    ),
    "modernbert (rotary, local)": (
        "ONNX differs from eager (max abs error 2.1e-3 and 2.4e-3) only at the padded "
        "positions at the end of row 0 whose whole local attention window is padding "
        "(positions 29 to 31 of 32 with 5 padded; 43 to 47 of 48 with 7 padded), where "
        "ModernBERT's boolean mask allows a query no key. For such a row PyTorch's "
        "`scaled_dot_product_attention` returns zeros; torch.onnx.export translates the call "
        "as `Where(mask, 0, -3.4e38)` then `Softmax`, a uniform softmax, so ONNX Runtime "
        "gives the mean of the values. Not ONNX Runtime's numerics and not the trace: "
        "torch.export of the same GraphModule matches eager bit for bit, the tracebridge "
        "trace matches eager everywhere, every other position and every call without "
        "padding match within 1e-6, and `benchmarks/zoo_onnx_sdpa.py` shows the same "
        "difference on one `scaled_dot_product_attention` call with no tracebridge in the "
        "path. No model reads those positions; counted as wrong all the same."
    ),
    "mixtral (MoE)": (
        "torch.export, run on the trace's GraphModule, cannot trace `_grouped_mm` (the "
        "experts' grouped matrix product): tracebridge's checked implementation reads the "
        "group offsets to check them (`checked_ops.py:257`), a guard on data export refuses "
        "(`GuardOnDataDependentSymNode`), and with that check skipped PyTorch's own fake "
        "kernel of `aten._grouped_mm` takes only bfloat16 operands (`Expected inputs of "
        "BF16 type`), where the zoo's model runs in float32. The trace itself is right."
    ),
}
ONNX_NOTES["vit_mae (random masking)"] = (
    "ViTMAE masks a random half of its patches on every call: the noise is drawn with "
    "`torch.rand` (`transformers/models/vit_mae/modeling_vit_mae.py`, `random_masking`), "
    "which the zoo seeds alike for eager and each tool; the ONNX file draws it with ONNX "
    "Runtime's own generator (`RandomUniform`), so other patches are kept and the outputs "
    "differ without an error. No exported file can match eager draw for draw; pass the "
    "`noise` argument as an input to export the model deterministically. tracebridge's "
    "trace draws from torch's generator and is right."
)
ONNX_NOTES["qwen2_moe (MoE)"] = ONNX_NOTES["mixtral (MoE)"]
ONNX_NOTES["led"] = ONNX_NOTES["longformer"]
ONNX_NOTES["retinanet_resnet50_fpn"] = ONNX_NOTES["ssdlite320_mobilenet_v3_large"]


def _reruns(reruns: list, names: list[str]) -> list[str]:
    """Lines saying which cells were re-run after the full run, and how: runs of one day
    and the same tools are one line, and a line that covers every model says so."""
    if not reruns:
        return []
    lines = [
        "Cells re-run after the full run (`benchmarks/zoo.py --tools T --only M ... --results",
        "/tmp/part.json`, or `--part I/N` for every N-th model, then `--merge",
        "benchmarks/zoo_results.json /tmp/part.json ...`, which rewrites this file):",
        "",
    ]
    grouped: dict[tuple, list[str]] = {}
    for run in reruns:
        key = (run["date"], ", ".join(run["tools"]))
        seen = grouped.setdefault(key, [])
        seen += [m for m in run["models"] if m not in seen]
    for (date, tools), models in grouped.items():
        every = set(names) <= set(models)
        lines.append(f"- {date}, {tools}: {'every model' if every else ', '.join(models)}")
    return lines + [""]


def write_table(results: dict, path: str) -> None:
    meta = results.get("_meta", {})
    models = {k: v for k, v in results.items() if not k.startswith("_")}
    counts = {
        t: {"models": 0, "traced": 0, "right": 0, "WRONG": 0, "error": 0, "bitwise": [0, 0]}
        for t in TOOLS
    }
    rows, details = [], []
    for name, entry in models.items():
        cells = []
        for tool in TOOLS:
            cell = entry.get("tools", {}).get(tool)
            status, detail = verdict(cell)
            if cell is not None:
                counts[tool]["models"] += 1
                counts[tool]["traced"] += not cell.get("trace_error")
                if status in counts[tool]:
                    counts[tool][status] += 1
                for c in cell.get("reload", {}).get("calls", []):
                    if "same_as_in_process" in c:
                        counts[tool]["bitwise"][1] += 1
                        counts[tool]["bitwise"][0] += c["same_as_in_process"]
            shown = {"right": "right", "WRONG": "**SILENTLY WRONG**", "error": "clear error"}
            cells.append(shown.get(status, status))
            if detail:
                details.append(f"- **{name}**, {tool}: {detail}")
        if entry.get("eager"):
            cells = ["(eager: " + entry["eager"][:60] + ")"] * len(TOOLS)
        rows.append(
            f"| {name} | {entry['category']} | {entry['source']} | " + " | ".join(cells) + " |"
        )
    lines = [
        "# The model zoo",
        "",
        "Published architectures with random weights and small configurations, traced once",
        "and called on other shapes, by three tools, and exported to ONNX. Generated by",
        "`make zoo`",
        "(`benchmarks/zoo.py`; models in `benchmarks/zoo_models.py`); do not edit by hand.",
        "",
        f"Run: {meta.get('date', '?')}; torch {meta.get('torch', '?')}, torchvision "
        f"{meta.get('torchvision', '?')}, timm {meta.get('timm', '?')}, transformers "
        f"{meta.get('transformers', '?')}; CPU only.",
        "",
        "Each model is traced on its first input set (batch 2; text of length 8 without",
        "padding), then called on the others (batch 1 and larger, other image sizes and",
        "sequence lengths, padded text, length 1) and compared with eager PyTorch",
        "(relative tolerance 1e-4); then it is saved, and every artifact is reloaded in one",
        "fresh process and run on the same inputs. Each call, eager's and every tool's, starts",
        "from the same seed of the global generator (`zoo.seeded`, added after the runs listed",
        "below; a model that draws no random numbers computes the same either way), so a",
        "model that draws random numbers when it runs is compared draw for draw. torch.export",
        "is given every dimension as",
        "`Dim.AUTO`. A cell is **right** when every call that eager runs is right, in",
        "process and after reloading; **SILENTLY WRONG** when some output differs from eager",
        "with no error; **clear error** when the tool refused (at trace time, or a call",
        "raised) and nothing was wrong. The reasons are listed below the table.",
        "",
        "The **onnx** column: the tracebridge trace is written by `tracebridge.export_onnx`",
        "(dynamic dimensions from the trace's symbols), and ONNX Runtime (CPU) runs the file",
        "on every input set, in process and in the fresh process, judged against eager as",
        "above. `-` where the column was not run for a model. Where the trace holds a guard",
        "on sizes that an ONNX model cannot state (a range or a relation of sizes, such as",
        "Swin's `if window_size >= pad_H`), `export_onnx` fixes the input sizes it reads at the",
        "traced ones (docs/deploy.md), so ONNX Runtime refuses other sizes (`Got invalid",
        "dimensions`) instead of answering them wrongly: such a cell is a clear error, and its",
        "reason below quotes export_onnx's warning, which names the guards and their lines.",
        "A guard that holds for every size the exported program serves anyway (`q_length > 1`",
        "under torch.export's size-1 rule) fixes nothing.",
        "",
        "Packages (`requirements-zoo.txt`, installed by `make zoo` with `requirements.txt` as",
        "constraints, so torch 2.13.0+cpu and numpy 1.26.4 never move): timm, transformers,",
        "safetensors and pillow install as published. torchvision 0.28.0 is published only as",
        "a CUDA build; its Python code runs on the CPU torch wheel when installed with",
        "`--no-deps` and when the two C++ operators it registers fake kernels for at import",
        "(`torchvision::nms`, `torchvision::qnms`) are declared first",
        "(`benchmarks/zoo_env.py`, with a plain-PyTorch CPU `nms`). Models that need its other",
        "C++ operators (`roi_align`: Faster/Mask R-CNN) cannot run eagerly here and are not in",
        "the zoo.",
        "",
        "## Counts",
        "",
        "| tool | models | traced | right on every shape | silently wrong | clear error |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for tool in TOOLS:
        c = counts[tool]
        lines.append(
            f"| {tool} | {c['models']} | {c['traced']} | {c['right']} | {c['WRONG']} "
            f"| {c['error']} |"
        )
    same, total = counts["tracebridge"]["bitwise"]
    lines += [
        "",
        "tracebridge artifacts reloaded in a fresh process computed bit for bit what the",
        f"in-process trace computed in {same} of {total} calls (both processes with "
        f"{THREADS} thread: kernels split",
        "reductions by thread count, so runs with other counts differ in the last bits, for "
        "every tool alike)."
        + (
            " Rows last run before the reloading process took the tracing process's count "
            "show such differences."
            if same < total
            else ""
        ),
        "",
        *_reruns(meta.get("reruns", []), list(models)),
        "## Per model",
        "",
        "| model | category | from | tracebridge | torch.jit.trace | torch.export | onnx |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        *rows,
        "",
        "## Why a cell is not right",
        "",
        *details,
        "",
    ]
    refused = [
        name
        for name, entry in models.items()
        if name in LIMITS and verdict(entry.get("tools", {}).get("tracebridge"))[0] == "error"
    ]
    onnx_notes = [
        name
        for name, entry in models.items()
        if name in ONNX_NOTES
        and verdict(entry.get("tools", {}).get("onnx"))[0] not in ("right", "-")
    ]
    if refused:
        lines += ["## Why tracebridge's remaining refusals stay", ""]
        for text in dict.fromkeys(LIMITS[name] for name in refused):  # shared texts once
            names = ", ".join(f"**{name}**" for name in refused if LIMITS[name] == text)
            lines.append(f"- {names}: {text}")
        lines.append("")
    if onnx_notes:
        lines += ["## The onnx column's cells that are not right", ""]
        for text in dict.fromkeys(ONNX_NOTES[name] for name in onnx_notes):  # shared once
            names = ", ".join(f"**{name}**" for name in onnx_notes if ONNX_NOTES[name] == text)
            lines.append(f"- {names}: {text}")
        lines.append("")
    with open(path, "w") as f:
        f.write("\n".join(lines))


def merge(paths: list[str], out: str) -> None:
    """Merge results files of parts run side by side (``--part``), or of models re-run
    (``--only``), into ``out``. A file that re-runs models already merged is recorded in
    ``_meta["reruns"]`` (date, models, tools), which the table lists."""
    from zoo_models import all_cases

    merged: dict = {}
    reruns: list = []
    for path in paths:  # later files win, tool by tool
        with open(path) as f:
            results = json.load(f)
        meta = results.get("_meta", {})
        reruns += [r for r in meta.get("reruns", []) if r not in reruns]
        again = [n for n in results if not n.startswith("_") and n in merged]
        if again:
            tools = sorted({t for n in again for t in results[n].get("tools", {})})
            record = {"date": meta.get("date", "?"), "models": again, "tools": tools}
            reruns += [record] if record not in reruns else []
        for name, entry in results.items():
            if name.startswith("_") or name not in merged:
                merged[name] = entry
                continue
            tools = dict(merged[name].get("tools", {}))
            tools.update(entry.get("tools", {}))
            merged[name] = dict(entry, tools=tools)
    if reruns:
        merged["_meta"] = dict(merged.get("_meta", {}), reruns=reruns)
    order = [c.name for c in all_cases()] + ["_meta"]
    with open(out, "w") as f:
        json.dump({k: merged[k] for k in order if k in merged}, f, indent=1)


def versions() -> dict:
    import timm
    import torchvision
    import transformers

    return {
        "date": datetime.date.today().isoformat(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "timm": timm.__version__,
        "transformers": transformers.__version__,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", help="model name (repeatable)")
    parser.add_argument("--tools", default=",".join(TOOLS))
    parser.add_argument("--limit", type=int, default=300, help="seconds per step")
    parser.add_argument("--results", default=RESULTS)
    parser.add_argument("--table", default=TABLE)
    parser.add_argument("--list", action="store_true", help="list the models and stop")
    parser.add_argument("--table-only", action="store_true", help="rewrite the table only")
    parser.add_argument("--part", help="I/N: run every N-th model from the I-th (1-based)")
    parser.add_argument("--merge", nargs="+", help="merge these results files, then the table")
    parser.add_argument("--reload", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.reload:
        reload_all(opts.reload)
        return
    if opts.merge:
        merge(opts.merge, opts.results)
    if opts.table_only or opts.merge:
        with open(opts.results) as f:
            write_table(json.load(f), opts.table)
        return
    from zoo_models import all_cases

    torch.set_num_threads(THREADS)
    cases = all_cases()
    if opts.list:
        for case in cases:
            print(f"{case.name:40s} {case.category:25s} {case.source}")
        return
    if opts.only:
        known = {c.name for c in cases}
        unknown = [n for n in opts.only if n not in known]
        if unknown:
            raise SystemExit(f"unknown model(s) {unknown}; see --list")
        cases = [c for c in cases if c.name in opts.only]
    if opts.part:
        first, count = (int(n) for n in opts.part.split("/"))
        cases = cases[first - 1 :: count]
    tools = [t for t in opts.tools.split(",") if t]
    results = {}
    if os.path.exists(opts.results):
        with open(opts.results) as f:
            results = json.load(f)
    old_names = {n for n in results if not n.startswith("_")}
    with tempfile.TemporaryDirectory() as workdir:
        fresh, reloads = {}, []
        for index, case in enumerate(cases):
            print(f"[{index + 1}/{len(cases)}] {case.name}", flush=True)
            try:
                # A bar on a terminal: which tool is at work, and for how long.
                with track(f"  {case.name}"):
                    entry, more = run_case(case, tools, workdir, index, opts.limit)
            except Exception:
                traceback.print_exc()
                continue
            fresh[case.name] = entry
            reloads += more
            for tool, cell in entry["tools"].items():
                print(f"    {tool:12s} {verdict(cell)[0]:6s} {verdict(cell)[1][:150]}", flush=True)
        print("reloading every artifact in a fresh process", flush=True)
        after = run_reloads(reloads, workdir) if reloads else {}
    for name, entry in fresh.items():
        for tool, cell in entry["tools"].items():
            if (name, tool) in after:
                cell["reload"] = after[(name, tool)]
        old = results.get(name, {}).get("tools", {})
        merged = dict(old)
        merged.update(entry["tools"])  # a tool not run this time keeps its last result
        entry["tools"] = merged
        results[name] = entry
    order = [c.name for c in all_cases()]
    earlier = results.get("_meta", {})  # read before the reordering below drops it
    results = {k: results[k] for k in order if k in results}
    meta = versions()
    if opts.only or opts.part:  # some models again: the table says which, after the full run
        reruns = earlier.get("reruns", [])
        again = [n for n in fresh if n in old_names]
        if again:
            reruns = reruns + [{"date": meta["date"], "models": again, "tools": tools}]
        if reruns:
            meta["reruns"] = reruns
    results["_meta"] = meta
    with open(opts.results, "w") as f:
        json.dump(results, f, indent=1)
    write_table(results, opts.table)
    for name, entry in fresh.items():
        print(f"{name:40s} " + " ".join(f"{t}={verdict(entry['tools'].get(t))[0]}" for t in TOOLS))
    print(f"table: {os.path.relpath(opts.table, ROOT)}")


if __name__ == "__main__":
    main()
