"""``torch.autocast`` regions are recorded as explicit casts (trace/autocast.py), so a
mixed-precision trace runs in the same dtypes, and to the same numbers, as eager code: with
and without check_trace, at other batch sizes, after save and load, and when R reads the
file. CPU autocast (bfloat16) runs the same recording path as CUDA's."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tracebridge

from .r_reader import run_r

ROOT = Path(__file__).resolve().parents[2]
BF16 = torch.bfloat16


class MixedNet(nn.Module):
    """conv, linear and matmul (autocast's lower-precision ops), a batch norm that mixes
    dtypes by design, and an fp32-policy loss, inside an autocast region."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 6 * 6, 5)

    def forward(self, x):
        with torch.autocast("cpu", dtype=BF16):
            y = self.fc(F.relu(self.bn(self.conv(x))).flatten(1))
            gram = y @ y.t()
            loss = F.binary_cross_entropy_with_logits(y, torch.ones_like(y))
        return gram, y, loss


def _dtypes(out) -> list[torch.dtype]:
    return [t.dtype for t in out]


def _assert_same(got, want) -> None:
    assert _dtypes(got) == _dtypes(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0)


@pytest.fixture
def net() -> nn.Module:
    return MixedNet().eval()


@pytest.mark.parametrize("check_trace", [True, False])
def test_autocast_trace_runs_in_eager_dtypes(net, check_trace):
    traced = tracebridge.trace(net, torch.rand(2, 3, 8, 8), check_trace=check_trace)
    for batch in (1, 5):
        x = torch.rand(batch, 3, 8, 8)
        got, want = traced(x), net(x)
        assert _dtypes(want) == [BF16, BF16, torch.float32]
        _assert_same(got, want)


def test_autocast_casts_are_explicit_in_the_graph(net):
    graph = tracebridge.trace(net, torch.rand(2, 3, 8, 8)).graph
    casts = [line for line in graph.splitlines() if "Tensor.to(" in line and "bfloat16)" in line]
    # conv's input, weight, bias; linear's weight and bias: each cast once, in front
    assert len(casts) == 5, graph
    assert "float32)" in graph  # the loss computes in float32 under CPU autocast
    bn = next(line for line in graph.splitlines() if "batch_norm(" in line)
    assert "bf16" in bn.split("=")[0]  # its float32 statistics are not cast, as in eager


def test_no_autocast_no_casts():
    net = nn.Sequential(nn.Linear(4, 4), nn.ReLU()).eval()
    graph = tracebridge.trace(net, torch.rand(2, 4)).graph
    assert "Tensor.to" not in graph


def test_disabled_inner_region_is_not_cast():
    lin = nn.Linear(4, 4)

    def f(x):
        with torch.autocast("cpu", dtype=BF16):
            low = lin(x)
            with torch.autocast("cpu", enabled=False):
                full = lin(x)
        return low, full

    traced = tracebridge.trace(f, torch.rand(2, 4), check_trace=False)
    x = torch.rand(3, 4)
    _assert_same(traced(x), f(x))
    assert _dtypes(traced(x)) == [BF16, torch.float32]


def test_autocast_trace_survives_save_and_load(net, tmp_path):
    traced = tracebridge.trace(net, torch.rand(2, 3, 8, 8), check_trace=False)
    path = tmp_path / "mixed.tb"
    traced.save(path)
    loaded = tracebridge.load(path)
    x = torch.rand(4, 3, 8, 8)
    _assert_same(loaded(x), net(x))
    interpreted = tracebridge.load(path, runtime="interpreter")
    _assert_same(interpreted(x), net(x))


@pytest.mark.skipif(shutil.which("Rscript") is None, reason="R is not installed")
def test_r_reader_accepts_an_autocast_trace(net, tmp_path):
    path = tmp_path / "mixed.tb"
    traced = tracebridge.trace(net, torch.rand(2, 3, 8, 8))
    traced.save(path)
    casts = sum(n.op == "Tensor.to" for n in traced.program.methods["forward"].nodes)
    out = run_r(
        "doc <- read_program(args[[2]]); "
        'cat(sum(vapply(doc$methods$forward$nodes, function(n) n$op == "Tensor.to", TRUE)))',
        path,
    )
    # five bfloat16 casts, and the loss's two float32 ones: R sees the graph Python runs
    assert casts == 7 and out.strip() == str(casts)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_autocast_trace_runs_in_eager_dtypes():
    lin = nn.Linear(16, 16).cuda()

    def f(x):
        with torch.autocast("cuda", dtype=BF16):
            return torch.softmax(lin(x), -1), lin(x) @ x.t()

    traced = tracebridge.trace(f, torch.rand(4, 16, device="cuda"))
    x = torch.rand(7, 16, device="cuda")
    _assert_same(traced(x), f(x))


def test_matmul_of_mixed_dtypes_is_cast_though_meta_accepts_it():
    """``matmul`` of a bfloat16 result and a float32 input runs on meta (which checks no
    dtypes) but fails on real devices: autocast cast it, and so must the trace."""
    lin = nn.Linear(16, 16)

    def f(x):
        with torch.autocast("cpu", dtype=BF16):
            return torch.softmax(lin(x), -1), lin(x) @ x.t()

    traced = tracebridge.trace(f, torch.rand(4, 16))
    for batch in (1, 7):
        x = torch.rand(batch, 16)
        _assert_same(traced(x), f(x))


class _NormInAutocast(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(4)

    def forward(self, x):
        with torch.autocast("cpu", dtype=BF16):
            return F.dropout(self.bn(x.to(BF16)), 0.5, training=True)


def test_telling_mixed_ops_apart_leaves_statistics_and_rng_as_they_were():
    """The real-input probe runs on copies with the RNG put back: a batch norm in training
    mode (mixed dtypes by design) updates its statistics once per call, as in eager, and
    the dropout after it draws what eager draws."""
    net = _NormInAutocast().train()
    x = torch.rand(3, 4)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    rng = torch.get_rng_state()
    traced = tracebridge.trace(net, x, check_trace=False)
    assert torch.equal(torch.get_rng_state(), rng)
    for key, value in net.state_dict().items():  # tracing ran the model once, as a call
        torch.testing.assert_close(value, before[key], rtol=0, atol=0)
    torch.manual_seed(3)
    want = net(x)
    stats = net.bn.running_mean.clone()
    net.load_state_dict(before)
    torch.manual_seed(3)
    _assert_same((traced(x),), (want,))
    torch.testing.assert_close(net.bn.running_mean, stats, rtol=0, atol=0)


@pytest.mark.parametrize("layer", ["conv", "linear"])
def test_a_folded_norm_under_autocast_is_eagers_to_the_bit(layer, tmp_path):
    """Without autograd a norm is folded into the convolution or linear before it; under
    autocast eager rounds the layer's low-precision output and then the norm's, the fold
    once: such calls run the graph as traced."""
    torch.manual_seed(0)
    if layer == "conv":
        net, x = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8)), torch.rand(2, 3, 8, 8)
    else:
        net, x = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8)), torch.rand(5, 8)
    with torch.no_grad():
        net[1].running_mean.uniform_(-0.5, 0.5)
        net[1].running_var.uniform_(0.5, 2.0)
    net.eval()
    traced = tracebridge.trace(net, x)
    loaded = tracebridge.load(traced.save(tmp_path / "m.tb") or tmp_path / "m.tb")
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        want = net(x)
        assert torch.equal(loaded(x), want) and torch.equal(traced(x), want)
