"""A graph that writes before checks that only read sizes runs as a transaction once per
input size (runtime/transaction.py, Note "no copies where the refusals are already
decided"): later calls with a size that passed copy nothing, are the same as eager's, and
a call refused at a new size, after the state was replaced, or where data decides still
loses nothing."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import GuardError, TraceError
from tracebridge.runtime.transaction import Transaction, decided_by

pytestmark = pytest.mark.usefixtures("quiet_warnings")


class TrainingCNN(nn.Module):
    """Two batch norms in training mode: the second one's size check (``N * H * W == 1``
    refuses) follows the first one's writes."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)

    def forward(self, x):
        x = self.pool(torch.relu(self.bn1(self.conv1(x))))
        return torch.relu(self.bn2(self.conv2(x))).mean(dim=(2, 3))


def _state(module: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in module.state_dict().items()}


def _same_state(module: nn.Module, before: dict[str, torch.Tensor]) -> bool:
    return all(torch.equal(v, before[k]) for k, v in module.state_dict().items())


def _pair(tmp_path, loaded: bool):
    """(traced or loaded module, its eager twin with the same state), in training mode."""
    torch.manual_seed(0)
    model = TrainingCNN().train()
    traced = tracebridge.trace(model, torch.randn(2, 3, 8, 8), check_trace=False)
    if loaded:
        traced.save(tmp_path / "cnn.tb")
        traced = tracebridge.load(tmp_path / "cnn.tb").train()
    twin = TrainingCNN().train()
    twin.load_state_dict(traced.state_dict())
    return traced, twin


class _Snapshots:
    """Counts the copies transactions take."""

    def __init__(self, monkeypatch):
        self.count = 0
        original = Transaction._snapshot

        def counted(transaction, leaves):
            self.count += 1
            return original(transaction, leaves)

        monkeypatch.setattr(Transaction, "_snapshot", counted)


def _steps_agree(traced, twin, shapes) -> None:
    for shape in shapes:
        x = torch.randn(shape)
        with torch.no_grad():
            assert torch.equal(traced(x), twin(x))
        for key, value in twin.state_dict().items():
            assert torch.equal(traced.state_dict()[key], value), key


@pytest.mark.parametrize("loaded", [False, True])
def test_a_size_that_passed_runs_without_copies(tmp_path, monkeypatch, loaded):
    traced, twin = _pair(tmp_path, loaded)
    transaction = traced._methods["forward"]
    assert isinstance(transaction, Transaction) and transaction._keyed
    snapshots = _Snapshots(monkeypatch)
    _steps_agree(traced, twin, [(2, 3, 8, 8)] * 3 + [(5, 3, 12, 12)] * 3 + [(2, 3, 8, 8)])
    assert snapshots.count == 2  # once per size: later calls copied nothing
    assert len(transaction._passed) == 2


def test_a_refusal_at_a_new_size_still_puts_the_state_back(tmp_path, monkeypatch):
    traced, twin = _pair(tmp_path, loaded=True)
    snapshots = _Snapshots(monkeypatch)
    _steps_agree(traced, twin, [(2, 3, 8, 8)] * 2)
    before = _state(traced)
    # 2x2 images: the second batch norm sees one value per channel
    with pytest.raises((GuardError, TraceError)):
        traced(torch.randn(1, 3, 2, 2))
    assert _same_state(traced, before), "a refused call changed the running statistics"
    with pytest.raises((GuardError, TraceError)):
        traced(torch.randn(1, 3, 2, 2))  # a refused size is never remembered
    assert _same_state(traced, before)
    assert snapshots.count == 3
    _steps_agree(traced, twin, [(2, 3, 8, 8)])
    assert snapshots.count == 3


@pytest.mark.parametrize("loaded", [False, True])
def test_replacing_a_weight_forgets_the_sizes_that_passed(tmp_path, loaded):
    traced, _ = _pair(tmp_path, loaded)
    x = torch.randn(1, 3, 8, 8)
    with torch.no_grad():
        traced(x)  # passes: 4x4 after the pool, 4x4 after conv2
    # A 6x6 kernel makes conv2's output 1x1: the second batch norm's check refuses now,
    # after the first one wrote. The key held the weight it replaced: it serves no more.
    traced.conv2.weight = nn.Parameter(torch.randn(16, 8, 6, 6))
    before = _state(traced)
    with pytest.raises((GuardError, TraceError)), torch.no_grad():
        traced(x)
    assert _same_state(traced, before), "the sizes decided before the weight changed held"


