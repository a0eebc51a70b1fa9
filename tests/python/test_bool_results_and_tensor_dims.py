"""Ops that answer a Python bool (``torch.equal``, ``allclose``) and dimensions given as
0-dim tensors (``x.size(t)``): what the trace read there is guarded, so a call where it
differs is refused, never served by the traced branch or dimension (both were silently
wrong: the bool and the dimension were constants of the trace)."""

from __future__ import annotations

import pytest
import torch

import tracebridge
from tracebridge.errors import GuardError

pytestmark = pytest.mark.usefixtures("quiet_warnings")


def _branch_on(test):
    def fn(x, y):
        if test(x, y):
            return x * 2
        return x - 1

    return fn


@pytest.mark.parametrize(
    "test",
    [
        torch.equal,
        lambda x, y: x.equal(y),
        torch.allclose,
        lambda x, y: x.allclose(y, atol=1e-3),
    ],
)
def test_a_branch_on_a_bool_an_op_answers_is_guarded(tmp_path, test):
    fn = _branch_on(test)
    same = torch.ones(3)
    traced = tracebridge.trace(fn, (same, same.clone()))
    traced.save(tmp_path / "f.tb")
    for module in (traced, tracebridge.load(tmp_path / "f.tb")):
        y = torch.full((3,), 5.0)
        assert torch.equal(module(y, y.clone()), fn(y, y.clone()))
        with pytest.raises(GuardError, match="differs|now it is False"):
            module(same, same + 1)


@pytest.mark.parametrize("read", ["size", "stride"])
def test_a_dimension_given_as_a_tensor_is_guarded(tmp_path, read):
    def fn(x, d):
        return x.reshape(getattr(x, read)(d), -1)

    x = torch.randn(2, 3)
    traced = tracebridge.trace(fn, (x, torch.tensor(0)))
    traced.save(tmp_path / "f.tb")
    for module in (traced, tracebridge.load(tmp_path / "f.tb")):
        other = torch.randn(4, 5)
        assert torch.equal(module(other, torch.tensor(0)), fn(other, torch.tensor(0)))
        with pytest.raises(GuardError, match=r"item\(\) == 0"):
            module(x, torch.tensor(1))
