"""Two versions of tracebridge side by side in one process, on the same saved zoo artifacts.

A busy machine moves a model's time by 10% between runs, more than most runtime changes
win; calls interleaved in one process see the same load. This loads an older checkout's
``tracebridge`` package under another name (``--old``, a ``python/`` folder) next to the
one on the path, loads each artifact with both, checks that they give the same outputs bit
for bit, and times single calls interleaved in a random order each round (each one's
minimum). The old code is loaded twice (``old`` and ``old again``): their ratio is the
noise of the run.

    PYTHONPATH=$PWD/python /work/venvs/zoo/bin/python benchmarks/zoo_side_by_side.py \\
        --old /work/main/python --save /tmp/zoo_artifacts --rounds 300

Artifacts are made by the *old* code from the zoo's first input set cut to batch 1
(``--save``; kept, so a second run reuses them), so both versions read the same files.
``--clock cpu`` times the calling thread's CPU time, for a machine shared with other jobs;
``--jit`` also times ``torch.jit.trace`` of the model (built again: weights of its own), so
that a change can be read against torch.jit in the same process.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import math
import os
import random
import re
import statistics
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import tracebridge  # noqa: E402
import zoo_env  # noqa: E402, F401 - before torchvision
from zoo import time_limit  # noqa: E402
from zoo_models import all_cases  # noqa: E402
from zoo_speed import _batch_one  # noqa: E402


def load_old(folder: str, name: str = "tracebridge_old"):
    """The package ``folder/tracebridge`` imported as ``name`` (its imports are relative)."""
    init = os.path.join(folder, "tracebridge", "__init__.py")
    spec = importlib.util.spec_from_file_location(
        name, init, submodule_search_locations=[os.path.dirname(init)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def slug(name: str) -> str:
    return re.sub(r"\W+", "_", name)


def artifact(case, old, folder: str, limit: int):
    """The path of ``case``'s artifact traced by the old code, and its inputs."""
    path = os.path.join(folder, slug(case.name) + ".tb")
    inputs_path = path[:-3] + ".inputs.pt"
    if os.path.exists(path) and os.path.exists(inputs_path):
        return path, torch.load(inputs_path)
    with time_limit(limit), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        model = case.build().eval()
        inputs = _batch_one(case.inputs()[0])
        old.trace(model, inputs, check_trace=False).save(path)
    torch.save(inputs, inputs_path)
    return path, inputs


def scripted(case, inputs: tuple, limit: int):
    """``torch.jit.trace`` of a model of ``case`` built as for the artifact (its own
    weights, shared with no other contender)."""
    with time_limit(limit), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        model = case.build().eval()
        return torch.jit.trace(model, inputs, check_trace=False, strict=False)


def same(a, b) -> bool:
    """Bit for bit the same pytree of outputs."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


def timed(fns: dict, rounds: int, budget: float, clock=time.perf_counter) -> dict:
    for fn in fns.values():
        fn()
    start = clock()
    for fn in fns.values():
        fn()
    rounds = max(20, min(rounds, int(budget / max(clock() - start, 1e-9))))
    best = {k: math.inf for k in fns}
    order = list(fns)
    for _ in range(rounds):
        random.shuffle(order)
        for key in order:
            begin = clock()
            fns[key]()
            best[key] = min(best[key], clock() - begin)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True, help="the older checkout's python/ folder")
    parser.add_argument("--save", required=True, help="folder for the artifacts (kept)")
    parser.add_argument("--only", action="append", help="zoo model name (default: all)")
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--budget", type=float, default=3.0, help="timing seconds per model")
    parser.add_argument("--limit", type=int, default=120, help="trace seconds per model")
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="cpu: the calling thread's CPU time (time.thread_time), which time spent "
        "waiting for a core on a busy machine does not inflate",
    )
    parser.add_argument(
        "--jit", action="store_true", help="also torch.jit.trace of the model (its own copy)"
    )
    args = parser.parse_args()
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    torch.set_num_threads(1)
    os.makedirs(args.save, exist_ok=True)
    old = load_old(args.old)
    cases = [c for c in all_cases() if not args.only or c.name in args.only]
    ratios, noise = {}, {}
    for case in cases:
        try:
            path, inputs = artifact(case, old, args.save, args.limit)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                runners = {
                    "old": old.load(path),
                    "old again": old.load(path),
                    "new": tracebridge.load(path),
                }
                if args.jit:
                    runners["jit"] = scripted(case, inputs, args.limit)
            with torch.no_grad():
                outputs = {}
                for key, fn in runners.items():
                    torch.manual_seed(0)  # models that draw (random masking) draw alike
                    outputs[key] = fn(*inputs)
                if not same(outputs["old"], outputs["new"]):
                    print(f"{case.name}: NOT the same outputs", flush=True)
                    continue
                fns = {k: (lambda fn=fn, x=inputs: fn(*x)) for k, fn in runners.items()}
                best = timed(fns, args.rounds, args.budget, clock)
        except Exception as exc:  # a model the old code refuses: nothing to compare
            print(f"{case.name}: skipped ({type(exc).__name__}: {str(exc)[:120]})", flush=True)
            continue
        ratios[case.name] = best["new"] / best["old"]
        noise[case.name] = best["old again"] / best["old"]
        against = ""
        if "jit" in best:
            against = (
                f"; torch.jit {best['jit'] * 1e6:.1f} us, old/jit "
                f"{best['old'] / best['jit']:.3f}, new/jit {best['new'] / best['jit']:.3f}"
            )
        print(
            f"{case.name}: old {best['old'] * 1e6:.1f} us, new {best['new'] * 1e6:.1f} us, "
            f"new/old {ratios[case.name]:.3f} (old again/old {noise[case.name]:.3f}){against}",
            flush=True,
        )
    if ratios:
        values = list(ratios.values())
        geo = math.exp(statistics.fmean(map(math.log, values)))
        print(
            f"\n{len(values)} models, every output bit for bit the old code's: new/old median "
            f"{statistics.median(values):.3f}, geometric mean {geo:.3f}; "
            f"old again/old median {statistics.median(noise.values()):.3f}"
        )
        for name in sorted(ratios, key=ratios.get)[:12]:
            print(f"  {name}: {ratios[name]:.3f} (noise {noise[name]:.3f})")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
