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


class LinearNorms(nn.Module):
    """A ``Linear`` then ``BatchNorm1d`` over its output features, both as a matrix (an MLP
    head) and flattened from tokens and reshaped back (LeViT's ``MLPLayerWithBN``)."""

    def __init__(self):
        super().__init__()
        self.head = nn.Linear(6, 5)
        self.head_norm = nn.BatchNorm1d(5)
        self.proj = nn.Linear(6, 6, bias=False)
        self.proj_norm = nn.BatchNorm1d(6)

    def forward(self, tokens):
        hidden = self.proj(tokens)
        hidden = self.proj_norm(hidden.flatten(0, 1)).reshape_as(hidden)
        return self.head_norm(self.head(hidden.mean(1)))


def _trained(model: nn.Module) -> nn.Module:
    """``model`` with running statistics and affine parameters away from their defaults."""
    model.train()
    with torch.no_grad():
        for _ in range(3):
            model(torch.randn(8, 4, 6) * 2 + 1)
        for module in model.modules():
            if isinstance(module, nn.BatchNorm1d):
                module.weight.uniform_(0.5, 2)
                module.bias.uniform_(-1, 1)
    return model.eval()


def test_a_linear_folded_with_its_batch_norm_agrees_with_eager_and_follows_the_state(tmp_path):
    torch.manual_seed(0)
    model = _trained(LinearNorms())
    traced = tracebridge.trace(model, (torch.randn(2, 4, 6),))
    code = traced._methods["forward"].no_grad_code
    assert "op_batch_norm" not in code and "reshape_as" not in code and "flatten" not in code
    assert "op_batch_norm" in traced.code  # with autograd: the norms run as recorded
    fast = loaded(traced, tmp_path)
    with torch.no_grad():
        for x in (torch.randn(2, 4, 6), torch.randn(3, 7, 6)):
            got, expected = fast(x), model(x)
            assert got.shape == expected.shape and got.stride() == expected.stride()
            torch.testing.assert_close(got, expected)  # to rounding: weights scaled first
        # the state changes after load: the folded weights follow it
        for owner in (fast, model):
            owner.proj_norm.running_mean.add_(0.5)
            owner.head_norm.weight.mul_(-2)
        x = torch.randn(2, 4, 6)
        torch.testing.assert_close(fast(x), model(x))


class NormReadTwice(nn.Module):
    """The linear's output is read besides by its norm: nothing is folded."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(6, 6)
        self.norm = nn.BatchNorm1d(6)

    def forward(self, tokens):
        hidden = self.proj(tokens)
        normed = self.norm(hidden.flatten(0, 1)).reshape_as(hidden)
        return normed + hidden


def test_a_linear_read_elsewhere_keeps_its_batch_norm():
    torch.manual_seed(0)
    model = _trained(NormReadTwice())
    traced = tracebridge.trace(model, (torch.randn(2, 4, 6),))
    assert "op_batch_norm" in traced._methods["forward"].no_grad_code
    with torch.no_grad():
        x = torch.randn(2, 4, 6)
        assert same_bits(traced(x), model(x))


class DilatedHead(nn.Module):
    """DeepLab's ASPP branch: a dilated 3x3 convolution without bias, then a batch norm;
    beside it an undilated one, and a dilated one with groups (oneDNN's path)."""

    def __init__(self):
        super().__init__()
        self.dilated = nn.Sequential(nn.Conv2d(8, 6, 3, padding=2, dilation=2, bias=False))
        self.dilated_norm = nn.BatchNorm2d(6)
        self.plain = nn.Conv2d(8, 6, 3, padding=1, bias=False)
        self.plain_norm = nn.BatchNorm2d(6)
        self.grouped = nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=8, bias=False)
        self.grouped_norm = nn.BatchNorm2d(8)

    def forward(self, x):
        return torch.cat(
            [
                self.dilated_norm(self.dilated(x)),
                self.plain_norm(self.plain(x)),
                self.grouped_norm(self.grouped(x)),
            ],
            1,
        )


def test_a_dilated_convolution_without_bias_keeps_its_batch_norm(tmp_path):
    """ATen's dilated kernel outside oneDNN adds a bias one channel at a time (about 1 us
    a channel): the norm after a dilated convolution without groups and without a bias
    of its own is not folded into it; it runs as recorded, bit for bit eager's. The
    undilated and the grouped ones are folded."""
    torch.manual_seed(0)
    model = DilatedHead()
    model.train()
    with torch.no_grad():
        model(torch.randn(4, 8, 5, 5) * 2 + 1)
    model.eval()
    traced = tracebridge.trace(model, (torch.randn(1, 8, 5, 5),))
    code = traced._methods["forward"].no_grad_code
    assert code.count("op_batch_norm") == 1 and "dilated_norm" in code
    fast = loaded(traced, tmp_path)
    with torch.no_grad():
        x = torch.randn(1, 8, 5, 5)
        got, expected = fast(x), model(x)
        assert same_bits(got[:, :6], expected[:, :6])  # the dilated branch as recorded
        torch.testing.assert_close(got, expected)  # the folded ones to rounding
