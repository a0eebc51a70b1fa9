"""benchmarks/state_checks.py: it finds the state checks a loaded artifact runs on each
call without autograd, and counts the tensors each one reads."""

from __future__ import annotations

import os
import sys

import pytest
import torch
from torch import nn

from .models import conv_bn_relus

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")
sys.path.insert(0, os.path.abspath(BENCH))

state_checks = pytest.importorskip("state_checks")


def test_the_fold_keys_on_the_convolution_and_its_norm_and_the_types_on_what_is_read():
    entry = state_checks.measure(conv_bn_relus(12), (torch.randn(1, 4, 8, 8),), rounds=2)
    # per block: conv weight and bias; norm weight, bias, running mean and variance; the
    # norm's num_batches_tracked (a training step moves its version, not the statistics');
    # and the head's weight, run transposed by addmm (runtime/linear_2d.py)
    assert entry["fold_tensors"] == 12 * 7 + 1
    # the state tensors the code itself reads (runtime/lean.py): the head's bias only;
    # the blocks' six and the head's weight are read by the folded function alone, whose
    # results' types the code checks instead
    assert entry["type_tensors"] == 1
    assert {"fold_cold_us", "fold_warm_us", "types_cold_us", "call_cold_us"} <= set(entry)


def test_the_fold_checks_passes_are_timed_on_request():
    entry = state_checks.measure(
        conv_bn_relus(12), (torch.randn(1, 4, 8, 8),), rounds=2, passes=True
    )
    for name in ("reads", "reads_versions", "reads_pointers", "reads_versions_pointers"):
        assert entry[f"{name}_cold_us"] > 0 and entry[f"{name}_warm_us"] > 0


def test_a_model_without_state_has_no_checks():
    model = nn.ReLU()
    entry = state_checks.measure(model, (torch.randn(2, 3),), rounds=2)
    assert entry["fold_tensors"] == entry["type_tensors"] == 0
    assert "fold_cold_us" not in entry and "types_cold_us" not in entry
    assert entry["cold_share"] == 0


state_checks_share = pytest.importorskip("state_checks_share")


def test_the_unchecked_load_runs_the_same_code_without_reading_the_state(tmp_path):
    """benchmarks/state_checks_share.py: its second load gives the checked load's output
    bit for bit, and, its checks patched out, does not see a change of the state (what an
    opt-in frozen mode would promise away); the checked load does."""
    import tracebridge

    model = conv_bn_relus(12)
    x = torch.randn(1, 4, 8, 8)
    path = str(tmp_path / "model.tb")
    tracebridge.trace(model, (x,)).save(path)
    checked = state_checks_share.unsealed(tracebridge.load(path))
    bare = state_checks_share.unchecked(tracebridge.load(path), (x,))
    with torch.no_grad():
        assert torch.equal(checked(x), bare(x))
        before = bare(x)
        for loaded in (checked, bare):
            getattr(loaded, "34").bias.add_(1)  # the last norm's shift: folded
        assert not torch.equal(checked(x), before)
        assert torch.equal(bare(x), before)  # stale: the check is what it leaves out
    best = state_checks_share.measure(model, (x,), rounds=2)
    assert set(best) == {"eager", "tracebridge", "unchecked", "jit"}
    assert all(us > 0 for us in best.values())
