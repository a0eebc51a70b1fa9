"""Trace time of the bench models: ``tracebridge.trace`` and ``torch.jit.trace``, both with
``check_trace``, interleaved in one process (thread CPU time, one torch thread).

    PYTHONPATH=python .venv/bin/python benchmarks/trace_time.py 11 --jit [model ...]

Prints, per model, each contender's minimum and median in ms over the repeats. On a shared
machine compare the code before and after in alternating processes, and read the ratio
of tracebridge to jit within each process (session 22 in benchmarks/RESULTS.md). Where
jit's own check refuses the model, jit is timed without it (``jit(nocheck)``).
"""

from __future__ import annotations

import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))

import tracebridge  # noqa: E402
from models import CASES  # noqa: E402


def main(argv: list[str]) -> None:
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    repeats = int(argv[0])
    names = [a for a in argv[1:] if not a.startswith("--")] or [
        n for n in CASES if n != "two_methods"
    ]
    for name in names:
        case = CASES[name]()

        def tb(case=case):
            return tracebridge.trace(
                case.model,
                case.example_inputs,
                check_trace=case.check_trace_ok,
                **case.trace_kwargs,
            )

        def jit(case=case, check=case.check_trace_ok):
            return torch.jit.trace(
                case.model, case.example_inputs, check_trace=check, **case.trace_kwargs
            )

        fns = {"tb": tb}
        if "--jit" in argv:
            try:
                jit()
                fns["jit"] = jit
            except Exception:  # jit's own check refuses the model
                fns["jit(nocheck)"] = lambda jit=jit: jit(check=False)
        for fn in fns.values():
            fn()
        samples: dict[str, list[float]] = {k: [] for k in fns}
        for _ in range(repeats):
            for key, fn in fns.items():
                start = time.thread_time()
                fn()
                samples[key].append(time.thread_time() - start)
        cells = " ".join(
            f"{k} min {min(v) * 1e3:.1f} med {statistics.median(v) * 1e3:.1f}"
            for k, v in samples.items()
        )
        print(name, cells, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
