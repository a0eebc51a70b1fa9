"""Parameters the traced code writes in place (issue 20, item 4; prober18b's F4).

An EMA teacher, DINO's center kept as a trainable ``nn.Parameter``, ``p.data.mul_``, a
Parameter held in a plain list: tracing runs the code many times (the recording, the
check's recording and eager calls, check inputs, a compile's warm-up and check) where
eager use ran it once. Every parameter must be as it was after each of those, bit for
bit: a program traced from an advanced state serves every call shifted.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tracebridge

# Programs that write a parameter are what users get from trace (the file checker refuses
# them only when saved or loaded): tried as traced.
pytestmark = pytest.mark.usefixtures("quiet_warnings", "unchecked_programs")


class Center(nn.Module):
    """DINO's center: a trainable parameter moved by forward, without grad."""

    def __init__(self):
        super().__init__()
        self.center = nn.Parameter(torch.zeros(3))

    def forward(self, x):
        with torch.no_grad():
            self.center.mul_(0.9).add_(0.1 * x.mean(0))
        return x - self.center


class DataWrite(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(3))

    def forward(self, x):
        self.w.data.mul_(0.5)
        return x + self.w


class InAList(nn.Module):
    def __init__(self):
        super().__init__()
        self.kept = [nn.Parameter(torch.ones(3))]  # not registered: a plain attribute

    def forward(self, x):
        with torch.no_grad():
            self.kept[0].add_(1.0)
        return x * self.kept[0]


class ViewWrite(nn.Module):
    """A write through a view of the parameter (a row of it)."""

    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.zeros(4, 3))

    def forward(self, x):
        with torch.no_grad():
            self.table[0].add_(x.sum(0))
        return x + self.table[0]


MODELS = [Center, DataWrite, InAList, ViewWrite]


def _tensors(model):
    return {
        **dict(model.state_dict()),
        **{f"kept{i}": t for i, t in enumerate(getattr(model, "kept", []))},
    }


def _snapshot(model):
    return {k: v.detach().clone() for k, v in _tensors(model).items()}


def _unchanged(model, before):
    now = _tensors(model)
    return [k for k in before if not torch.equal(now[k], before[k])] == []


TRACES = {
    "no_check": dict(check_trace=False),
    "check": {},
    "check_inputs": dict(check_inputs=[torch.full((5, 3), 2.0)]),
}


@pytest.mark.parametrize("make", MODELS, ids=lambda m: m.__name__)
@pytest.mark.parametrize("options", sorted(TRACES))
def test_tracing_leaves_parameters_written_in_place_as_they_were(make, options):
    model = make()
    before = _snapshot(model)
    tracebridge.trace(model, torch.ones(2, 3), **TRACES[options])  # traced, checked
    assert _unchanged(model, before)


@pytest.mark.parametrize("make", MODELS, ids=lambda m: m.__name__)
def test_a_program_traced_without_check_starts_where_eager_does(make):
    torch.manual_seed(0)
    model, eager = make(), make()
    eager.load_state_dict(model.state_dict())
    traced = tracebridge.trace(model, torch.ones(2, 3), check_trace=False)
    x = torch.arange(6.0).reshape(2, 3)
    for _ in range(3):  # the traced program writes its parameters as eager does
        assert torch.allclose(traced(x), eager(x))


@pytest.mark.parametrize("make", MODELS, ids=lambda m: m.__name__)
def test_compiling_leaves_parameters_written_in_place_as_they_were(make):
    model = make()
    before = _snapshot(model)
    compiled = tracebridge.compile(
        model, torch.ones(2, 3), backend="reference", check_inputs=[torch.ones(5, 3)]
    )
    assert _unchanged(model, before)
    eager = make()
    x = torch.arange(6.0).reshape(2, 3)
    for _ in range(2):  # starts where eager does, and moves as eager does
        assert torch.allclose(compiled(x), eager(x))


class LargeFrozenTeacher(nn.Module):
    """An EMA teacher's frozen weight past the size once copied before every run."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(17 * 2**20), requires_grad=False)  # 68 MiB
        self.student = nn.Parameter(torch.ones(3))

    def forward(self, x):
        with torch.no_grad():
            self.weight[:3].mul_(0.99).add_(0.01 * self.student)
        return x + self.weight[:3]


def test_a_large_frozen_parameter_written_in_place_is_put_back():
    model = LargeFrozenTeacher()
    tracebridge.trace(model, torch.ones(2, 3), check_inputs=[torch.ones(5, 3)])
    assert torch.count_nonzero(model.weight) == 0


class Helper:
    """A plain object holding a tensor (no module, no buffer)."""

    def __init__(self):
        self.count = torch.zeros(())


class CountsInAHelper(nn.Module):
    def __init__(self):
        super().__init__()
        self.helper = Helper()

    def forward(self, x):
        self.helper.count.add_(1)
        return x * 2


@pytest.mark.parametrize("options", sorted(TRACES))
def test_a_tensor_of_a_plain_object_written_in_place_is_put_back(options):
    model = CountsInAHelper()
    tracebridge.trace(model, torch.ones(2, 3), **TRACES[options])
    assert model.helper.count.item() == 0


class RebindsItsWeight(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(3))

    def forward(self, x):
        self.w = nn.Parameter(self.w.detach() + 1)  # eager: 2, 3, 4 on later calls
        return x * self.w


def test_a_parameter_assigned_anew_by_forward_is_refused_and_put_back():
    """prober19b F1: a trace served the first call's weights on every call."""
    model = RebindsItsWeight()
    before = model.w
    with pytest.raises(tracebridge.TraceError, match=r"assigns a new nn.Parameter to 'w'"):
        tracebridge.trace(model, torch.ones(1, 3))
    assert model.w is before and torch.equal(model.w, torch.ones(3))
