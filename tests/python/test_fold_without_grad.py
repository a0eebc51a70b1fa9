"""A graph that turns gradients off and back on (a rotary embedding under
``torch.no_grad()``, as Hugging Face decoders write it) folds its static part in the code
for calls without autograd, where every op runs with gradients off wherever it stands;
the code for calls with autograd still folds nothing (runtime/folding.py, ``plan``)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tracebridge

from .graph_helpers import loaded, no_grad_code, same_bits

# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


class Experts(nn.Module):
    """An expert weight transposed on every call, and a table made under no_grad."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 8, 6))
        self.register_buffer("inv_freq", torch.rand(4))

    def forward(self, x):
        with torch.no_grad():
            angles = x.new_ones(x.shape[1], 1) * self.inv_freq
        w = self.w.transpose(-2, -1).sum(0)
        return (x @ w) * angles.cos().sum(-1, keepdim=True)


def test_the_static_part_is_folded_for_calls_without_autograd(tmp_path):
    model = Experts()
    traced = tracebridge.trace(model, (torch.randn(2, 5, 6),), check_trace=False)
    assert "folded" in no_grad_code(traced)
    assert "folded" not in traced.code  # with autograd: the grad mode is the call's
    fast = loaded(traced, tmp_path)
    with torch.no_grad():
        for x in (torch.randn(2, 5, 6), torch.randn(1, 3, 6)):
            assert same_bits(fast(x), model(x))
        model.w.mul_(2)  # the state changes in place: folded again
        fast.w.mul_(2)
        x = torch.randn(3, 2, 6)
        assert same_bits(fast(x), model(x))
    x = torch.randn(2, 5, 6)
    got, expected = fast(x), model(x)  # with autograd: gradients reach the weight
    assert same_bits(got, expected)
    got.sum().backward()
    expected.sum().backward()
    assert same_bits(fast.w.grad, model.w.grad)


def test_a_convolution_folded_with_its_batch_norm_sees_the_model_train_on():
    """ATen's batch norm writes its running statistics without moving their versions:
    the fold is keyed on ``num_batches_tracked`` too (runtime/folding.py, counters_of)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).eval()
    x = torch.randn(1, 3, 8, 8)
    traced = tracebridge.trace(model, x)
    with torch.no_grad():
        traced(x)  # the fold is made and kept
        model.train()
        model(torch.randn(4, 3, 8, 8) * 3 + 1)  # eager training moves the statistics
        model.eval()
        torch.testing.assert_close(traced(x), model(x))
