"""Deployment benchmark: eager, torch.jit.trace, torch.compile, CUDA graphs, tracebridge.

Per-call latency (median, µs) of each way to run a model, side by side in one process:
eager PyTorch, ``torch.jit.trace``, ``torch.compile`` per mode, CUDA graph replay (CUDA
only), a tracebridge trace, ``tracebridge.compile`` per mode, and an artifact with an
AOTInductor package loaded with ``tracebridge.load_compiled(..., trust_compiled_code=True)``
(its load + first call is reported too). Models: a ResNet-style CNN (no torchvision), a
transformer encoder (4 layers, 256 wide, sequence 128) at batch 1 and 16, an MLP
512-2048-2048-10 at batch 16, a 4-layer GPT-2-style decoder in bfloat16 at batch 1 and 16.

    python benchmarks/bench_gpu.py                   # CUDA; exits 0 with a message without it
    python benchmarks/bench_gpu.py --device cpu      # the same code paths on the CPU
    python benchmarks/bench_gpu.py --device cpu --write   # update benchmarks/RESULTS.md
    python benchmarks/bench_gpu.py --device cpu --quick   # tiny models: a smoke run

On the CPU the models are smaller (``--small``, the default there: 64x64 images, a
GPT-2 of width 256 and vocabulary 8192) and one thread runs them, so that a run takes
minutes on a shared machine; ``reduce-overhead`` and CUDA graphs are CUDA features and
are skipped there unless ``--modes`` names them. ``--quick`` runs every row and column on
tiny models with few repeats (its figures say only that each path runs). The "AOT load"
column times ``load_compiled`` alone, "AOT load + 1st call" adds the first call, whose own
compute dominates at batch 16.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

import tracebridge  # noqa: E402
from resnet_like import ResNet18Like  # noqa: E402
from results_md import write_results  # noqa: E402

# --------------------------------------------------------------------------- models


class DecoderBlock(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class GPT2ish(nn.Module):
    """A GPT-2-style decoder: token and position embeddings, pre-norm blocks, tied head."""

    def __init__(self, layers: int, width: int, heads: int, vocab: int, context: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(context, width)
        self.blocks = nn.Sequential(*[DecoderBlock(width, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, ids):
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.blocks(self.tok(ids) + self.pos(positions))
        return self.head(self.ln(x))


@dataclass
class Case:
    name: str
    batch: int
    make: Callable[[], nn.Module]
    inputs: Callable[[int, str], tuple]
    dtype: torch.dtype = torch.float32


# Model sizes: "full" is the table (GPU), "small" the CPU default, "quick" a smoke
# run of every row and column in a few minutes on one CPU core (sizes far from real use).
SIZES = {
    "full": dict(side=224, mlp=(512, 2048), enc=(256, 4, 1024, 4, 128), gpt=(4, 768, 12, 50257)),
    "small": dict(side=64, mlp=(512, 2048), enc=(256, 4, 1024, 4, 128), gpt=(4, 256, 4, 8192)),
    "quick": dict(side=32, mlp=(64, 256), enc=(64, 2, 128, 2, 16), gpt=(2, 64, 2, 512)),
}


SIZE_NOTES = {"quick": "tiny models (--quick), ", "small": "small models (--small), "}


def cases(size: str) -> list[Case]:
    """Every row of the table at ``size`` (a key of SIZES)."""
    dims = SIZES[size]
    side = dims["side"]
    width, heads, ff, layers, seq = dims["enc"]
    n_in, hidden = dims["mlp"]
    gpt_layers, gpt_width, gpt_heads, vocab = dims["gpt"]
    gpt = dict(layers=gpt_layers, width=gpt_width, heads=gpt_heads, vocab=vocab, context=seq)

    def encoder():
        layer = nn.TransformerEncoderLayer(width, heads, ff, dropout=0.0, batch_first=True)
        return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def mlp():
        return nn.Sequential(
            nn.Linear(n_in, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, 10),
        )

    def images(b, d):
        return (torch.randn(b, 3, side, side, device=d),)

    def tokens(b, d):
        return (torch.randint(0, vocab, (b, seq), device=d),)

    # cheapest to compile first: a long CPU run that is stopped early keeps the most rows
    out = [
        Case(
            f"MLP {n_in}-{hidden}-{hidden}-10",
            16,
            mlp,
            lambda b, d: (torch.randn(b, n_in, device=d),),
        )
    ]
    for b in (1, 16):
        out.append(
            Case(
                "transformer encoder",
                b,
                encoder,
                lambda b, d: (torch.randn(b, seq, width, device=d),),
            )
        )
    for b in (1, 16):
        out.append(
            Case(
                f"GPT-2-ish {gpt_layers} layers bf16",
                b,
                lambda: GPT2ish(**gpt),
                tokens,
                torch.bfloat16,
            )
        )
    out.append(Case("resnet18-ish", 1, ResNet18Like, images))
    return out


# --------------------------------------------------------------------------- timing


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _block(fn: Callable, args: tuple, device: str, n: int) -> float:
    """Seconds per call over ``n`` calls."""
    _sync(device)
    start = time.perf_counter()
    for _ in range(n):
        fn(*args)
    _sync(device)
    return (time.perf_counter() - start) / n


def interleaved_us(
    fns: dict[str, Callable], args: tuple, device: str, repeats: int, budget_s: float
) -> dict[str, float]:
    """Median µs per call of each function, timed in ``repeats`` rounds that take one block
    of each in turn: on a shared machine, a change of load then hits every contender
    alike, so the ratios of one run hold even where the absolute figures drift."""
    with torch.no_grad():
        calls = {}
        for name, fn in fns.items():
            for _ in range(3):
                fn(*args)
            calls[name] = max(1, min(1000, int(budget_s / max(_block(fn, args, device, 1), 1e-6))))
        samples: dict[str, list[float]] = {name: [] for name in fns}
        for _ in range(repeats):
            for name, fn in fns.items():
                samples[name].append(_block(fn, args, device, calls[name]) * 1e6)
    return {name: statistics.median(values) for name, values in samples.items()}


# --------------------------------------------------------------------------- contenders


def cuda_graph(model, args):
    """Replay of one captured CUDA graph (static inputs: the caller copies into them)."""
    static = [a.clone() for a in args]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.no_grad():
        for _ in range(3):
            model(*static)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        out = model(*static)

    def replay(*inputs):
        for s, a in zip(static, inputs):
            s.copy_(a)
        graph.replay()
        return out

    return replay


def aot_loaded(model, args, workdir: str, notes: dict, device: str):
    """The artifact with its AOTInductor package, loaded trusting it; its load and its
    load + first call are timed in this process (torch and inductor already imported)."""
    traced = tracebridge.trace(model, args, check_trace=False)
    path = os.path.join(workdir, "aot.tb")
    start = time.perf_counter()
    tracebridge.save_compiled(traced, path)  # the trace's sizes, batch kept dynamic
    notes["aot compile (s)"] = time.perf_counter() - start
    _probe_in_a_child(path)
    _sync(device)
    start = time.perf_counter()
    loaded = tracebridge.load_compiled(path, trust_compiled_code=True)
    notes["aot load (s)"] = time.perf_counter() - start
    with torch.no_grad():
        loaded(*args)
    _sync(device)
    notes["aot load + first call (s)"] = time.perf_counter() - start
    if loaded.compiled_form != "aot":
        raise RuntimeError(f"the package did not run ({loaded.compiled_reason})")
    return loaded


def _probe_in_a_child(path: str) -> None:
    """Load the package once in a child process first: a crash in native code would end
    this one (on an H200 with torch 2.11, torch's own loader crashed on CUDA packages)."""
    probe = (
        "import sys, tracebridge; tracebridge.load_compiled(sys.argv[1], trust_compiled_code=True)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), *sys.path])}
    done = subprocess.run([sys.executable, "-c", probe, path], env=env, capture_output=True)
    if done.returncode < 0:
        raise RuntimeError(f"the package crashes its process at load (signal {-done.returncode})")


def contenders(device: str, modes: list[str], workdir: str, notes: dict) -> dict[str, Callable]:
    """name -> builder(model, args) returning a callable."""
    out: dict[str, Callable] = {
        "eager": lambda m, a: m,
        "torch.jit.trace": lambda m, a: torch.jit.trace(m, a, check_trace=False),
    }
    for mode in modes:
        out[f"torch.compile {mode}"] = lambda m, a, mode=mode: torch.compile(
            m, mode=None if mode == "default" else mode
        )
    if device == "cuda":
        out["CUDA graph"] = cuda_graph
    out["tracebridge trace"] = lambda m, a: tracebridge.trace(m, a, check_trace=False)
    for mode in modes:
        out[f"tracebridge.compile {mode}"] = lambda m, a, mode=mode: tracebridge.compile(
            m, a, ["--mode", mode], check_trace=False
        )
    out["AOT artifact"] = lambda m, a: aot_loaded(m, a, workdir, notes, device)
    return out


# --------------------------------------------------------------------------- the run


@dataclass
class Row:
    case: Case
    cells: dict[str, str] = field(default_factory=dict)
    times: dict[str, float] = field(default_factory=dict)
    notes: dict[str, float] = field(default_factory=dict)


def run_case(case: Case, args: argparse.Namespace, workdir: str) -> Row:
    """Build every contender (compiling where it compiles), then time them interleaved."""
    row = Row(case)
    torch.manual_seed(0)
    model = case.make().eval().to(args.device, case.dtype)
    inputs = case.inputs(case.batch, args.device)
    built: dict[str, Callable] = {}
    for name, build in contenders(args.device, args.modes, workdir, row.notes).items():
        if args.only and not any(o in name for o in args.only):
            continue
        start = time.perf_counter()
        try:
            with warnings.catch_warnings(), torch.no_grad():
                warnings.simplefilter("ignore")
                fn = build(model, inputs)
                fn(*inputs)  # compiles where compiling is lazy
        except Exception as exc:  # noqa: BLE001 - a contender that fails is a result
            row.cells[name] = f"fails ({type(exc).__name__})"
            print(f"  {name}: {type(exc).__name__}: {str(exc).splitlines()[:1]}", file=sys.stderr)
            continue
        built[name] = fn
        print(f"  {name}: built in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        times = interleaved_us(built, inputs, args.device, args.repeats, args.budget)
    for name, us in times.items():
        row.times[name] = us
        row.cells[name] = f"{us:.0f}" if us >= 100 else f"{us:.1f}"
        print(f"  {name}: {row.cells[name]} µs", file=sys.stderr)
    torch._dynamo.reset()
    return row


def ratio(row: Row, a: str, b: str) -> str:
    if a in row.times and b in row.times:
        return f"{row.times[a] / row.times[b]:.2f}x"
    return "n/a"


def render(rows: list[Row], args: argparse.Namespace, device_name: str) -> str:
    names = list(dict.fromkeys(n for r in rows for n in r.cells))
    lines = [
        f"### Deployment latency on {device_name} (µs per call, median; lower is better)",
        "",
        f"`python benchmarks/bench_gpu.py {' '.join(args.argv)}`: torch {torch.__version__}, "
        f"{SIZE_NOTES.get(args.size, '')}"
        f"{torch.get_num_threads()} thread(s), torch.no_grad(), {args.repeats} repeats, "
        f"{time.strftime('%Y-%m-%d')}.",
        "",
        "| model | batch | " + " | ".join(names) + " |",
        "|---|---|" + "---|" * len(names),
    ]
    for r in rows:
        cells = [r.cells.get(n, "") for n in names]
        lines.append(f"| {r.case.name} | {r.case.batch} | " + " | ".join(cells) + " |")
    goals = [
        "| model | batch | "
        + " | ".join(
            [f"tb.compile / torch.compile ({m})" for m in args.modes]
            + [
                "tb trace / jit.trace",
                "tb reduce-overhead / CUDA graph",
                "AOT load (s)",
                "AOT load + 1st call (s)",
            ]
        )
        + " |"
    ]
    goals.append("|---|---|" + "---|" * (len(args.modes) + 4))
    for r in rows:
        cells = [ratio(r, f"tracebridge.compile {m}", f"torch.compile {m}") for m in args.modes]
        cells.append(ratio(r, "tracebridge trace", "torch.jit.trace"))
        cells.append(ratio(r, "tracebridge.compile reduce-overhead", "CUDA graph"))
        for note in ("aot load (s)", "aot load + first call (s)"):
            seconds = r.notes.get(note)
            cells.append(f"{seconds:.2f}" if seconds is not None else "n/a")
        goals.append(f"| {r.case.name} | {r.case.batch} | " + " | ".join(cells) + " |")
    return "\n".join(lines + ["", "Ratios of the goals (issue 16), same run:", ""] + goals)


def device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"CPU: {line.split(':', 1)[1].strip()}"
    except OSError:
        pass
    return f"CPU: {platform.processor() or platform.machine()}"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--modes", nargs="+", default=None, help="torch.compile modes")
    parser.add_argument("--small", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny models, few repeats: every row and column in minutes (a smoke run)",
    )
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--budget", type=float, default=0.05, help="seconds per timed block")
    parser.add_argument("--models", nargs="+", default=None, help="substrings of model names")
    parser.add_argument("--only", nargs="+", default=None, help="substrings of contender names")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (CPU: 1)")
    parser.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    args = parser.parse_args(argv)
    args.argv = argv
    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            "bench_gpu: CUDA is not available here; nothing measured (--device cpu runs the "
            "same code paths on the CPU)"
        )
        return 0
    cpu = args.device == "cpu"
    args.small = cpu if args.small is None else args.small
    args.size = "quick" if args.quick else "small" if args.small else "full"
    args.modes = args.modes or (
        ["default"] if cpu else ["default", "reduce-overhead", "max-autotune"]
    )
    args.repeats = args.repeats or (3 if args.quick else 7 if cpu else 50)
    if args.quick:
        args.budget = min(args.budget, 0.005)
    if cpu:
        torch.set_num_threads(args.threads or 1)
    name = device_name(args.device)
    print(f"bench_gpu on {name} (torch {torch.__version__})", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_gpu-") as workdir:
        for case in cases(args.size):
            if args.models and not any(m.lower() in case.name.lower() for m in args.models):
                continue
            print(f"{case.name}, batch {case.batch}:", file=sys.stderr, flush=True)
            rows.append(run_case(case, args, workdir))
            if args.write:  # after each model: a long run that is stopped keeps its rows
                write_results(render(rows, args, name), f"bench_gpu_{args.device}")
    print(render(rows, args, name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
