"""A zoo model's loaded artifact against torch.jit.trace, timed interleaved and warm.

Note: why both. ``zoo_speed.py`` times each contender right after the others (interleaved
single calls), so each call starts with caches the other models' calls have filled; a
server calling one model in a row sees warm calls. Timing the same artifacts both ways in
one process tells a gap in the work a call does (it stays when warm) from a gap in what a
call reads from memory (it goes when warm).

    PYTHONPATH=$PWD/python /work/venvs/zoo/bin/python benchmarks/warm_cold.py clip bert

One thread, ``torch.no_grad()``, batch 1 (the zoo's first input set cut to batch 1);
minima of ``--rounds`` interleaved rounds (each in a new random order), then of
``--runs`` runs of ``--calls`` calls in a row per contender.
"""

from __future__ import annotations

import argparse
import copy
import os
import random
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
from zoo_speed import _batch_one  # noqa: E402


def contenders(name: str, folder: str) -> dict:
    """Eager, the loaded artifact and the torch.jit module of zoo model ``name``."""
    case = next((c for c in all_cases() if c.name == name), None)
    if case is None:
        raise SystemExit(f"warm_cold: no zoo model named {name!r} (zoo.py --list)")
    torch.manual_seed(0)
    model = case.build().eval()
    inputs = _batch_one(case.inputs()[0])
    path = os.path.join(folder, "model.tb")
    tracebridge.trace(model, inputs, check_trace=False).save(path)
    loaded = tracebridge.load(path)
    with torch.no_grad():
        scripted = torch.jit.trace(copy.deepcopy(model), inputs, check_trace=False)
    return {
        "eager": lambda: model(*inputs),
        "tb": lambda: loaded(*inputs),
        "jit": lambda: scripted(*inputs),
    }


def timed(fns: dict, rounds: int, runs: int, calls: int) -> tuple[dict, dict]:
    """Minimum seconds a call of each contender: interleaved, then warm."""
    clock = time.perf_counter
    for fn in fns.values():
        for _ in range(10):
            fn()
    cold = {k: float("inf") for k in fns}
    for _ in range(rounds):
        order = list(fns)
        random.shuffle(order)
        for k in order:
            start = clock()
            fns[k]()
            cold[k] = min(cold[k], clock() - start)
    warm = {k: float("inf") for k in fns}
    for _ in range(runs):
        for k, fn in fns.items():
            for _ in range(calls):
                start = clock()
                fn()
                warm[k] = min(warm[k], clock() - start)
    return cold, warm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", help="zoo model names")
    parser.add_argument("--rounds", type=int, default=150, help="interleaved rounds")
    parser.add_argument("--runs", type=int, default=5, help="warm runs per contender")
    parser.add_argument("--calls", type=int, default=30, help="calls in a row per run")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    random.seed(0)
    for name in args.models:
        with tempfile.TemporaryDirectory() as folder, torch.no_grad():
            cold, warm = timed(contenders(name, folder), args.rounds, args.runs, args.calls)
        for label, best in (("interleaved", cold), ("warm", warm)):
            us = {k: round(v * 1e6) for k, v in best.items()}
            print(f"{name}: {label}: {us} tb/jit {best['tb'] / best['jit']:.3f}", flush=True)


if __name__ == "__main__":
    main()
