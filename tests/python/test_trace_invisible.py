"""Tensors made by code the tracer cannot see (TorchScript, C++ extensions) from the inputs.

The tracer records what runs through PyTorch's Python API. A scripted module or function
runs its ops in TorchScript's interpreter, out of its sight: its result reached the trace
as a constant, and where no other check tried another shape (a 1-D input whose size the
code fixes) the trace gave the example's answer for every input -- silently wrong. The
check now runs the code and the trace on the example with its values moved (same shapes)
wherever the trace keeps a constant, and refuses naming the line and the reason.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge import TracingCheckError

HERE = __file__.rsplit("/", 1)[-1]


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


class ScriptedInside(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.jit.script(nn.Linear(3, 3))

    def forward(self, x):
        return self.inner(x).tanh()  # the scripted call


@torch.jit.script
def doubled(x):
    return x * 2


def calls_a_script_function(x):
    return doubled(x) + 1  # the scripted call


def hides_from_the_tracer(x):
    with torch._C.DisableTorchFunction():  # as a C++ extension: no Python API call seen
        y = x * 3
    return y.sin()  # the hidden result used


@pytest.mark.parametrize(
    "fn, example, line",
    [
        (ScriptedInside(), torch.randn(3), "return self.inner(x).tanh()"),
        (ScriptedInside(), torch.randn(2, 3), "return self.inner(x).tanh()"),
        (calls_a_script_function, torch.randn(4), "return doubled(x) + 1"),
        (hides_from_the_tracer, torch.randn(5), "return y.sin()"),
    ],
)
def test_a_tensor_made_out_of_sight_from_the_inputs_is_refused(fn, example, line):
    with pytest.raises(TracingCheckError) as info:
        tracebridge.trace(fn, example)
    message = str(info.value)
    assert "may depend on the inputs as a constant" in message
    assert "TorchScript" in message and HERE in message and line in message


TABLE = torch.arange(4.0)


def reads_a_global_table(x):
    return x * TABLE  # a constant that does not depend on the inputs


def test_a_constant_that_does_not_depend_on_the_inputs_is_kept(tmp_path):
    traced = tracebridge.trace(reads_a_global_table, torch.randn(4))
    loaded = tracebridge.load(traced.save(tmp_path / "t.tb") or tmp_path / "t.tb")
    x = torch.randn(4)
    assert torch.equal(traced(x), x * TABLE) and torch.equal(loaded(x), x * TABLE)


def test_the_check_runs_with_check_inputs_too():
    with pytest.raises(TracingCheckError, match="may depend on the inputs as a constant"):
        tracebridge.trace(ScriptedInside(), torch.randn(3), check_inputs=[(torch.randn(3),)])


def test_moving_values_leaves_inputs_that_cannot_move():
    from tracebridge.check.verify import _rolled

    assert _rolled((torch.ones(3), torch.zeros(2)), {}) is None
    (a, b), _ = _rolled((torch.arange(3), torch.ones(2)), {})
    assert a.tolist() == [2, 0, 1] and b.tolist() == [1.0, 1.0]


def test_a_function_transform_out_of_sight_is_refused_too():
    def row_norms(x):
        return torch.vmap(lambda row: row.dot(row))(x)

    with pytest.raises(TracingCheckError, match="torch.vmap"):
        tracebridge.trace(row_norms, torch.randn(3, 4))
