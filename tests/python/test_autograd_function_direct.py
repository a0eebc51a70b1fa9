"""Without autograd, a custom function's forward graph runs directly, without
``Function.apply`` (runtime/autograd_function.py, Note "without autograd"), where its
outputs are fresh tensors; where one may be, or share memory with, an input, ``apply``
runs as before, so outputs alias what eager's alias."""

from __future__ import annotations

import pytest
import torch

import tracebridge
from tracebridge.ir import Graph, Node, Ref, Value
from tracebridge.runtime import autograd_function


class Gelu(torch.autograd.Function):
    """BLOOM's shape: a few ops, one saved input."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.sigmoid(1.702 * x)


class Same(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


class Flat(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view(-1)

    @staticmethod
    def backward(ctx, grad):
        return grad.view(2, 3)


class Using(torch.nn.Module):
    def __init__(self, function):
        super().__init__()
        self.function = function
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        return self.function.apply(self.lin(x)), self.lin(x) * 2


def _loaded(function, tmp_path):
    torch.manual_seed(0)
    module = Using(function)
    traced = tracebridge.trace(module, torch.randn(2, 3), check_trace=False)
    traced.save(tmp_path / "m.tb")
    return module, tracebridge.load(tmp_path / "m.tb")


class _Applies:
    """Counts ``Function.apply`` calls (of any custom function)."""

    def __init__(self, monkeypatch):
        self.count = 0
        original = torch.autograd.Function.__dict__["apply"].__func__

        def counted(cls, *args, **kwargs):
            self.count += 1
            return original(cls, *args, **kwargs)

        monkeypatch.setattr(torch.autograd.Function, "apply", classmethod(counted))


def _forward_graph(traced):
    graphs = traced.program.methods
    name = next(n for n in graphs if n.startswith("autograd_") and "_forward_" in n)
    return graphs[name], graphs


def test_fresh_outputs_run_the_forward_graph_directly(tmp_path, monkeypatch):
    module, loaded = _loaded(Gelu, tmp_path)
    applies = _Applies(monkeypatch)  # after tracing, which patches apply itself
    x = torch.randn(2, 3)
    with torch.no_grad():
        outputs = loaded(x)
        assert applies.count == 0
        for got, want in zip(outputs, module(x)):
            assert torch.equal(got, want)
    # with autograd, apply runs and the function's own gradient flows
    x = torch.randn(2, 3, requires_grad=True)
    got = loaded(x)[0]
    assert applies.count == 2  # (and once for eager's call above)
    want = module(x)[0]
    assert torch.equal(got, want)
    (g_loaded,) = torch.autograd.grad(got.sum(), x)
    (g_eager,) = torch.autograd.grad(want.sum(), x)
    torch.testing.assert_close(g_loaded, g_eager)


def test_gradients_on_but_none_needed_runs_directly(tmp_path, monkeypatch):
    module, loaded = _loaded(Gelu, tmp_path)
    applies = _Applies(monkeypatch)  # after tracing, which patches apply itself
    for p in loaded.parameters():
        p.requires_grad_(False)
    for p in module.parameters():
        p.requires_grad_(False)
    x = torch.randn(2, 3)
    got = loaded(x)[0]
    assert applies.count == 0
    assert torch.equal(got, module(x)[0]) and not got.requires_grad


@pytest.mark.parametrize("function", [Same, Flat])
def test_an_output_that_may_share_an_input_still_goes_through_apply(
    tmp_path, monkeypatch, function
):
    module, loaded = _loaded(function, tmp_path)
    applies = _Applies(monkeypatch)
    forward, graphs = _forward_graph(loaded)
    assert not autograd_function._fresh_outputs(forward, 1, graphs)
    x = torch.randn(2, 3)
    with torch.no_grad():
        got = loaded(x)[0]
        assert applies.count == 1
        want = module(x)[0]
    assert torch.equal(got, want)
    # eager's apply returns a view of what its forward returned: so does the loaded one
    assert (got._base is None) == (want._base is None)


def test_a_forward_that_writes_its_input_is_not_run_directly():
    traced = tracebridge.trace(Using(Same), torch.randn(2, 3), check_trace=False)
    forward, graphs = _forward_graph(traced)
    # the same graph, with an in-place write of its input before it returns a new tensor
    x = forward.inputs[0]
    write = Node(op="Tensor.mul_", args=[Ref(x.id), 2], outputs=[Value(id=9001, kind="Tensor")])
    fresh = Node(op="neg", args=[Ref(x.id)], outputs=[Value(id=9002, kind="Tensor")])
    writer = Graph(
        inputs=forward.inputs,
        in_spec=forward.in_spec,
        nodes=[write, fresh],
        outputs=[Ref(9002)],
        out_spec=forward.out_spec,
    )
    assert not autograd_function._fresh_outputs(writer, 1, graphs)
    assert autograd_function._fresh_outputs(writer.with_nodes([fresh]), 1, graphs)
