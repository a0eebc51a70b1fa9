"""Activation checkpointing (``torch.utils.checkpoint.checkpoint``), as transformers' and
timm's ``gradient_checkpointing`` wraps each block. ``use_reentrant=False`` records the
block's ops; ``use_reentrant=True`` runs a custom autograd function whose backward runs the
block again: where a gradient can flow its ops are recorded (its gradient is autograd's
gradient of them), guarded that one still can; where none can (evaluation without
autograd, inputs that do not require grad) the forward is recorded as eager runs it, with
autograd off. Every case against eager at other batch sizes, outputs and gradients, in both
runtimes after a save/load round trip.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import tracebridge

RUNTIMES = ("codegen", "interpreter")
HERE = __file__.rsplit("/", 1)[-1]


# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.drop = nn.Dropout(0.25)

    def forward(self, x):
        return x + self.drop(torch.relu(self.fc(x)))


class Checkpointed(nn.Module):
    """A stack of blocks with gradient checkpointing, and a head outside it."""

    def __init__(self, reentrant: bool):
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(6, 2)
        self.reentrant = reentrant

    def forward(self, x):
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=self.reentrant)
        return self.head(x)


def _runs(traced, tmp_path):
    traced.save(tmp_path / "ckpt.tb")
    return [traced] + [tracebridge.load(tmp_path / "ckpt.tb", runtime=rt) for rt in RUNTIMES]


def _grads(fn, x):
    """Output, parameter gradients (None where none flowed) and the input's gradient, with
    the same random draws as every other call."""
    for p in fn.parameters():
        p.grad = None
    x = x.detach().requires_grad_(x.requires_grad)
    torch.manual_seed(3)
    out = fn(x)
    if out.requires_grad:
        out.square().sum().backward()
    params = [None if p.grad is None else p.grad.clone() for p in fn.parameters()]
    return out.detach(), params, None if x.grad is None else x.grad.clone()


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return torch.allclose(a, b, atol=1e-6)


@pytest.mark.parametrize("reentrant", [True, False], ids=["reentrant", "non-reentrant"])
@pytest.mark.parametrize("input_grad", [True, False], ids=["input-requires-grad", "data-input"])
def test_training_through_checkpoints_matches_eager(reentrant, input_grad, tmp_path):
    """Training mode (dropout on): outputs and every gradient as eager gives them, including
    eager's reentrant pitfall (an input that does not require grad: no gradient reaches
    the checkpointed blocks' parameters)."""
    module = Checkpointed(reentrant).train()
    torch.manual_seed(0)
    traced = tracebridge.trace(module, (torch.randn(3, 6, requires_grad=input_grad),))
    for batch in (3, 5, 1):
        x = torch.randn(batch, 6, requires_grad=input_grad)
        want = _grads(module, x)
        for fn in _runs(traced, tmp_path):
            got = _grads(fn, x)
            assert all(_same(a, b) for a, b in zip(got, want))
    if reentrant and not input_grad:
        assert _grads(module, x)[1][0] is None  # what eager gives, and the trace too


def test_reentrant_checkpoints_in_evaluation_without_autograd(tmp_path):
    module = Checkpointed(reentrant=True).eval()
    with torch.no_grad():
        traced = tracebridge.trace(module, (torch.randn(3, 6),))
    runs = _runs(traced, tmp_path)
    with torch.no_grad():
        for batch in (2, 7):
            x = torch.randn(batch, 6)
            assert all(torch.allclose(fn(x), module(x), atol=1e-6) for fn in runs)
    # With autograd on and an input that requires grad, the block's own backward would
    # run: another path, refused naming the line.
    with pytest.raises(tracebridge.GuardError) as info:
        traced(torch.randn(2, 6, requires_grad=True))
    message = str(info.value)
    assert "torch.is_grad_enabled()" in message and "CheckpointFunction" in message
    assert f"{HERE}:" in message and "checkpoint(block, x" in message


def test_a_reentrant_trace_that_had_gradients_refuses_a_call_that_has_none():
    """Traced with an input that requires grad, called with one that does not: eager's
    output would then have no gradient at all, so the call is refused, naming the line."""
    module = Checkpointed(reentrant=True).eval()
    traced = tracebridge.trace(module, (torch.randn(3, 6, requires_grad=True),))
    with pytest.raises(tracebridge.GuardError) as info:
        traced(torch.randn(2, 6))
    message = str(info.value)
    assert "requires grad" in message and "use_reentrant=True" in message
    assert "checkpoint(block, x" in message


class ParameterInside(torch.autograd.Function):
    """A custom function whose forward reads a tensor it is not given (cannot be a node)."""

    weight = None

    @staticmethod
    def forward(ctx, x):
        return x * ParameterInside.weight

    @staticmethod
    def backward(ctx, grad):
        return grad * ParameterInside.weight


class UsesParameterInside(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4))
        self.out = nn.Linear(4, 1)

    def forward(self, x):
        ParameterInside.weight = self.w
        return self.out(ParameterInside.apply(x))


def test_a_custom_function_recorded_inline_gives_no_gradient_where_apply_gives_none():
    """``apply`` runs forward with autograd off: its result requires no grad when no input
    does, even if forward reads a parameter. Recorded inline without that switch, the
    parameter got a gradient eager never gives (and a no-grad block inside the forward
    left autograd off after it: the head got none)."""
    module = UsesParameterInside()
    traced = tracebridge.trace(module, (torch.randn(3, 4),))
    x = torch.randn(5, 4)
    want, got = _grads(module, x), _grads(traced, x)
    assert all(_same(a, b) for a, b in zip(got, want))
    assert want[1][0] is None and want[1][1] is not None  # w: none; the head: a gradient
