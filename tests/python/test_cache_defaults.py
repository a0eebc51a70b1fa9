"""Folded and memoised values follow what torch itself would make at the call.

A factory without a dtype makes the default dtype; under ``set_default_device`` (a torch
function mode), a tracer, or an autocast region, ops make other values than outside them,
without any state or size changing. The default dtype is part of every cache key, and
calls under a function mode or autocast compute the values instead of reusing them.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

import tracebridge
from tracebridge.runtime import folding

# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


class Defaults(nn.Module):
    """A folded mask and a memoised one, both made by factories without a dtype, and a
    folded product of weights (which autocast runs in bfloat16)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.rand(4, 256))
        self.v = nn.Parameter(torch.rand(256, 4))

    def forward(self, x):
        fixed = torch.ones(4, 4).triu()
        sized = torch.ones(x.shape[0], 4).tril(-1)
        return x @ (self.w @ self.v) + x * fixed[1] + sized


@pytest.fixture
def loaded(tmp_path):
    torch.manual_seed(0)
    model = Defaults().eval()
    path = tmp_path / "m.tb"
    tracebridge.save(tracebridge.trace(model, torch.rand(3, 4)), path)
    traced = tracebridge.load(path)
    code = traced.code
    assert "folded" in code and "memoised by size" in code
    return model, traced


def test_another_default_dtype_is_another_key(loaded):
    model, traced = loaded
    x = torch.rand(3, 4)
    with torch.no_grad():
        assert traced(x).dtype == torch.float32  # fills both caches
        try:
            torch.set_default_dtype(torch.float64)
            got, want = traced(x), model(x)
        finally:
            torch.set_default_dtype(torch.float32)
        assert got.dtype == want.dtype == torch.float64
        assert torch.allclose(got, want)
        assert traced(x).dtype == torch.float32


class Seen(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.names: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.names.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


def test_under_a_function_mode_the_values_are_computed(loaded):
    _, traced = loaded
    x = torch.rand(3, 4)
    with torch.no_grad():
        traced(x)
        assert not folding.outside_the_key()
        for _ in range(2):
            with Seen() as mode:
                assert folding.outside_the_key()
                traced(x)
            assert {"triu", "tril"} <= set(mode.names)  # a mode sees every op, every call


def test_in_an_autocast_region_the_values_are_computed(loaded):
    model, traced = loaded
    x = torch.rand(3, 4)
    with torch.no_grad():
        outside = traced(x)  # folded product of weights, in float32
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got, want = traced(x), model(x)
        assert got.dtype == want.dtype and torch.equal(got, want)
        assert torch.equal(traced(x), outside)
