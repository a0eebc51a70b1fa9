"""CPU bench: tracebridge.compile against torch.compile of the same model, same mode, side by side.

Run from the repository root:

    .venv/bin/python benchmarks/bench_compile.py                      # mlp, cnn_eval, transformer
    .venv/bin/python benchmarks/bench_compile.py --models mlp --modes default max-autotune

For each model of the conformance zoo (tests/python/models.py) at ``--batch`` (16), each
``--modes`` mode and each way of handling sizes (``dynamic``: ``torch.compile(...,
dynamic=True)`` against tracebridge's default ``--dynamic``; ``auto``: ``torch.compile``'s
default ``dynamic=None`` against ``--auto-dynamic``), it prints the median per-call latency
of both, their ratio (tracebridge / torch.compile: the goal is <= 1.05) and both build
times (a warm inductor cache makes the second build of the same kernels cheap: the build
column is not a comparison). Calls run under ``torch.no_grad()`` on one thread, the two
contenders interleaved in a shuffled order (bench_python.interleaved), timed with the
thread's CPU clock, which a busy machine does not inflate.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tracebridge  # noqa: E402
from bench_python import CLOCK, interleaved  # noqa: E402 (also puts the zoo on the path)
from models import CASES  # noqa: E402
from results_md import write_results  # noqa: E402

DYNAMIC = {"dynamic": (True, ["--dynamic"]), "auto": (None, ["--auto-dynamic"])}


def _build(fn):
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = fn()
    return result, time.perf_counter() - start


def measure(name: str, batch: int, mode: str, dynamic: str, repeats: int) -> list[str]:
    case = CASES[name]()
    model = case.model.eval()
    inputs = case.make_inputs(batch) if case.make_inputs else case.example_inputs
    torch_dynamic, tb_args = DYNAMIC[dynamic]
    torch_mode = None if mode == "default" else mode

    def torch_build():
        compiled = torch.compile(model, mode=torch_mode, dynamic=torch_dynamic)
        with torch.no_grad():
            compiled(*inputs)
        return compiled

    ours, tb_build = _build(lambda: tracebridge.compile(model, inputs, ["--mode", mode, *tb_args]))
    theirs, torch_build_s = _build(torch_build)
    with torch.no_grad():
        times = interleaved(
            {"torch": lambda: theirs(*inputs), "tb": lambda: ours(*inputs)}, repeats
        )
    ratio = times["tb"] / times["torch"]
    torch._dynamo.reset()
    return [
        name,
        str(batch),
        mode,
        dynamic,
        f"{times['torch'] * 1e6:.0f}",
        f"{times['tb'] * 1e6:.0f}",
        f"{ratio:.3f}",
        f"{torch_build_s:.1f}",
        f"{tb_build:.1f}",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=["mlp", "cnn_eval", "transformer"])
    parser.add_argument("--modes", nargs="*", default=["default"])
    parser.add_argument(
        "--dynamic",
        nargs="*",
        default=list(DYNAMIC),
        choices=list(DYNAMIC),
        help="ways of handling sizes (both by default; --dynamic alone: dynamic only)",
    )
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=31)
    parser.add_argument(
        "--no-fastpath",
        action="store_true",
        help="turn off PyTorch's fused encoder-layer fast path (torch.backends.mha), which "
        "eager nn.TransformerEncoderLayer takes under no_grad and a trace (recorded with "
        "autograd on) does not: the same graph for both contenders",
    )
    parser.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    args = parser.parse_args(argv)
    args.dynamic = args.dynamic or ["dynamic"]  # a bare --dynamic printed an empty table
    if args.no_fastpath:
        torch.backends.mha.set_fastpath_enabled(False)
    torch.set_num_threads(1)
    CLOCK[0] = time.thread_time
    random.seed(0)
    header = [
        "model",
        "batch",
        "mode",
        "sizes",
        "torch.compile (µs)",
        "tracebridge.compile (µs)",
        "ratio",
        "torch build (s)",
        "tb build (s)",
    ]
    rows = []
    for name in args.models:
        for mode in args.modes:
            for dynamic in args.dynamic:
                print(f"[bench] {name} {mode} {dynamic}", file=sys.stderr, flush=True)
                rows.append(measure(name, args.batch, mode, dynamic, args.repeats))
    fastpath = ", MHA fast path off" if args.no_fastpath else ""
    command = " ".join(["python benchmarks/bench_compile.py", *(argv or sys.argv[1:])])
    lines = [
        "### tracebridge.compile against torch.compile on the CPU (µs per call, median)",
        "",
        f"`{command}`: torch {torch.__version__}, 1 thread, CPU clock, median of "
        f"{args.repeats} blocks{fastpath}, {time.strftime('%Y-%m-%d')}.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(row) + " |" for row in rows),
    ]
    print("\n".join(lines))
    if args.write:
        write_results("\n".join(lines), "bench_compile")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
