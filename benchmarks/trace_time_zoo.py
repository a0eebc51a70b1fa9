"""First and second trace of one zoo model in a fresh process, then ``torch.jit.trace``:
process CPU seconds, one torch thread, ``tracebridge.trace(model, inputs)`` as
benchmarks/zoo.py calls it (``check_trace`` on).

    PYTHONPATH=python /work/venvs/zoo/bin/python benchmarks/trace_time_zoo.py vit_mae

The name is the start of a zoo model's name (benchmarks/zoo_models.py). A first trace
reads the sources of the modules the model's code comes from; the second finds them read.
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tracebridge  # noqa: E402
import zoo_env  # noqa: E402, F401 - before torchvision
from zoo_models import all_cases  # noqa: E402


def timed(label: str, fn) -> None:
    wall, cpu = time.time(), time.process_time()
    fn()
    print(f"{label}: wall {time.time() - wall:.2f} s cpu {time.process_time() - cpu:.2f} s")


def main(name: str) -> None:
    torch.set_num_threads(1)
    case = next(c for c in all_cases() if c.name.startswith(name))
    torch.manual_seed(0)
    model = case.build().eval()
    inputs = case.inputs()
    with torch.no_grad():
        model(*inputs[0])  # built and called once, as the zoo does before tracing
    warnings.simplefilter("ignore")
    timed(f"{case.name}: tracebridge", lambda: tracebridge.trace(model, inputs[0]))
    timed(f"{case.name}: tracebridge again", lambda: tracebridge.trace(model, inputs[0]))
    timed(f"{case.name}: jit", lambda: torch.jit.trace(model, inputs[0]))


if __name__ == "__main__":
    main(sys.argv[1])
