"""A call that a guard refuses loses nothing (runtime/transaction.py): the buffers, parameters
and inputs its graph wrote before the refusal are as they were, in the traced object and in
a loaded artifact, with either runtime; graphs that cannot be refused after a write run as
before, unwrapped."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import GuardError
from tracebridge.runtime import Method
from tracebridge.runtime.transaction import Transaction

pytestmark = pytest.mark.usefixtures("quiet_warnings")


class CountedNorm(nn.Module):
    """A call counter and BatchNorm statistics written before a branch on the result."""

    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(4)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls.add_(1)
        y = self.bn(x)
        if y[0, 0] > 0:
            return y
        return -y


def _inputs(sign: float) -> torch.Tensor:
    x = torch.randn(8, 4)
    x[0, 0] = 5.0 * sign
    x[1:, 0] = -0.1 * sign
    return x


def _state(module: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in module.state_dict().items()}


def _same_state(module: nn.Module, before: dict[str, torch.Tensor]) -> bool:
    return all(torch.equal(v, before[k]) for k, v in module.state_dict().items())


def _served_and_refused(traced, module):
    before = _state(module)
    with pytest.raises(GuardError, match="the trace assumed that bool"):
        traced(_inputs(-1.0))
    assert _same_state(module, before), "a refused call changed the module's state"
    # A call the trace serves still writes, as eager does.
    eager = CountedNorm().train()
    eager.load_state_dict(module.state_dict())
    x = _inputs(1.0)
    torch.testing.assert_close(traced(x), eager(x))
    for key, value in eager.state_dict().items():
        torch.testing.assert_close(module.state_dict()[key], value)
    assert module.state_dict()["calls"].item() == before["calls"].item() + 1


def test_a_refused_call_keeps_the_module_state_in_process():
    model = CountedNorm().train()
    traced = tracebridge.trace(model, _inputs(1.0), check_trace=False)
    assert isinstance(traced._methods["forward"], Transaction)
    _served_and_refused(traced, model)


@pytest.mark.parametrize("runtime", ["codegen", "interpreter"])
def test_a_refused_call_keeps_the_module_state_when_loaded(tmp_path, runtime):
    traced = tracebridge.trace(CountedNorm().train(), _inputs(1.0), check_trace=False)
    traced.save(tmp_path / "m.tb")
    loaded = tracebridge.load(tmp_path / "m.tb", runtime=runtime).train()
    _served_and_refused(loaded, loaded)


def test_a_refused_call_keeps_inputs_the_graph_writes():
    def bump(x):
        x.add_(1)
        if x.sum() > 0:
            return x * 2
        return x

    traced = tracebridge.trace(bump, torch.ones(3), check_trace=False)
    x = torch.full((3,), -5.0)
    with pytest.raises(GuardError):
        traced(x)
    assert torch.equal(x, torch.full((3,), -5.0))
    y = torch.ones(3)
    assert torch.equal(traced(y), torch.full((3,), 4.0))
    assert torch.equal(y, torch.full((3,), 2.0)), "a served call writes its input as eager does"


def test_a_refused_call_keeps_a_buffer_written_through_a_view():
    class Cache(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("cache", torch.zeros(2, 3))

        def forward(self, x):
            self.cache[0].copy_(x)  # a write through a view of the buffer
            if x.max() > 1:
                return x * 2
            return self.cache.sum(0)

    model = Cache()
    traced = tracebridge.trace(model, torch.rand(3) + 2, check_trace=False)
    with pytest.raises(GuardError):
        traced(torch.zeros(3))
    assert torch.equal(model.cache, torch.zeros(2, 3))


def test_graphs_that_write_nothing_or_cannot_refuse_are_not_wrapped():
    plain = tracebridge.trace(nn.Linear(3, 2), torch.rand(4, 3))
    assert type(plain._methods["forward"]) is Method

    class Counted(nn.Linear):
        def __init__(self):
            super().__init__(3, 2)
            self.register_buffer("calls", torch.zeros(()))

        def forward(self, x):
            self.calls.add_(1)  # a write, but nothing can refuse the call
            return super().forward(x)

    counted = tracebridge.trace(Counted(), torch.rand(4, 3))
    assert type(counted._methods["forward"]) is Method

    # BatchNorm in training mode refuses batch size 1 after counting the batch: wrapped.
    norm = tracebridge.trace(nn.BatchNorm1d(3).train(), torch.rand(4, 3))
    assert isinstance(norm._methods["forward"], Transaction)
    before = _state(norm)
    with pytest.raises(GuardError, match=r"shape\[0\] == 1 is False"):
        norm(torch.rand(1, 3))
    assert _same_state(norm, before)


def test_a_transaction_passes_settings_to_its_method():
    traced = tracebridge.trace(CountedNorm().train(), _inputs(1.0), check_trace=False)
    traced.check_guards = False
    assert traced._methods["forward"]._method.check_guards is False
    assert not traced.check_guards
    assert "def " in traced._methods["forward"].code


class DecodeStep(nn.Module):
    """A counter written before a decision on the length (prefill or one-token decode):
    the size-1 specialisation serves the decode, and the refused first graph's write is put
    back before it runs, so the counter moves once per call."""

    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls.add_(1)
        if x.shape[1] > 1:
            return x.cumsum(1)
        return x * 2


@pytest.mark.parametrize("where", ["traced", "codegen", "interpreter"])
def test_a_graph_that_writes_gets_size_1_specialisations_and_writes_once(tmp_path, where):
    model, eager = DecodeStep(), DecodeStep()
    traced = tracebridge.trace(model, torch.ones(2, 3))
    assert traced.program.specialised == {"forward": ["forward__size1_0"]}
    runner, state = traced, model
    if where != "traced":
        traced.save(tmp_path / "d.tb")
        runner = state = tracebridge.load(tmp_path / "d.tb", runtime=where)
    for x in (torch.rand(2, 1), torch.rand(3, 4), torch.rand(1, 1), torch.rand(1, 5)):
        torch.testing.assert_close(runner(x), eager(x))
        assert state.calls.item() == eager.calls.item()


class AliasedCounter(nn.Module):
    """A counter written through an op that returns its argument itself (review 9)."""

    def __init__(self, how: str):
        super().__init__()
        self.how = how
        self.register_buffer("count", torch.zeros(2, 2))

    def forward(self, x):
        if self.how == "dropout":
            nn.functional.dropout(self.count, 0.5, training=False).add_(1)
        elif self.how == "positive":
            torch.positive(self.count).add_(1)
        elif self.how == "t":
            self.count.t().add_(1)
        else:
            self.count.expand(2, 2).add_(1)
        if x.shape[0] == 2:
            return x * 2
        return x


@pytest.mark.parametrize("how", ["dropout", "positive", "t", "expand"])
def test_a_refused_call_keeps_a_buffer_written_through_an_op_that_returns_it(how):
    model = AliasedCounter(how)
    traced = tracebridge.trace(model, torch.ones(2, 3), check_trace=False)
    with pytest.raises(GuardError):
        traced(torch.ones(3, 3))
    assert torch.equal(model.count, torch.zeros(2, 2)), "the refused call's write stayed"
    assert torch.equal(traced(torch.ones(2, 3)), torch.full((2, 3), 2.0))
    assert torch.equal(model.count, torch.ones(2, 2))


def test_every_op_folding_counts_as_aliasing_is_followed_by_the_write_rule():
    # The rule (and the transaction) follow the same ops the runtime treats as possibly
    # returning their argument's memory; review 9 found dropout and positive missing.
    from tracebridge.check.state_writes import VIEW_OPS
    from tracebridge.runtime.folding import _ALIASING

    assert _ALIASING <= VIEW_OPS, sorted(_ALIASING - VIEW_OPS)


class CheckedCache(nn.Module):
    """A cache written after the call's checks (review 9: copied on every call, a 32 MiB
    cache made a 30 µs call take 45 ms)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(4, 8, 2))

    def forward(self, x, pos: int):
        if x.shape[0] > 4:  # refused before anything is written
            raise ValueError("batch too large")
        self.cache[:, pos] = x
        return self.cache[:, : pos + 1].sum(1)


