"""A loaded artifact does no per-call work that cannot change its result (issue 20, item 5).

Each pattern here was found by reading a zoo model's generated code against the graph
torch.jit runs; each test checks, on a small module with the pattern, that the leaner call
gives eager's outputs bit for bit, and that what still has to be done is done.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.check.transaction import Transaction
from tracebridge.errors import GuardError
from tracebridge.runtime import Method

pytestmark = pytest.mark.usefixtures("quiet_warnings")


def _loaded(module: nn.Module, inputs: tuple, tmp_path, name: str = "m.tb"):
    traced = tracebridge.trace(module, inputs, check_trace=False)
    traced.save(tmp_path / name)
    return tracebridge.load(tmp_path / name)


def _bitwise(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


class NormThenBranch(nn.Module):
    """LeViT's ``linear -> flatten -> batch_norm -> reshape_as``, then a decision on the
    result (a guard after the batch norm, as in any model that checks its sizes later)."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 6)
        self.norm = nn.BatchNorm1d(6)

    def forward(self, x):
        y = self.linear(x)
        y = self.norm(y.flatten(0, 1)).reshape_as(y)
        if y.sum() > -1e9:
            return y.relu()
        return y


def _trained_norm() -> NormThenBranch:
    module = NormThenBranch()
    with torch.no_grad():
        module.norm.running_mean.uniform_(-1, 1)
        module.norm.running_var.uniform_(0.5, 2)
    return module


def test_a_batch_norm_in_evaluation_mode_is_not_copied_back_on_every_call(tmp_path):
    # Eval batch norm reads its running statistics and writes nothing: a call that a later
    # guard refuses has nothing to put back, so the call is not a transaction (which
    # cloned every running statistic of the model on every call: 46 clones in LeViT).
    module = _trained_norm().eval()
    x = torch.randn(2, 5, 8)
    loaded = _loaded(module, (x,), tmp_path)
    assert type(loaded._methods["forward"]) is Method
    for shape in ((2, 5, 8), (1, 3, 8), (4, 7, 8)):
        x = torch.randn(shape)
        with torch.no_grad():
            assert _bitwise(loaded(x), module(x))
        assert _bitwise(loaded(x), module(x))
    stats = {k: v.clone() for k, v in loaded.state_dict().items()}
    loaded(torch.randn(3, 2, 8))
    assert all(torch.equal(v, stats[k]) for k, v in loaded.state_dict().items())


def test_a_batch_norm_in_training_mode_still_puts_its_statistics_back(tmp_path):
    module = _trained_norm().train()
    traced = tracebridge.trace(module, (torch.randn(2, 5, 8),), check_trace=False)
    assert isinstance(traced._methods["forward"], Transaction)
    before = {k: v.clone() for k, v in module.state_dict().items()}
    with pytest.raises(GuardError):
        traced(torch.randn(1, 1, 8))  # batch norm refuses one value per channel
    assert all(torch.equal(v, before[k]) for k, v in module.state_dict().items())


def _repeated(x, like):
    # Autoformer's auto-correlation: a weight per delay repeated to the values' sizes.
    return x.view(-1, 1, 1).repeat(2, like.shape[1], like.shape[2]) * 3


def _tiled(x, like):
    return torch.tile(x, (like.shape[0], like.shape[1])) + 1


@pytest.mark.parametrize("fn", [_repeated, _tiled], ids=["repeat", "tile"])
def test_a_repeat_of_traced_sizes_bounds_its_bytes_inline(tmp_path, fn):
    x, like = torch.randn(3), torch.randn(2, 4, 5)
    traced = tracebridge.trace(fn, (x, like), check_trace=False)
    traced.save(tmp_path / "r.tb")
    loaded = tracebridge.load(tmp_path / "r.tb")
    with torch.no_grad():
        code = loaded.code
    assert "numel() *" in code, "the byte bound is tested inline"
    for x, like in [(torch.randn(3), torch.randn(2, 4, 5)), (torch.randn(1), torch.randn(3, 1, 7))]:
        with torch.no_grad():
            assert _bitwise(loaded(x, like), fn(x, like))
        assert _bitwise(loaded(x, like), fn(x, like))
    # Sizes whose product passes the limit are refused before any allocation, by the
    # checked call, with and without autograd; an empty input allocates nothing either way.
    huge = torch.empty(1).expand(1 << 20, 1 << 20, 1 << 20)
    for grad in (False, True):
        with torch.set_grad_enabled(grad), pytest.raises(tracebridge.TraceError, match="bytes"):
            loaded(torch.randn(3), huge)
    with torch.no_grad():
        assert loaded(torch.randn(0), huge).numel() == 0
    # A tensor subclass takes the checked call, which gives the kernel's result.
    param = nn.Parameter(torch.randn(3))
    with torch.no_grad():
        assert _bitwise(loaded(param, like), fn(param, like))
