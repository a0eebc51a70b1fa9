"""Sizes whose residues decide (check/specialise.py, "Residues decide too").

transformers' LongT5 pads a sequence to a multiple of its block only ``if x.shape[dim] %
block_len != 0``: a trace at length 8 took the padding path and refused length 12, where
``torch.jit.trace`` (which bakes the branch and pads by ``-12 % 3 == 0``) is right. Where a
guarded comparison reads a rounded size, the code is traced again at the size cut by 1 and
by 2, and the graphs that take other paths are kept. Every test asserts results against
eager, in process and after save/load.
"""

from __future__ import annotations

import math
import os

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tracebridge
from tracebridge import GuardError

from .graph_helpers import loaded as saved_and_loaded

HERE = os.path.basename(__file__)


# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


class Blocks(nn.Module):
    """LongT5's _split_into_blocks: pad to a multiple of the block, then reshape."""

    def __init__(self, block: int = 3):
        super().__init__()
        self.block = block
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        if x.shape[1] % self.block != 0:
            pad = -x.shape[1] % self.block
            x = F.pad(x, (0, 0, 0, pad))
        blocks = x.reshape(x.shape[0], x.shape[1] // self.block, self.block, x.shape[2])
        return self.proj(blocks).sum(2)


def test_a_branch_on_a_residue_serves_every_length(tmp_path):
    model = Blocks()
    traced = tracebridge.trace(model, torch.randn(2, 8, 4))
    assert len(traced.program.specialised["forward"]) >= 1  # the graph traced at length 6
    loaded = saved_and_loaded(traced, tmp_path)
    for length in (8, 12, 9, 5, 6, 7, 15):
        x = torch.randn(3, length, 4)
        want = model(x)
        assert torch.allclose(traced(x), want, atol=1e-6), length
        assert torch.equal(loaded(x), traced(x)), length


class Even(nn.Module):
    """timm's MobileViT: resize to a multiple of the patch when the image is not one."""

    def forward(self, x):
        h = x.shape[-1]
        new_h = math.ceil(h / 2) * 2
        if new_h != h:
            x = F.interpolate(x, size=(new_h,), mode="linear", align_corners=False)
        return x.reshape(x.shape[0], -1, 2).sum(-1)


def test_a_branch_on_a_rounded_size_serves_both_parities(tmp_path):
    model = Even()
    traced = tracebridge.trace(model, torch.randn(1, 2, 8))
    loaded = saved_and_loaded(traced, tmp_path)
    for n in (8, 7, 10, 13):
        x = torch.randn(1, 2, n)
        assert torch.allclose(traced(x), model(x), atol=1e-6), n
        assert torch.equal(loaded(x), traced(x)), n


CALLS: list[str] = []  # one entry per run (tracing puts back what code sets on a module)


def _record_width(x: torch.Tensor) -> None:
    """Note the width each run sees, out of the trace's sight (text of a traced size kept
    in a list would be guarded: a list may be read by anything later)."""
    with torch._C.DisableTorchFunction():
        CALLS.append(str(x.shape[1]))


class Plain(nn.Module):
    def forward(self, x):
        _record_width(x)
        return x * 2 if x.shape[1] > 4 else x


def test_no_residue_probes_where_no_guard_reads_a_rounded_size():
    CALLS.clear()
    tracebridge.trace(Plain(), torch.randn(2, 8), check_trace=False)
    assert "8" in CALLS and "7" not in CALLS and "6" not in CALLS  # no residue probe
    CALLS.clear()
    tracebridge.trace(Chunks(), torch.randn(2, 8), check_trace=False)
    assert set(CALLS) == {"8"}  # a loop's count is not probed


class Chunks(nn.Module):
    """A loop over the number of whole chunks: a loop's count is not probed."""

    def forward(self, x):
        _record_width(x)
        out = x[:, :0].sum(1)
        for i in range(x.shape[1] // 4):
            out = out + x[:, 4 * i : 4 * i + 4].sum(1)
        return out


def test_a_loop_over_a_rounded_size_is_refused_at_the_line(tmp_path):
    model = Chunks()
    traced = tracebridge.trace(model, torch.randn(2, 8), check_trace=False)
    loaded = saved_and_loaded(traced, tmp_path)
    for n in (8, 9, 11):  # two chunks, as in the example
        x = torch.randn(2, n)
        assert torch.allclose(traced(x), model(x), atol=1e-6), n
    for fn in (traced, loaded):
        with pytest.raises(GuardError) as info:
            fn(torch.randn(2, 12))  # three chunks
        message = str(info.value)
        assert "// 4) == 2, but now it is 3" in message
        assert HERE in message and "for i in range(x.shape[1] // 4):" in message
