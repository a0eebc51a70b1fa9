"""Calls that skip a transaction's copies because their key passed before
(runtime/transaction.py, Note "no copies where the refusals are already decided") must
still lose nothing when they are refused: a refusal the key does not decide (inside a
custom autograd function that writes first; a size read from a 0-dim tensor's value, as
``cat``'s dim), state swapped in unreported (``torch.func.functional_call``), or a call
that began with its guards off, makes the call a transaction again. Size checks per key
(runtime/size_checks.py) must not skip a guard whose sizes a tensor's value decides."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import GuardError, TraceError
from tracebridge.runtime.transaction import Transaction

pytestmark = pytest.mark.usefixtures("quiet_warnings")


def _state(module: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in module.state_dict().items()}


def _same_state(module: nn.Module, before: dict[str, torch.Tensor]) -> bool:
    # (bit for bit; a NaN -- a running variance of one value -- equals a NaN)
    return all(
        torch.allclose(v, before[k], rtol=0, atol=0, equal_nan=True)
        for k, v in module.state_dict().items()
    )


def _transaction(traced) -> Transaction:
    method = traced._methods["forward"]
    method = getattr(method, "methods", [method])[0]  # the first graph of a chain
    assert isinstance(method, Transaction)
    return method


def _as_used(traced, tmp_path, how: str):
    if how == "traced":
        return traced
    traced.save(tmp_path / "m.tb")
    if how == "loaded":
        return tracebridge.load(tmp_path / "m.tb")
    return tracebridge.load(tmp_path / "m.tb", runtime="interpreter")


class _CountedBranch(torch.autograd.Function):
    """Writes its counter, then branches on the data: the refusal is the node's own."""

    @staticmethod
    def forward(ctx, x, counter):
        counter.add_(1)
        if x.sum() > 0:
            return x * 2
        return x - 1

    @staticmethod
    def backward(ctx, grad):
        return grad * 2, None


class CountedByFunction(nn.Module):
    """The first write is a custom autograd function's, which may refuse after it; the
    graph's own later check reads only the input's size."""

    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        y = _CountedBranch.apply(x, self.calls)
        if x.shape[0] > 1:
            return y + 1
        return y


@pytest.mark.parametrize("how", ["traced", "loaded", "interpreter"])
def test_a_refusal_inside_the_node_that_writes_first_puts_the_state_back(tmp_path, how):
    traced = tracebridge.trace(CountedByFunction(), torch.ones(3), check_trace=False)
    traced = _as_used(traced, tmp_path, how)
    for _ in range(3):
        traced(torch.ones(3))  # passes: a key that would skip the copies
    before = _state(traced)
    with pytest.raises(GuardError):
        traced(-torch.ones(3))  # the same key; the function's own branch refuses
    assert _same_state(traced, before), "the function's write stayed after its refusal"
    assert traced.calls.item() == 3


class TrainingCNN(nn.Module):
    """The second batch norm's size check (``N * H * W == 1`` refuses) follows the first
    one's writes and reads conv2's weight's size."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(x))).mean(dim=(2, 3))


@pytest.mark.parametrize("how", ["traced", "loaded", "interpreter"])
def test_state_swapped_by_functional_call_is_not_a_key_that_passed(tmp_path, how):
    torch.manual_seed(0)
    traced = tracebridge.trace(TrainingCNN().train(), torch.randn(2, 3, 4, 4), check_trace=False)
    traced = _as_used(traced, tmp_path, how).train()
    assert _transaction(traced)._keyed
    x = torch.randn(1, 3, 4, 4)
    with torch.no_grad():
        traced(x)
        traced(x)  # a key that passed
        # torch.func swaps the weight into the module's table directly (no registration
        # hook): a 6x6 kernel makes conv2's output 1x1, and the second check refuses
        # after the first batch norm wrote
        before = _state(traced)
        kernel = {"conv2.weight": torch.randn(16, 8, 6, 6), "conv2.bias": torch.zeros(16)}
        with pytest.raises((GuardError, TraceError)):
            torch.func.functional_call(traced, kernel, (x,))
    assert _same_state(traced, before), "a refused call with swapped weights kept its writes"
    with torch.no_grad():
        traced(x)  # the module's own weight again: served, and remembered again
    assert len(_transaction(traced)._passed) == 1


def test_calls_with_functional_call_give_eager_results(tmp_path):
    """Served calls with swapped state are the same as eager's, and so is the state after."""
    torch.manual_seed(0)
    model = TrainingCNN().train()
    traced = tracebridge.trace(model, torch.randn(2, 3, 4, 4), check_trace=False)
    traced = _as_used(traced, tmp_path, "loaded").train()
    twin = TrainingCNN().train()
    twin.load_state_dict(traced.state_dict())
    for seed in range(3):
        torch.manual_seed(seed)
        weights = {"conv2.weight": torch.randn(16, 8, 3, 3)}
        x = torch.randn(2, 3, 4, 4)
        with torch.no_grad():
            got = torch.func.functional_call(traced, weights, (x,))
            want = torch.func.functional_call(twin, weights, (x,))
            assert torch.equal(got, want)
            assert torch.equal(traced(x), twin(x))
        for key, value in twin.state_dict().items():
            assert torch.equal(traced.state_dict()[key], value), key


