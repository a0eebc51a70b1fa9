"""Latency of a loaded tracebridge artifact and of torch.jit.trace on zoo models, against eager.

Run from the repository root, in an environment with the zoo's packages
(``requirements-zoo.txt``):

    .venv/bin/python benchmarks/zoo_speed.py --only bert --only "timm vit_tiny"
    .venv/bin/python benchmarks/zoo_speed.py --only bert --no-grad   # both traced without autograd

For each model: trace it on its first input set at batch 1 (tracebridge without
``check_trace``, which changes no graph; torch.jit.trace likewise), save and reload the
artifact, then time eager, the loaded artifact and the traced TorchScript module on that
input under ``torch.no_grad()``, one thread, in interleaved single calls (each contender
in a new random order every round), and report the minimum (the figure least disturbed by
other processes on a shared machine) and each tool's ratio to eager. The last line is the
median ratio over the models both tools ran, the figure issue 20 compares.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import sys
import tempfile
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

import torch  # noqa: E402

import tracebridge  # noqa: E402
import zoo_env  # noqa: E402, F401 - before torchvision
from zoo_models import all_cases  # noqa: E402


def _batch_one(inputs: tuple) -> tuple:
    """The first input set cut to batch 1 (every tensor's first dimension)."""
    return tuple(x[:1] if isinstance(x, torch.Tensor) and x.dim() else x for x in inputs)


def timed(fns: dict, rounds: int) -> dict[str, float]:
    """Minimum seconds per call of each contender over ``rounds`` interleaved single calls."""
    clock = time.perf_counter
    best = {k: float("inf") for k in fns}
    order = list(fns)
    for fn in fns.values():
        for _ in range(3):
            fn()
    for _ in range(rounds):
        random.shuffle(order)
        for key in order:
            start = clock()
            fns[key]()
            best[key] = min(best[key], clock() - start)
    return best


def measure(case, rounds: int, no_grad: bool) -> dict[str, float] | str:
    torch.manual_seed(0)
    model = case.build().eval()
    inputs = _batch_one(case.inputs()[0])
    mode = torch.no_grad() if no_grad else contextlib.nullcontext()
    with warnings.catch_warnings(), mode:
        warnings.simplefilter("ignore")
        traced = tracebridge.trace(model, inputs, check_trace=False)
        try:
            jit = torch.jit.trace(model, inputs, check_trace=False, strict=False)
        except Exception as exc:  # a jit failure leaves tracebridge's figure
            jit = None
            print(f"  {case.name}: torch.jit.trace failed: {type(exc).__name__}", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.tb")
        traced.save(path)
        loaded = tracebridge.load(path)
    fns = {"eager": lambda: model(*inputs), "tracebridge": lambda: loaded(*inputs)}
    if jit is not None:
        fns["jit"] = lambda: jit(*inputs)
    with torch.no_grad():
        return timed(fns, rounds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", required=True, help="zoo model name")
    parser.add_argument("--rounds", type=int, default=200, help="interleaved calls per tool")
    parser.add_argument("--no-grad", action="store_true", help="trace under torch.no_grad()")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    cases = {c.name: c for c in all_cases()}
    ratios: dict[str, list[float]] = {"tracebridge": [], "jit": []}
    print("| model | eager (µs) | tracebridge (µs) | ratio | torch.jit (µs) | ratio |")
    print("|---|---|---|---|---|---|")
    for name in args.only:
        try:
            best = measure(cases[name], args.rounds, args.no_grad)
        except Exception as exc:
            print(f"| {name} | {type(exc).__name__}: {str(exc).splitlines()[0][:80]} |||||")
            continue
        eager = best["eager"]
        cells = [f"{eager * 1e6:.0f}"]
        for tool in ("tracebridge", "jit"):
            if tool in best:
                cells += [f"{best[tool] * 1e6:.0f}", f"{best[tool] / eager:.2f}x"]
            else:
                cells += ["n/a", "n/a"]
        if "jit" in best:
            for tool in ratios:
                ratios[tool].append(best[tool] / eager)
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
    if ratios["jit"]:
        tb, jit = (statistics.median(ratios[t]) for t in ("tracebridge", "jit"))
        print(
            f"\nmedian ratio to eager over {len(ratios['jit'])} models: tracebridge {tb:.2f}x, "
            f"torch.jit {jit:.2f}x"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
