"""Latency at batch 1 of a frozen tracebridge artifact against torch.jit, frozen and not.

Four contenders per model, under ``torch.no_grad()`` with one thread, in interleaved single
calls (a new random order every round, as benchmarks/zoo_speed.py times them): the loaded
tracebridge artifact (``tb``), ``tracebridge.freeze`` of it (``tb_frozen``: no per-call
state checks, runtime/frozen.py), ``torch.jit.trace`` (``jit``) and
``torch.jit.freeze(torch.jit.trace(...))`` (``jit_frozen``). Each figure is the minimum
microseconds per call (the least disturbed on a shared machine) and, with ``--median``,
the median too. Before timing, the frozen artifact must give the loaded one's output bit
for bit, and each contender eager's within the case's tolerance.

    PYTHONPATH=$PWD/python /work/venvs/zoo/bin/python benchmarks/frozen_speed.py \\
        --zoo mobilenet_v3_small --zoo mnasnet0_5 --bench cnn_eval --bench resnet
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import statistics
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402

import tracebridge  # noqa: E402
from zoo_speed import reloaded  # noqa: E402

DEFAULT_ZOO = ["mobilenet_v3_small", "mnasnet0_5", "shufflenet_v2_x0_5", "resnet18"]
DEFAULT_BENCH = ["cnn_eval", "resnet", "transformer", "tiny_gpt", "mlp"]
TOOLS = ("tb", "tb_frozen", "jit", "jit_frozen")


def contenders(model, inputs: tuple) -> dict:
    """Each tool's module for ``model`` (eval) traced at ``inputs``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracebridge.trace(model, inputs, check_trace=False)
        loaded = reloaded(traced)
        jit = torch.jit.trace(copy.deepcopy(model), inputs, check_trace=False, strict=False)
        jit_frozen = torch.jit.freeze(
            torch.jit.trace(copy.deepcopy(model), inputs, check_trace=False, strict=False)
        )
    return {
        "tb": loaded,
        "tb_frozen": tracebridge.freeze(loaded),
        "jit": jit,
        "jit_frozen": jit_frozen,
    }


def _leaves(out) -> list:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return [leaf for item in out for leaf in _leaves(item)]
    return []


def timed(fns: dict, rounds: int) -> dict:
    """Every contender's seconds per call over interleaved single calls, after warm-up."""
    clock = time.perf_counter
    samples = {k: [] for k in fns}
    order = list(fns)
    for fn in fns.values():
        for _ in range(5):
            fn()
    for _ in range(rounds):
        random.shuffle(order)
        for key in order:
            start = clock()
            fns[key]()
            samples[key].append(clock() - start)
    return samples


def measure(model, inputs: tuple, rounds: int, atol: float) -> dict:
    entry: dict = {}
    model = model.eval()
    runners = contenders(model, inputs)
    with torch.no_grad():
        expected = _leaves(model(*inputs))
        loaded = _leaves(runners["tb"](*inputs))
        frozen = _leaves(runners["tb_frozen"](*inputs))
        entry["frozen_bits_equal"] = all(map(torch.equal, loaded, frozen))
        for tool, runner in runners.items():
            got = _leaves(runner(*inputs))
            close = all(torch.allclose(a, b, atol=atol, rtol=atol) for a, b in zip(got, expected))
            entry[f"{tool}_right"] = close and len(got) == len(expected)
        samples = timed({k: (lambda r=r: r(*inputs)) for k, r in runners.items()}, rounds)
    for tool, seconds in samples.items():
        entry[f"{tool}_min_us"] = round(min(seconds) * 1e6, 1)
        entry[f"{tool}_median_us"] = round(statistics.median(seconds) * 1e6, 1)
    for tool in ("tb", "tb_frozen"):
        for base in ("jit", "jit_frozen"):
            entry[f"{tool}/{base}"] = round(entry[f"{tool}_min_us"] / entry[f"{base}_min_us"], 3)
    return entry


def _zoo_cases(names: list[str]):
    import zoo_env  # noqa: F401 - before torchvision
    from zoo_models import all_cases
    from zoo_speed import _batch_one

    cases = {c.name: c for c in all_cases()}
    for name in names:
        case = cases[name]
        torch.manual_seed(0)
        yield name, case.build(), _batch_one(case.inputs()[0]), 1e-4


def _bench_cases(names: list[str]):
    sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
    from models import CASES

    for name in names:
        case = CASES[name]()
        inputs = case.make_inputs(1) if case.make_inputs else case.example_inputs
        inputs = inputs if isinstance(inputs, tuple) else (inputs,)
        yield name, case.model, inputs, max(case.atol, 1e-5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zoo", action="append", help=f"zoo model (default {DEFAULT_ZOO})")
    parser.add_argument("--bench", action="append", help=f"bench model (default {DEFAULT_BENCH})")
    parser.add_argument("--no-zoo", action="store_true", help="the bench models only")
    parser.add_argument("--no-bench", action="store_true", help="the zoo models only")
    parser.add_argument("--rounds", type=int, default=300, help="interleaved rounds")
    parser.add_argument("--json", help="write the entries here")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    random.seed(0)
    results = {}
    sources = [] if args.no_bench else [_bench_cases(args.bench or DEFAULT_BENCH)]
    if not args.no_zoo:
        sources.insert(0, _zoo_cases(args.zoo or DEFAULT_ZOO))
    for source in sources:
        for name, model, inputs, atol in source:
            entry = measure(model, inputs, args.rounds, atol)
            results[name] = entry
            print(f"{name}: {json.dumps(entry)}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
