"""A module traced with autograd on also gets the graph eager runs without it, where that
takes a fused path (nn.MultiheadAttention, nn.TransformerEncoderLayer in evaluation: api.py's
``_without_autograd``): calls without autograd run the fused op as eager does, calls with
autograd the graph that has gradients, each bit for bit eager's in the same mode."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.ir.analysis import needs_grad_off
from tracebridge.runtime.method import Specialised

pytestmark = pytest.mark.usefixtures("quiet_warnings")


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(16, 4, batch_first=True)
        self.out = nn.Linear(16, 3)

    def forward(self, x):
        y, weights = self.attn(x, x, x)
        return self.out(y), weights


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, batch_first=True)

    def forward(self, x):
        return self.layer(x)


def _fused_ops(graph) -> set[str]:
    return {n.op for n in graph.nodes} & {
        "_native_multi_head_attention",
        "_transformer_encoder_layer_fwd",
    }


def _loaded(model, tmp_path):
    torch.manual_seed(0)
    traced = tracebridge.trace(model.eval(), torch.randn(2, 5, 16))  # check_trace on
    traced.save(tmp_path / "m.tb")
    return traced, tracebridge.load(tmp_path / "m.tb")


def _bitwise(a, b) -> bool:
    a = a if isinstance(a, tuple) else (a,)
    b = b if isinstance(b, tuple) else (b,)
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("make", [Attention, Encoder])
def test_calls_without_autograd_take_eagers_fused_path(tmp_path, make):
    torch.manual_seed(1)
    model = make()
    traced, loaded = _loaded(model, tmp_path)
    program = loaded.program
    first = program.methods["forward"]
    assert not _fused_ops(first) and not needs_grad_off(first)
    variants = [program.methods[n] for n in program.specialised["forward"]]
    fused = [g for g in variants if needs_grad_off(g)]
    assert len(fused) == 1 and _fused_ops(fused[0])
    assert any(name.startswith("forward__no_grad_") for name in program.specialised["forward"])
    for module in (traced, loaded):
        assert isinstance(module._methods["forward"], Specialised)
        for shape in ((2, 5, 16), (1, 5, 16), (3, 7, 16), (1, 1, 16)):
            x = torch.randn(shape)
            with torch.no_grad():
                assert _bitwise(module(x), model(x)), shape
            got, want = module(x), model(x)
            assert _bitwise(got, want), shape
            assert got[0].requires_grad if isinstance(got, tuple) else got.requires_grad


def test_gradients_still_flow_through_the_graph_with_autograd(tmp_path):
    torch.manual_seed(2)
    model = Attention()
    _, loaded = _loaded(model, tmp_path)
    x = torch.randn(2, 5, 16, requires_grad=True)
    (g_loaded,) = torch.autograd.grad(loaded(x)[0].sum(), x)
    (g_eager,) = torch.autograd.grad(model(x)[0].sum(), x)
    torch.testing.assert_close(g_loaded, g_eager)


def test_no_second_graph_where_the_trace_already_ran_without_autograd_or_trains(tmp_path):
    torch.manual_seed(3)
    model = Attention().eval()
    with torch.no_grad():
        traced = tracebridge.trace(model, torch.randn(2, 5, 16))
    assert _fused_ops(traced.program.methods["forward"])
    assert not any(
        needs_grad_off(traced.program.methods[n])
        for n in traced.program.specialised.get("forward", [])
    )
    trained = tracebridge.trace(Attention().train(), torch.randn(2, 5, 16), check_trace=False)
    assert not any(_fused_ops(g) for g in trained.program.methods.values())


def test_a_fused_graph_that_the_check_refuses_is_dropped_with_a_warning(monkeypatch, tmp_path):
    from tracebridge.check import verify
    from tracebridge.errors import TracerWarning, TracingCheckError

    checked = verify._check_one

    def refusing(*args, **kwargs):
        if "without autograd" in args[8]:
            raise TracingCheckError("made to differ by the test")
        return checked(*args, **kwargs)

    monkeypatch.setattr(verify, "_check_one", refusing)
    torch.manual_seed(4)
    model = Attention().eval()
    with pytest.warns(TracerWarning, match="fused path traced without autograd is not kept"):
        traced = tracebridge.trace(model, torch.randn(2, 5, 16))
    assert "forward" not in traced.program.specialised
    assert not any(_fused_ops(g) for g in traced.program.methods.values())
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        got, want = traced(x), model(x)
    torch.testing.assert_close(got, want)
    traced.save(tmp_path / "m.tb")
    assert "forward" not in tracebridge.load(tmp_path / "m.tb").program.specialised
