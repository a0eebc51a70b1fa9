"""Writes through ``.data`` reach the values kept from the state (runtime/data_writes.py).

A call without autograd reuses values folded from the state (a convolution with its
evaluation-mode batch norm folded in, a memo keyed on state, a weight kept channels-last)
while the state tensors keep their identity, version and data pointer. An in-place write
through ``.data`` (``p.data.mul_(2)``, weight clipping, old optimisers) changes none of
the three -- PyTorch gives ``.data`` a version counter of its own -- and was served the old
weights (found by benchmarks/snippet_trial.py's probes, and again by prober23a). Taking
``.data`` of a parameter values were kept from now drops them, and marks the tensor: nothing
made from it is kept again, since the alias may be written at any later time. Parameters
only: a buffer's ``.data`` stays a known gap (strict xfail)."""

from __future__ import annotations

import copy
import importlib
import pickle

import pytest
import torch
from torch import nn

import tracebridge

pytestmark = pytest.mark.usefixtures("quiet_warnings")

data_writes = importlib.import_module("tracebridge.runtime.data_writes")


def conv_bn():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()).eval()


def traced_or_loaded(net, x, loaded, tmp_path):
    traced = tracebridge.trace(net, x)
    if not loaded:
        return traced, net
    tracebridge.save(traced, tmp_path / "m.tb")
    return tracebridge.load(tmp_path / "m.tb"), None


@pytest.mark.parametrize("loaded", [False, True])
def test_a_write_through_data_reaches_the_next_call_without_autograd(tmp_path, loaded):
    net = conv_bn()
    x = torch.randn(2, 3, 8, 8)
    traced, original = traced_or_loaded(net, x, loaded, tmp_path)
    reference = copy.deepcopy(net)
    with torch.no_grad():
        traced(x)
        for p, q in zip(traced.parameters(), reference.parameters()):
            p.data.mul_(1.5)
            q.mul_(1.5)
        torch.testing.assert_close(traced(x), reference(x))


def test_an_alias_kept_and_written_after_later_calls_is_still_seen():
    """``w = layer.weight.data`` kept, calls in between, then written: the tensor stays
    marked, so no call keeps values made from it."""
    net = conv_bn()
    x = torch.randn(2, 3, 8, 8)
    traced = tracebridge.trace(net, x)
    with torch.no_grad():
        traced(x)
        alias = net[0].weight.data
        torch.testing.assert_close(traced(x), net(x))  # made again, not kept
        for _ in range(3):
            alias.add_(0.25)
            torch.testing.assert_close(traced(x), net(x))


@pytest.mark.xfail(
    strict=True,
    reason="runtime/data_writes.py watches parameters' .data only: a buffer's .data write "
    "moves no version (call tracebridge.invalidate_caches())",
)
def test_the_batch_norm_statistics_written_through_data_are_seen():
    net = conv_bn()
    x = torch.randn(2, 3, 8, 8)
    traced = tracebridge.trace(net, x)
    with torch.no_grad():
        traced(x)
        net[1].running_mean.data.fill_(0.5)
        net[1].running_var.data.fill_(2.0)
        torch.testing.assert_close(traced(x), net(x))


def test_memo_and_layout_values_follow_a_write_through_data():
    class Masked(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("scale", torch.ones(6))
            self.conv = nn.Conv2d(4, 4, 1)

        def forward(self, x):
            n = x.shape[-1]
            mask = torch.ones(n, n).tril() * self.scale[:n]  # sizes and state: a memo
            y = self.conv(x.permute(0, 3, 1, 2).permute(0, 2, 3, 1))  # channels-last input
            return y + mask

    torch.manual_seed(0)
    net = Masked().eval()
    x = torch.randn(1, 4, 6, 6).to(memory_format=torch.channels_last)
    traced = tracebridge.trace(net, x)
    with torch.no_grad():
        traced(x)
        net.scale.mul_(3.0)  # a buffer: written directly, which moves its version
        net.conv.weight.data.mul_(-2.0)
        torch.testing.assert_close(traced(x), net(x))
        net.conv.weight.data.add_(1.0)
        torch.testing.assert_close(traced(x), net(x))


def test_a_graph_that_reads_data_itself_stays_right():
    class ReadsData(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(3, 3))

        def forward(self, x):
            return x @ (self.weight.data * 2).t(), self.weight.data

    net = ReadsData().eval()
    x = torch.randn(2, 3)
    traced = tracebridge.trace(net, x)
    with torch.no_grad():
        out, handed = traced(x)
        handed.mul_(-1.0)  # the alias the graph returned, written
        got, _ = traced(x)
        expected, _ = net(x)
        torch.testing.assert_close(got, expected)


def test_calls_deep_copies_and_pickles_mark_nothing(tmp_path):
    """tracebridge's own calls and saves, and torch's deep copy and pickle of a Parameter
    (which copy the memory), take no alias: the values stay kept."""
    net = conv_bn()
    x = torch.randn(2, 3, 8, 8)
    traced = tracebridge.trace(net, x)
    with torch.no_grad():
        for _ in range(3):
            traced(x)
    copy.deepcopy(net)
    pickle.loads(pickle.dumps(net))
    tracebridge.save(traced, tmp_path / "m.tb")
    tracebridge.load(tmp_path / "m.tb")(x)
    assert not data_writes.taken(list(net.parameters()) + list(net.buffers()))


def test_data_still_reads_and_assigns_as_torch_does():
    p = nn.Parameter(torch.ones(2))
    alias = p.data
    assert not alias.requires_grad and alias.data_ptr() == p.data_ptr()
    p.data = torch.zeros(3)
    assert p.shape == (3,) and isinstance(p, nn.Parameter) and p.requires_grad
    assert torch.nn.Parameter.data.__doc__ == torch._C.TensorBase.data.__doc__
    assert "data" not in torch.Tensor.__dict__  # torch.Tensor stays as torch made it
