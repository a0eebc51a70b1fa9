"""A review of runtime/lean.py: calls without autograd that run in inference mode inside
must give what eager gives under ``torch.no_grad()``, whatever the caller does around them.

Each test compares a traced (and reloaded) module with the eager module, bit for bit, on a
case the inference-mode plan could get wrong.
"""

from __future__ import annotations

import pytest
import torch
import torch.autograd.forward_ad as forward_ad
from torch import nn

import tracebridge
from tracebridge.runtime import lean

pytestmark = pytest.mark.usefixtures("quiet_warnings")


def _loaded(module: nn.Module, inputs: tuple, tmp_path):
    traced = tracebridge.trace(module, inputs, check_trace=False)
    traced.save(tmp_path / "m.tb")
    return tracebridge.load(tmp_path / "m.tb")


@pytest.fixture
def no_copies():
    """The analysis left no output to the safety net's copy (lean.COPIES)."""
    before = lean.COPIES[0]
    yield
    assert lean.COPIES[0] == before


class TwoLayers(nn.Module):
    """A hidden value that never leaves the call (made in inference mode inside)."""

    def __init__(self):
        super().__init__()
        self.first = nn.Linear(8, 8)
        self.second = nn.Linear(8, 8)

    def forward(self, x):
        return self.second(torch.relu(self.first(x)))


def test_forward_mode_ad_under_no_grad_keeps_its_tangents(tmp_path):
    # torch.no_grad() leaves forward-mode AD on (dual tensors carry tangents through it);
    # inference mode turns it off, so a value made inside would lose its tangent.
    torch.manual_seed(0)
    module = TwoLayers()
    x, tangent = torch.randn(3, 8), torch.randn(3, 8)
    loaded = _loaded(module, (x,), tmp_path)
    with torch.no_grad(), forward_ad.dual_level():
        dual = forward_ad.make_dual(x, tangent)
        expected = forward_ad.unpack_dual(module(dual))
        got = forward_ad.unpack_dual(loaded(dual))
    assert expected.tangent is not None
    assert got.tangent is not None
    assert torch.equal(got.primal, expected.primal)
    assert torch.equal(got.tangent, expected.tangent)
