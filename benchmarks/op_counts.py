"""Which ATen ops a loaded artifact runs more of, or longer, than torch.jit, per zoo model.

Note: why this, and not a timing. On a shared machine a model's time moves by 5-10%
between runs, more than most gaps to torch.jit; the ops each call runs do not move. For
each model this traces it at batch 1 (tracebridge saved and reloaded, torch.jit.trace),
profiles single calls of each, interleaved, under ``torch.no_grad()`` on one thread, and
prints the ops where the two differ most: each op's calls a call, and its self time (the
minimum over the profiled calls, in microseconds). Ops that only change their name
(``gelu_`` run in place for ``gelu``, ``conv2d`` for jit's ``_convolution``) show up
too; a kernel that works per channel or per element where the other does not shows up as
hundreds of small calls (session 19: a dilated convolution with a folded bias ran
``select``, ``fill_`` and ``copy_`` once per output channel, 768 of each a call).

    PYTHONPATH=$PWD/python /work/venvs/zoo/bin/python benchmarks/op_counts.py \\
        --only deeplabv3_mobilenet_v3_large --only shufflenet_v2_x0_5

``--frozen`` compares the frozen programs instead: ``tracebridge.freeze`` of the loaded
artifact against ``torch.jit.freeze`` of the torch.jit module (what jit's frozen-graph
passes leave to run).
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

import torch  # noqa: E402
from torch.profiler import profile  # noqa: E402

import tracebridge  # noqa: E402
import zoo_env  # noqa: E402, F401 - before torchvision
from zoo import time_limit  # noqa: E402
from zoo_models import all_cases  # noqa: E402
from zoo_speed import _batch_one, reloaded  # noqa: E402


def _runners(case, frozen: bool = False) -> dict:
    """The loaded tracebridge artifact's call and torch.jit's, on the case's batch-1 input
    (``frozen``: ``tracebridge.freeze`` of the one, ``torch.jit.freeze`` of the other)."""
    torch.manual_seed(0)
    model = case.build().eval()
    inputs = _batch_one(case.inputs()[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracebridge.trace(model, inputs, check_trace=False)
        loaded = reloaded(traced)
        scripted = torch.jit.trace(model, inputs, check_trace=False, strict=False)
        if frozen:
            loaded, scripted = tracebridge.freeze(loaded), torch.jit.freeze(scripted)
    return {"tracebridge": lambda: loaded(*inputs), "jit": lambda: scripted(*inputs)}


def op_profile(runners: dict, rounds: int) -> dict:
    """Per runner: ``{op: [calls a call, minimum self microseconds a call]}``."""
    found: dict = {key: {} for key in runners}
    order = list(runners)
    with torch.no_grad():
        for run in runners.values():
            for _ in range(3):
                run()
        for _ in range(rounds):
            random.shuffle(order)
            for key in order:
                with profile() as prof:
                    runners[key]()
                calls: collections.Counter = collections.Counter()
                micros: dict = collections.defaultdict(float)
                for event in prof.events():
                    calls[event.name] += 1
                    micros[event.name] += event.self_cpu_time_total
                table = found[key]
                for name in set(table) | set(calls):
                    best = table.get(name, [0, float("inf")])[1]
                    table[name] = [calls[name], min(best, micros.get(name, 0.0))]
    return found


def differences(found: dict, top: int) -> list[str]:
    """Lines for the ops whose self time differs most (tracebridge's more first)."""
    ours, theirs = found["tracebridge"], found["jit"]
    rows = []
    for name in set(ours) | set(theirs):
        a, b = ours.get(name, [0, 0.0]), theirs.get(name, [0, 0.0])
        rows.append((a[1] - b[1], name, a, b))
    rows.sort(key=lambda row: -abs(row[0]))
    return [
        f"  {delta:+9.1f} us  {name[:40]:40s} calls {a[0]:5d} vs {b[0]:5d}"
        f"  ({a[1]:.1f} vs {b[1]:.1f} us)"
        for delta, name, a, b in rows[:top]
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", help="zoo model name (default: all)")
    parser.add_argument("--rounds", type=int, default=5, help="profiled calls of each")
    parser.add_argument("--top", type=int, default=10, help="ops shown per model")
    parser.add_argument("--limit", type=int, default=300, help="seconds per model")
    parser.add_argument("--frozen", action="store_true", help="both tools' frozen programs")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    for case in all_cases():
        if args.only and case.name not in args.only:
            continue
        try:
            with time_limit(args.limit):
                found = op_profile(_runners(case, args.frozen), args.rounds)
        except Exception as exc:  # a model a tool refuses: say so and go on
            print(f"{case.name}: failed ({type(exc).__name__}: {str(exc)[:120]})", flush=True)
            continue
        totals = {key: sum(v[1] for v in table.values()) for key, table in found.items()}
        print(
            f"{case.name}: self time a call {totals['tracebridge']:.0f} us (tracebridge) "
            f"against {totals['jit']:.0f} us (torch.jit)",
            flush=True,
        )
        print("\n".join(differences(found, args.top)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
