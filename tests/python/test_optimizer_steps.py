"""Values a trace keeps from its state are computed again after every optimizer step,
fused ones included, which write the parameters without moving their versions
(runtime/optimizer_steps.py)."""

import pytest
import torch
from torch import nn

import tracebridge


def _model():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(64, 2)
    ).eval()  # batch norm frozen while the weights train: its convolution is folded


class DataSGD(torch.optim.Optimizer):
    """An optimizer of one's own that updates ``p.data`` (no version moves)."""

    def __init__(self, params, lr):
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.data.add_(p.grad, alpha=-group["lr"])


@pytest.mark.parametrize(
    "make",
    [
        lambda ps: torch.optim.AdamW(ps, lr=0.1, fused=True),
        lambda ps: torch.optim.SGD(ps, lr=0.1, fused=True),
        lambda ps: DataSGD(ps, lr=0.1),
    ],
    ids=["adamw_fused", "sgd_fused", "data_writes"],
)
def test_calls_without_autograd_follow_the_steps(make):
    model = _model()
    traced = tracebridge.trace(model, torch.randn(2, 3, 6, 6))
    optimizer = make(model.parameters())
    x = torch.randn(4, 3, 6, 6)
    with torch.no_grad():
        assert torch.allclose(traced(x), model(x), atol=1e-6)  # values kept from here on
    versions = [p._version for p in model.parameters()]
    for _ in range(2):
        optimizer.zero_grad()
        model(torch.randn(8, 3, 6, 6)).pow(2).mean().backward()
        optimizer.step()
        with torch.no_grad():
            assert torch.allclose(traced(x), model(x), atol=1e-5)
    if not isinstance(optimizer, torch.optim.AdamW):
        return
    # what the hook is for: the fused step moved no version the keys could see
    assert [p._version for p in model.parameters()] == versions


def test_state_in_shared_memory_is_read_on_every_call_without_autograd():
    """A write from another process moves no version this process sees (Hogwild-style
    workers): nothing is kept from state in shared memory."""
    model = _model()
    model.share_memory()
    traced = tracebridge.trace(model, torch.randn(2, 3, 6, 6))
    x = torch.randn(4, 3, 6, 6)
    with torch.no_grad():
        traced(x)
        # as another process writes it: the same storage, no version moved here
        model[0].weight.data.mul_(2)
        torch.testing.assert_close(traced(x), model(x))