def test_a_buffer_set_elsewhere_every_step_leaves_the_keys_alone(tmp_path, monkeypatch):
    traced, twin = _pair(tmp_path, loaded=True)
    snapshots = _Snapshots(monkeypatch)
    other = nn.Module()
    for step in range(3):
        other.register_buffer("step", torch.tensor(step))  # another model's bookkeeping
        other.step = torch.tensor(step + 1)
        _steps_agree(traced, twin, [(2, 3, 8, 8)])
    assert snapshots.count == 1


def test_invalidate_caches_forgets_the_sizes_that_passed(tmp_path):
    traced, _ = _pair(tmp_path, loaded=True)
    x = torch.randn(1, 3, 8, 8)
    with torch.no_grad():
        traced(x)
    traced.conv2.weight.data = torch.randn(16, 8, 6, 6)  # torch reports nothing
    tracebridge.invalidate_caches()
    before = _state(traced)
    with pytest.raises((GuardError, TraceError)), torch.no_grad():
        traced(x)
    assert _same_state(traced, before)


def test_calls_with_guards_off_or_under_a_function_mode_remember_nothing(tmp_path):
    traced, _ = _pair(tmp_path, loaded=True)
    transaction = traced._methods["forward"]
    with torch.no_grad(), tracebridge.guards_disabled():
        traced(torch.randn(2, 3, 8, 8))
    assert transaction._passed == {}

    class Passing(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), Passing():
        traced(torch.randn(2, 3, 8, 8))
    assert transaction._passed == {}


class DataCheck(nn.Module):
    """A counter written before a branch on the data: no key decides it."""

    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls.add_(1)
        if x.sum() > 0:
            return x * 2
        return x - 1


def test_a_check_on_data_stays_a_transaction_on_every_call():
    model = DataCheck()
    traced = tracebridge.trace(model, torch.ones(3), check_trace=False)
    transaction = traced._methods["forward"]
    assert isinstance(transaction, Transaction) and not transaction._keyed
    for _ in range(3):
        traced(torch.ones(3))
    with pytest.raises(GuardError):
        traced(-torch.ones(3))
    assert model.calls.item() == 3


def _graph_of(fn, *inputs):
    traced = tracebridge.trace(fn, inputs, check_trace=False)
    return traced.program.methods["forward"]


def _refusals(graph) -> list[int]:
    return [i for i, n in enumerate(graph.nodes) if n.op == "prim.guard"]


def test_decided_by_follows_sizes_and_refuses_data():
    def by_size(x, buffer):
        buffer.add_(1)
        y = torch.relu(x.reshape(x.shape[0], -1))
        if y.shape[1] > 4:
            return y * 2
        return y

    graph = _graph_of(by_size, torch.randn(2, 3, 4), torch.zeros(()))
    assert decided_by(graph, {}, _refusals(graph)) == ([0], [])

    def by_count(x, buffer):
        buffer.add_(1)
        if torch.nonzero(x).shape[0] > 2:  # as many rows as non-zero values
            return x * 2
        return x

    graph = _graph_of(by_count, torch.ones(4), torch.zeros(()))
    assert decided_by(graph, {}, _refusals(graph)) is None

    def by_value(x, buffer):
        buffer.add_(1)
        if int(x.max()) > 2:  # a read into Python
            return x * 2
        return x

    graph = _graph_of(by_value, torch.arange(4.0), torch.zeros(()))
    assert decided_by(graph, {}, _refusals(graph)) is None


def test_moving_a_traced_module_moves_the_generation(tmp_path):
    from tracebridge.runtime import transaction

    traced, _ = _pair(tmp_path, loaded=True)
    before = transaction._generation[0]
    traced.double()
    assert transaction._generation[0] > before
    with torch.no_grad():
        assert traced(torch.randn(2, 3, 8, 8, dtype=torch.float64)).dtype == torch.float64
