"""Tensor.set_ and torch.utils.swap_tensors run out of the tracer's sight: refused before
they change anything (trace/unseen_writes.py)."""

import pytest
import torch

import tracebridge
from tracebridge.errors import UnsupportedOpError


class SetsItsParameter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(3))

    def forward(self, x):
        with torch.no_grad():
            self.w.set_(self.w * 2)
        return x * self.w


@pytest.mark.parametrize("check_trace", [True, False])
def test_set_on_a_parameter_is_refused_and_leaves_it_as_it_was(check_trace):
    model = SetsItsParameter()
    with pytest.raises(UnsupportedOpError, match=r"Tensor\.set_ at .*test_unseen_writes"):
        tracebridge.trace(model, torch.ones(2, 3), check_trace=check_trace)
    assert model.w.tolist() == [1.0, 1.0, 1.0]  # no run of forward kept its write


def test_set_of_an_input_is_refused_rather_than_left_out_of_the_graph():
    def swap_in(x, y):
        x.set_(y)  # eager: x + 1 then has y's three values
        return x + 1

    x = torch.ones(2)
    with pytest.raises(UnsupportedOpError, match="set_"):
        tracebridge.trace(swap_in, (x, torch.zeros(3)), check_trace=False)
    assert x.tolist() == [1.0, 1.0]


def test_swap_tensors_is_refused():
    def swapped(x, y):
        torch.utils.swap_tensors(x, y)
        return x * 2

    x, y = torch.ones(2), torch.zeros(3)
    with pytest.raises(UnsupportedOpError, match="swap_tensors"):
        tracebridge.trace(swapped, (x, y), check_trace=False)
    assert x.tolist() == [1.0, 1.0] and y.tolist() == [0.0, 0.0, 0.0]


def test_outside_a_trace_both_run_as_torch_runs_them_and_no_class_entry_stays():
    tracebridge.trace(lambda x: x + 1, torch.ones(2))
    assert "set_" not in vars(torch.Tensor)  # the base class's method shows through again
    x = torch.ones(2)
    x.set_(torch.zeros(3))
    assert x.tolist() == [0.0, 0.0, 0.0]
    a, b = torch.ones(1), torch.zeros(2)
    torch.utils.swap_tensors(a, b)
    assert a.tolist() == [0.0, 0.0] and b.tolist() == [1.0]
