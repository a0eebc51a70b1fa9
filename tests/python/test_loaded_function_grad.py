"""A saved traced function that reads a module's parameters (closed over) gives results
that require grad once loaded, as eager and the traced function do (prober21b M4)."""

from __future__ import annotations

import torch

import tracebridge


def test_a_loaded_function_over_a_module_keeps_requires_grad(tmp_path):
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 3)
    table = torch.arange(3.0)  # a closed-over tensor that needs no grad

    def f(a):
        return lin(a) * 2 + table

    x = torch.randn(2, 3)
    traced = tracebridge.trace(f, x)
    tracebridge.save(traced, tmp_path / "f.tb")
    loaded = tracebridge.load(tmp_path / "f.tb")
    out = loaded(x)
    assert f(x).requires_grad and traced(x).requires_grad and out.requires_grad
    assert torch.equal(out, f(x))
    out.sum().backward()  # the gradients reach the loaded copies of the parameters
    state = {k: e.tensor for k, e in loaded.program.state.items()}
    grads = sorted(tuple(t.grad.shape) for t in state.values() if t.grad is not None)
    assert grads == [(3,), (3, 3)]
    assert [t.requires_grad for t in state.values()].count(False) == 1  # the table
    with torch.no_grad():
        assert not loaded(x).requires_grad


def test_loading_under_inference_mode_still_serves(tmp_path):
    lin = torch.nn.Linear(3, 3)
    traced = tracebridge.trace(lambda a: lin(a), torch.randn(2, 3))
    tracebridge.save(traced, tmp_path / "f.tb")
    with torch.inference_mode():
        loaded = tracebridge.load(tmp_path / "f.tb")
        assert loaded(torch.ones(1, 3)).shape == (1, 3)
