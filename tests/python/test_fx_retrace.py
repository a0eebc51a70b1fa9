"""A GraphModule of to_graph_module traced again by torch.fx: by its own unpickling (which
traces the code with fx_checks.CheckTracer) and by ``torch.fx.symbolic_trace`` (prober21d
F1, F3).

F3: a pickled GraphModule of a module that writes buffers in place wrote none after
unpickling and returned a constant (torch.fx's tracer ran the writes on the real buffers
while tracing); F1: ``torch.fx.symbolic_trace(gm)`` failed inside the checks (an argument
"is Proxy where the trace was made with a tensor"; the flat form's check gave None).
"""

from __future__ import annotations

import io
import warnings

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.export import fx
from tracebridge.export.fx_checks import CheckTracer


def _trace(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tracebridge.trace(fn, *args, **kwargs)


class _Counter(nn.Module):
    """Buffers written in place by the traced ops (not a norm's running statistics)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros((), dtype=torch.long))
        self.register_buffer("mean", torch.zeros(5))

    def forward(self, x):
        self.count += 1
        self.mean.mul_(0.9).add_(0.1 * x.mean(0))
        return x - self.mean, self.count * 1


def _pickled(gm):
    buffer = io.BytesIO()
    torch.save(gm, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


@pytest.mark.parametrize("flat", [False, True])
def test_an_unpickled_graph_module_writes_its_buffers_as_eager(flat: bool) -> None:
    eager = _Counter().eval()
    gm = tracebridge.to_graph_module(_trace(_Counter().eval(), torch.randn(4, 5)), flat=flat)
    back = _pickled(gm)
    assert sorted(back.state_dict()) == sorted(gm.state_dict()) == ["count", "mean"]
    for _ in range(3):
        x = torch.randn(3, 5)
        want, got = eager(x), fx.call(back, x)
        torch.testing.assert_close(got[0], want[0])
        assert got[1].item() == want[1].item()
    assert back.count.item() == 3 and gm.count.item() == 0  # its own copy, written
    torch.testing.assert_close(back.mean, eager.mean)


def test_the_check_tracer_keeps_buffer_writes_as_nodes() -> None:
    gm = tracebridge.to_graph_module(_trace(_Counter().eval(), torch.randn(4, 5)), flat=True)
    graph = CheckTracer().trace(gm)
    assert gm.count.item() == 0  # tracing wrote nothing
    targets = [n.target for n in graph.nodes if n.op == "call_method"]
    assert "add_" in targets and "mul_" in targets
    assert not any(n.op == "get_attr" and "constant" in str(n.target) for n in graph.nodes)


def _branchy(x):
    return x * 2 if x.shape[1] > 2 else x - 1


@pytest.mark.parametrize("flat", [False, True])
def test_symbolic_trace_of_a_graph_module_keeps_its_checks(flat: bool) -> None:
    net = nn.Sequential(nn.Linear(16, 32), nn.ReLU()).eval()
    gm = tracebridge.to_graph_module(_trace(net, torch.rand(4, 16)), flat=flat)
    again = torch.fx.symbolic_trace(gm)
    x = torch.rand(9, 16)
    torch.testing.assert_close(again(x)[0], net(x))
    with pytest.raises(tracebridge.GuardError, match="3 dimensions"):
        again(torch.rand(2, 9, 16))  # the input check is a node of the new graph


def test_symbolic_trace_keeps_the_traces_guards() -> None:
    gm = tracebridge.to_graph_module(_trace(_branchy, torch.randn(3, 4)))
    again = torch.fx.symbolic_trace(gm)
    x = torch.randn(5, 6)
    torch.testing.assert_close(again(x)[0], _branchy(x))
    with pytest.raises(tracebridge.GuardError, match=r"x.shape\[1\] > 2"):
        again(torch.randn(5, 2))


def _indexed(x, i):
    y = x[i]
    x[i] = 0.0
    return y.sum() + torch.gather(x, 1, i[None].expand(4, -1)).sum() + x.sum()


@pytest.mark.parametrize("flat", [False, True])
def test_a_graph_module_with_index_values_pickles_and_traces_again(flat: bool) -> None:
    """Tensor indices and gather go through runtime/checked_indices.py (their values are
    checked before a device kernel): an unpickled or re-traced GraphModule calls the
    same checks (prober21d F6: unpickling failed in the getitem check, given a proxy; a
    gather's check was a local function pickle could not find)."""
    gm = tracebridge.to_graph_module(
        _trace(_indexed, (torch.randn(4, 5), torch.tensor([0, 2]))), flat=flat
    )
    for again in (_pickled(gm), torch.fx.symbolic_trace(gm)):
        x, i = torch.randn(4, 5), torch.tensor([1, 3, 2])
        torch.testing.assert_close(again(x.clone(), i)[0], _indexed(x.clone(), i))
        called = {getattr(n.target, "__module__", "") for n in again.graph.nodes}
        assert "tracebridge.runtime.checked_indices" in called
