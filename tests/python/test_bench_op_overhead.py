"""benchmarks/bench_op_overhead.py: each op's chain gives the same values as Python and as
a scripted function (the two sides time the same work), and the table has a row per op."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import torch

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")
sys.path.insert(0, os.path.abspath(BENCH))

import bench_op_overhead  # noqa: E402


def test_both_sides_of_every_chain_compute_the_same():
    x, w, b, W = torch.randn(1, 17, 32), torch.randn(32), torch.randn(32), torch.randn(32, 32)
    with tempfile.TemporaryDirectory() as folder:
        for index, step in enumerate(bench_op_overhead.STEPS.values()):
            name = f"check_{index}"
            source = bench_op_overhead._chained(step, 3, name)
            python = bench_op_overhead._load(source, Path(folder), name)
            scripted = torch.jit.script(python)
            torch.testing.assert_close(
                scripted(x.clone(), w, b, W), python(x.clone(), w, b, W), rtol=0, atol=0
            )


def test_the_table_has_a_row_per_op(capsys):
    assert bench_op_overhead.main(["--chain", "2", "--repeats", "2"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + len(bench_op_overhead.STEPS)  # the header and one per op
