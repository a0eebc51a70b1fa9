"""Patterns found by the held-out sweep's eleventh round (benchmarks/heldout_eleventh.py),
on small hand-written modules: what the trace cannot hold is refused at the line that does
it, with the reason, instead of a trace check that only says the outputs differ."""

from __future__ import annotations

import inspect

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import UnsupportedOpError


def _line_of(fn, text: str) -> str:
    """``file:line`` of the first line of ``fn``'s source that contains ``text``."""
    lines, first = inspect.getsourcelines(fn)
    for offset, line in enumerate(lines):
        if text in line:
            return f"{inspect.getsourcefile(fn)}:{first + offset}"
    raise AssertionError(f"{text!r} not in {fn.__qualname__}")


class SeededNoise(nn.Module):
    """Fixed noise drawn under fork_rng with its own seed."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        with torch.random.fork_rng():
            torch.manual_seed(1234)
            noise = torch.randn_like(x)
        return self.lin(x + 0.1 * noise)


class ForkedOnly(nn.Module):
    """fork_rng around code that draws nothing: its restore is no seeding."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        with torch.random.fork_rng():
            y = self.lin(x)
        return y.relu()


class Forces(nn.Module):
    """An energy and its gradient with torch.autograd.grad inside forward."""

    def __init__(self):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))

    def forward(self, pos):
        with torch.enable_grad():
            pos = pos.detach().requires_grad_(True)
            energy = self.mlp(pos).sum()
            (grad,) = torch.autograd.grad(energy, pos)
        return energy.detach(), -grad


class Backward(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 1)

    def forward(self, x):
        with torch.enable_grad():
            x = x.detach().requires_grad_(True)
            self.lin(x).sum().backward()
        return x.grad


@pytest.mark.parametrize("name", ["torch.manual_seed", "torch.random.manual_seed", "torch.seed"])
def test_seeding_the_global_generator_in_traced_code_is_refused_at_its_line(name):
    owner = torch.random if name.startswith("torch.random.") else torch
    attr = name.rsplit(".", 1)[1]

    def f(x):
        getattr(owner, attr)(*([7] if "manual" in attr else []))  # the seeding line
        return x + torch.randn_like(x)

    with pytest.raises(UnsupportedOpError) as info:
        tracebridge.trace(f, torch.randn(2, 3))
    message = str(info.value)
    assert f"cannot record {name} at {_line_of(f, 'the seeding line')}" in message
    assert "not recorded" in message and "generator" in message


def test_fork_rng_with_a_seed_inside_forward_is_refused_naming_the_seed():
    model = SeededNoise().eval()
    with pytest.raises(UnsupportedOpError) as info:
        tracebridge.trace(model, torch.randn(2, 4))
    assert _line_of(SeededNoise.forward, "torch.manual_seed(1234)") in str(info.value)


def test_seeding_outside_the_trace_and_a_bare_fork_rng_still_work():
    model = ForkedOnly().eval()
    torch.manual_seed(3)  # outside any trace: the real function
    state = torch.get_rng_state()
    traced = tracebridge.trace(model, torch.randn(2, 4))
    x = torch.randn(5, 4)
    assert torch.equal(traced(x), model(x))
    torch.manual_seed(3)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.manual_seed is not None and torch.manual_seed.__module__ == "torch.random"


def test_autograd_grad_in_forward_is_refused_at_its_line():
    with pytest.raises(UnsupportedOpError) as info:
        tracebridge.trace(Forces().eval(), torch.randn(2, 5, 3))
    message = str(info.value)
    where = _line_of(Forces.forward, "torch.autograd.grad(")
    assert f"cannot record torch.autograd.grad at {where}" in message
    assert "constant" in message and "forward operations only" in message


def test_backward_in_forward_is_refused_at_its_line():
    with pytest.raises(UnsupportedOpError) as info:
        tracebridge.trace(Backward().eval(), torch.randn(2, 3))
    where = _line_of(Backward.forward, ".backward()")
    assert f"cannot record Tensor.backward at {where}" in str(info.value)


def test_autograd_after_tracing_is_the_real_one():
    model = Forces().eval()
    with pytest.raises(UnsupportedOpError):
        tracebridge.trace(model, torch.randn(1, 2, 3))
    pos = torch.randn(1, 2, 3)
    energy, force = model(pos)  # eager, after the refused trace: autograd works
    pos2 = pos.clone().requires_grad_(True)
    (expected,) = torch.autograd.grad(model.mlp(pos2).sum(), pos2)
    assert torch.allclose(force, -expected)
    assert torch.autograd.grad.__module__ == "torch.autograd"
