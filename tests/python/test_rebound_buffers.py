"""A buffer the traced code assigns anew at its own shape (a hand-written batch norm, an
exponential moving average) is written on every call of the trace, as eager's next call
reads it (trace/rebound_buffers.py)."""

import copy

import pytest
import torch
from torch import nn

import tracebridge


class MovingAverage(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("average", torch.zeros(4))

    def forward(self, x):
        self.average = self.average * 0.5 + x.mean(0).detach()
        return x - self.average


class GrowingTable(nn.Module):
    """A table rebuilt at another shape when a call is longer (rotary caches)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.arange(4.0), persistent=False)

    def forward(self, x):
        if x.shape[0] > self.table.shape[0]:
            self.table = torch.arange(float(x.shape[0]))
        return x + self.table[: x.shape[0]]


def _calls(n=4):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(3 + i, 4, generator=g) for i in range(n)]


@pytest.mark.parametrize("no_grad", [False, True])
def test_a_rebound_buffer_moves_as_in_eager(tmp_path, no_grad):
    torch.manual_seed(0)
    eager, source = MovingAverage(), MovingAverage()
    traced = tracebridge.trace(source, torch.randn(5, 4))
    assert "Tensor.copy_" in traced.graph or "copy_" in traced.graph
    traced.save(tmp_path / "m.tb")
    loaded = tracebridge.load(tmp_path / "m.tb")
    assert torch.equal(source.average, torch.zeros(4))  # tracing left the model as it was
    with torch.no_grad() if no_grad else torch.enable_grad():
        for x in _calls():
            expected = eager(x)
            torch.testing.assert_close(traced(x), expected)
            torch.testing.assert_close(loaded(x), expected)
            torch.testing.assert_close(source.average, eager.average)
            torch.testing.assert_close(loaded.average, eager.average)


def test_the_hand_written_batch_norm_of_a_textbook(tmp_path):
    class MyBatchNorm(nn.Module):
        def __init__(self, n, momentum=0.1):
            super().__init__()
            self.momentum = momentum
            self.gamma = nn.Parameter(torch.ones(n))
            self.beta = nn.Parameter(torch.zeros(n))
            self.register_buffer("moving_mean", torch.zeros(n))
            self.register_buffer("moving_var", torch.ones(n))

        def forward(self, x):
            if self.training:
                mean, var = x.mean(0), x.var(0, unbiased=False)
                m = self.momentum
                self.moving_mean = (1 - m) * self.moving_mean + m * mean.detach()
                self.moving_var = (1 - m) * self.moving_var + m * var.detach()
            else:
                mean, var = self.moving_mean, self.moving_var
            return self.gamma * (x - mean) / torch.sqrt(var + 1e-5) + self.beta

    torch.manual_seed(0)
    eager = MyBatchNorm(4).train()
    source = copy.deepcopy(eager)
    traced = tracebridge.trace(source, torch.randn(8, 4), respect_mode=True)
    for x in _calls(3):
        torch.testing.assert_close(traced(x), eager(x))
    eager.eval()
    traced.eval()
    x = torch.randn(6, 4)
    torch.testing.assert_close(traced(x), eager(x))


def test_a_table_rebuilt_at_another_shape_is_computed_by_the_graph():
    eager, source = GrowingTable(), GrowingTable()
    traced = tracebridge.trace(source, torch.ones(6, 1), check_trace=False)
    assert "copy_" not in traced.graph
    for n in (6, 7):
        x = torch.ones(n, 1)
        torch.testing.assert_close(traced(x), eager(x))