def test_a_graph_refused_only_before_its_first_write_is_not_wrapped():
    model = CheckedCache()
    traced = tracebridge.trace(model, (torch.ones(4, 2), 3), check_trace=False)
    assert type(traced._methods["forward"]) is Method
    with pytest.raises(GuardError):
        traced(torch.ones(5, 2), 3)
    assert torch.equal(model.cache, torch.zeros(4, 8, 2)), "refused before the write"
    assert torch.equal(traced(torch.ones(4, 2), 3), torch.ones(4, 2))
    assert model.cache[:, 3].sum().item() == 8


def test_a_call_failing_on_an_input_it_cannot_write_raises_its_own_error():
    # Review 9: putting back an inference tensor raised, and the caller got that
    # RuntimeError instead of the call's OpError (a TraceError).
    def bump(x):
        x.add_(1)
        if x.sum() > 0:
            return x * 2
        return x

    traced = tracebridge.trace(bump, torch.ones(3), check_trace=False)
    with torch.inference_mode():
        x = torch.ones(3)
    with pytest.raises(tracebridge.TraceError, match="inference tensor"):
        traced(x)


class TwoCaches(nn.Module):
    """A small cache written before a check, a large one after the last check."""

    def __init__(self):
        super().__init__()
        self.register_buffer("small", torch.zeros(4, 2))
        self.register_buffer("large", torch.zeros(4, 64, 2))

    def forward(self, x, pos: int):
        self.small.copy_(x)
        if x.sum() > 100:  # may refuse after the small cache's write
            raise ValueError("too large")
        self.large[:, pos] = x
        return self.large.sum(1) + self.small


def test_only_tensors_written_before_the_last_check_are_copied():
    model = TwoCaches()
    traced = tracebridge.trace(model, (torch.ones(4, 2), 3), check_trace=False)
    method = traced._methods["forward"]
    assert isinstance(method, Transaction)
    assert [key for _, key in method._state] == ["small"]  # "large": after every check
    with pytest.raises(GuardError):
        traced(torch.full((4, 2), 30.0), 3)
    assert torch.equal(model.small, torch.zeros(4, 2))
    assert torch.equal(model.large, torch.zeros(4, 64, 2))
    assert torch.equal(traced(torch.ones(4, 2), 3), torch.full((4, 2), 2.0))


def test_the_traced_module_shares_the_root_s_own_tables():
    # Review 9: the root's parameters and buffers were copied entry by entry, so a buffer
    # replaced on the original (.to(), load_state_dict(assign=True)) left the traced
    # module on the old tensor: a BatchNorm traced alone, then moved to float64, trained
    # an orphan copy of its statistics while the original's stayed put.
    norm = nn.BatchNorm1d(3).train()
    traced = tracebridge.trace(norm, torch.rand(4, 3))
    norm.to(torch.float64)
    eager = nn.BatchNorm1d(3).train().to(torch.float64)
    x = torch.rand(4, 3, dtype=torch.float64)
    torch.testing.assert_close(traced(x), eager(x))
    torch.testing.assert_close(norm.running_mean, eager.running_mean)
    assert traced.running_mean is norm.running_mean
    norm.load_state_dict({**norm.state_dict(), "running_var": torch.full((3,), 2.0)}, assign=True)
    assert traced.running_var is norm.running_var
