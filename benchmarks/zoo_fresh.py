"""The zoo traced as users often do it: on a model just built, before its first call.

``benchmarks/zoo.py`` calls each model eagerly before tracing it (its expected outputs).
Some libraries set a model up on its first call (transformers installs its output-capturing
hooks then, and marks the model as hooked), so a trace made first meets code paths that
zoo.py never reaches: a freshly built SegFormer failed its own trace check that way
(trace/own_hooks.py). This traces every zoo model with tracebridge as built, then calls the
traced model and the model on every input set, each call seeded alike (models that draw
random numbers), and compares them as zoo.py does (the case's tolerance, at the scale of
the output). One line per model:
``right`` / ``guard`` (a GuardError: the trace refuses that shape) / ``WRONG`` per input
set, or ``FAIL`` and the error.

    PYTHONPATH=python /work/venvs/zoo/bin/python benchmarks/zoo_fresh.py [model ...]
    ... benchmarks/zoo_fresh.py --cases heldout_eleventh:eleventh_round   # another list
"""

from __future__ import annotations

import argparse
import importlib
import time
import warnings

import torch

import tracebridge
from zoo import compare  # zoo.py's comparison (at the scale of the output); imports zoo_env


def run(case) -> str:
    torch.manual_seed(0)
    model = case.build().eval()
    inputs = case.inputs()
    with torch.no_grad():
        traced = tracebridge.trace(model, inputs[0])  # the model's first call is the trace's
        verdicts = []
        for i, args in enumerate(inputs):
            torch.manual_seed(i)
            try:
                got = traced(*args)
            except tracebridge.GuardError:
                verdicts.append("guard")
                continue
            torch.manual_seed(i)
            want = model(*args)
            verdicts.append("WRONG" if compare(want, got, case.tolerance) else "right")
    return " ".join(verdicts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="model names (default: every one)")
    parser.add_argument(
        "--cases", default="zoo_models:all_cases", help="MODULE:FUNCTION giving the cases"
    )
    opts = parser.parse_args()
    module, function = opts.cases.split(":")
    cases = getattr(importlib.import_module(module), function)()
    only = set(opts.models)
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    counts = {"right": 0, "WRONG": 0, "FAIL": 0}
    for case in cases:
        if only and case.name not in only:
            continue
        started = time.time()
        try:
            line = run(case)
            counts["WRONG" if "WRONG" in line else "right"] += 1
        except Exception as exc:
            line = f"FAIL {type(exc).__name__}: {str(exc)[:300]!r}"
            counts["FAIL"] += 1
        print(f"{case.name}: {line} ({time.time() - started:.0f} s)", flush=True)
    print(
        f"{sum(counts.values())} models: {counts['right']} right on every shape the trace "
        f"serves, {counts['WRONG']} wrong, {counts['FAIL']} failed"
    )


if __name__ == "__main__":
    main()
