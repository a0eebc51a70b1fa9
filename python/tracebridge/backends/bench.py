"""Measure compile time and per-call latency: eager vs traced vs compiled, for a small CNN.

    python -m tracebridge.backends.bench [--batch 8] [--size 32] [--calls 200]

Prints a Markdown table (the figures in docs/compile.md come from it). Each latency is the
median of ``--calls`` calls after the first; "first call" is timed separately, to show that
``compile`` pays the compiler's cost up front.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from .. import api
from .api import compile


class BenchCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1),
            nn.BatchNorm2d(64),
            nn.ReLU(),
        )
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        x = self.features(x).mean(dim=(2, 3))
        return self.head(x).softmax(-1)


def _first_call(fn, x) -> float:
    start = time.perf_counter()
    fn(x)
    return time.perf_counter() - start


def _interleaved(fns: list, x, calls: int) -> list[tuple[float, float]]:
    """Median and minimum per-call time of each function, calling them in turn so that load
    from other processes falls on all of them alike (the minimum is the least disturbed)."""
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(calls):
        for index, fn in enumerate(fns):
            start = time.perf_counter()
            fn(x)
            times[index].append(time.perf_counter() - start)
    return [(statistics.median(t), min(t)) for t in times]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    opts = parser.parse_args(argv)
    if opts.threads:
        torch.set_num_threads(opts.threads)
    torch.manual_seed(0)
    model = BenchCNN().eval()
    x = torch.rand(opts.batch, 3, opts.size, opts.size)
    builds = [
        ("eager", lambda: model),
        ("tracebridge.trace", lambda: api.trace(model, x)),
        ("compile reference", lambda: compile(model, x, backend="reference")),
        ("compile inductor", lambda: compile(model, x)),
    ]
    rows = []
    for name, make in builds:
        start = time.perf_counter()
        obj = make()
        seconds = time.perf_counter() - start
        coverage = getattr(obj, "coverage", None)
        cov = f"{coverage.compiled}/{coverage.total}" if coverage else "-"
        with torch.no_grad():
            first = _first_call(obj, x)
        rows.append((name, seconds, first, obj, cov))
    with torch.no_grad():
        medians = _interleaved([row[3] for row in rows], x, opts.calls)
    print(
        f"small CNN, input {list(x.shape)}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, median of {opts.calls} interleaved calls "
        "under no_grad\n"
    )
    print(
        "| what | build (s) | first call (ms) | median call (ms) | fastest call (ms) | "
        "ops compiled |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for (name, build, first, _, cov), (median, fastest) in zip(rows, medians):
        print(
            f"| {name} | {build:.2f} | {first * 1e3:.2f} | {median * 1e3:.3f} | "
            f"{fastest * 1e3:.3f} | {cov} |"
        )


if __name__ == "__main__":
    main()