def _sign(x: torch.Tensor) -> torch.Tensor:
    return (x.sum() > 0).long()  # a 0-dim tensor from the data, read as a number below


class DimFromData(nn.Module):
    """A counter written before a check on the size of a ``cat`` whose dim is a 0-dim
    tensor made from the data: ``cat``'s result's sizes follow from that tensor's value,
    not from its metadata (read by ``__index__``, as a number)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls.add_(1)
        y = torch.cat([x, x], dim=_sign(x))
        if y.shape[0] > 2:
            return y * 3
        return y - 1


class StrideFromData(nn.Module):
    """The same with a convolution's stride."""

    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))
        self.register_buffer("kernel", torch.ones(1, 1, 1))

    def forward(self, x):
        self.calls.add_(1)
        y = torch.nn.functional.conv1d(x, self.kernel, stride=_sign(x) + 1)
        if y.shape[-1] > 4:
            return y * 3
        return y - 1


@pytest.mark.parametrize("module, shape", [(DimFromData, (2, 2)), (StrideFromData, (1, 1, 8))])
def test_a_tensor_read_as_a_number_is_not_decided_by_its_metadata(module, shape):
    traced = tracebridge.trace(module(), torch.ones(shape), check_trace=False)
    for _ in range(3):
        traced(torch.ones(shape))  # passes: the dim (stride) is 1
    before = _state(traced)
    with pytest.raises(GuardError):
        traced(-torch.ones(shape))  # the same sizes; the dim (stride) is 0 (1) now
    assert _same_state(traced, before), "a refusal decided by data kept its write"


def test_size_checks_of_a_tensor_read_as_a_number_run_on_every_call():
    """runtime/size_checks.py moves a guard on a dead value into a check per key: a
    ``cat`` whose dim is read from the data must not be one (the guard was skipped for a
    known key, and the call served by the other branch's code)."""

    def branch(x):
        y = torch.cat([x, x], dim=_sign(x))
        if y.shape[0] > 2:
            return x * 3
        return x - 1

    traced = tracebridge.trace(branch, torch.ones(2, 2), check_trace=False)
    assert torch.equal(traced(torch.ones(2, 2)), branch(torch.ones(2, 2)))
    with pytest.raises(GuardError):
        traced(-torch.ones(2, 2))


@pytest.mark.parametrize("calls_before", [0, 2])
def test_a_removed_state_entry_is_the_methods_error(calls_before):
    """A transaction reads the state it copies and the state its keys hold: one removed
    since tracing is reported by the method, with a key that passed or not."""
    traced = tracebridge.trace(TrainingCNN().train(), torch.randn(2, 3, 4, 4), check_trace=False)
    x = torch.randn(2, 3, 4, 4)
    with torch.no_grad():
        for _ in range(calls_before):
            traced(x)
        del traced.bn1._buffers["running_mean"]
        del traced.conv2._parameters["weight"]
        with pytest.raises(TraceError, match="is gone from its module"):
            traced(x)


class PooledCNN(TrainingCNN):
    """2x2 images pass the first batch norm's check, and the second refuses them (1x1
    after the pool), after the first wrote."""

    def forward(self, x):
        x = nn.functional.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        return torch.relu(self.bn2(self.conv2(x))).mean(dim=(2, 3))


def test_a_call_that_began_with_guards_off_is_not_remembered():
    """Another thread may turn the guards on while a call runs without them: the call
    checked none, so its key is not one that passed."""
    traced = tracebridge.trace(PooledCNN().train(), torch.randn(2, 3, 4, 4), check_trace=False)
    transaction = _transaction(traced)
    method = transaction._method

    class GuardsOnMeanwhile:
        """The method, with the guards turned on as its call ends (as another thread
        would, during the call)."""

        def __getattr__(self, name):
            return getattr(method, name)

        def __call__(self, *args, **kwargs):
            out = method(*args, **kwargs)
            method.check_guards = True
            return out

    transaction._method = GuardsOnMeanwhile()
    x = torch.randn(2, 3, 4, 4)
    x2 = torch.randn(1, 3, 2, 2)
    with torch.no_grad():
        traced(x)
        method.check_guards = False
        traced(x2)  # served without checks
        before = _state(traced)
        with pytest.raises(GuardError):
            traced(x2)
    assert _same_state(traced, before)
