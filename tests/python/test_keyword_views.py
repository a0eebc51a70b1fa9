"""Ops called with keyword arguments only, on views (prober22a F5).

``torch.add(input=x.view(-1), other=1.0)`` records a node without positional arguments;
the plan of view trees (runtime/views.py) read ``node.args[0]`` of each reader of a view
and raised IndexError while generating code, which the call then reported as an op that
failed on unsuitable inputs (Hugging Face's beam search reaches it). Each case is compared
with eager in process and loaded, with and without autograd.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import tracebridge
from tracebridge.errors import TraceError

WEIGHT = torch.randn(4, 6, generator=torch.Generator().manual_seed(0))

CASES = {
    "add": lambda x: torch.add(input=x.view(-1), other=1.0),
    "add_views": lambda x: torch.add(input=x[0], other=x[1]),
    "cat": lambda x: torch.cat(tensors=[x.view(-1), x.view(-1)]),
    "stack": lambda x: torch.stack(tensors=[x[0], x[1]], dim=0),
    "mul": lambda x: torch.mul(input=x[0], other=2.0),
    "where": lambda x: torch.where(condition=x.view(-1) > 0, input=x.view(-1), other=0.0),
    "softmax": lambda x: torch.softmax(input=x.t(), dim=-1),
    "sum": lambda x: torch.sum(input=x.t(), dim=0),
    "reshape": lambda x: torch.reshape(input=x.t(), shape=(-1,)),
    "permute": lambda x: torch.permute(input=x.view(2, 3, 1), dims=(2, 0, 1)) + 0,
    "matmul": lambda x: torch.matmul(input=x.t(), other=x),
    "linear": lambda x: F.linear(input=x.view(3, 2).repeat(1, 3), weight=WEIGHT),
    "narrow": lambda x: torch.narrow(input=x.t(), dim=0, start=1, length=2) * 2,
    "layer_norm": lambda x: F.layer_norm(input=x.t(), normalized_shape=(2,)),
    "masked_fill": lambda x: torch.masked_fill(input=x.t(), mask=x.t() > 0, value=0.0),
    "written_after": lambda x: torch.add(input=x.clone().view(-1), other=1.0).mul_(other=2.0),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_op_given_a_view_by_keyword_runs_as_eager(name, tmp_path):
    fn = CASES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tracebridge.TracerWarning)
        traced = tracebridge.trace(fn, (torch.randn(2, 3),))
    traced.save(tmp_path / "f.tb")
    loaded = tracebridge.load(tmp_path / "f.tb")
    x = torch.randn(2, 3)
    for run in (traced, loaded):
        assert torch.equal(run(x), fn(x))
        with torch.no_grad():
            assert torch.equal(run(x), fn(x))


def test_a_fault_of_the_code_generator_is_not_blamed_on_the_inputs(monkeypatch, tmp_path):
    """Where generating the code fails, the call says so (a fault in tracebridge, with
    the way around it), not that an op failed on the inputs."""
    from tracebridge.runtime import method

    tracebridge.trace(lambda x: x * 2, (torch.randn(3),)).save(tmp_path / "f.tb")
    loaded = tracebridge.load(tmp_path / "f.tb")  # no code generated yet

    def broken(*args, **kwargs):
        raise IndexError("list index out of range")

    monkeypatch.setattr(method, "compile_function", broken)
    with pytest.raises(TraceError, match="could not generate the code") as info:
        loaded(torch.randn(3))
    assert not isinstance(info.value, tracebridge.OpError)
    assert "runtime='interpreter'" in str(info.value)
    assert "do not suit" not in str(info.value)
