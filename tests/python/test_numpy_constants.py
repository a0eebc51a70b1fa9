"""numpy arrays handed to torch inside a traced call (the zoo's BigBird builds its block plan
with numpy, then ``torch.tensor(plan)``): a constant of the trace with its shape and dtype."""

from __future__ import annotations

import warnings

import numpy as np
import torch

import tracebridge


class _Plan(torch.nn.Module):
    def forward(self, x):
        plan = np.stack([np.arange(4), np.arange(4) * 2])  # (2, 4) int64, as BigBird's
        return x + torch.tensor(plan, dtype=torch.float32)


class _OneElement(torch.nn.Module):
    def forward(self, x):
        return x + torch.tensor(np.array([[1.5]]))  # (1, 1) float64: shape and dtype matter


def _trace(model, x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tracebridge.trace(model, x)


def test_a_numpy_array_given_to_torch_is_a_constant_of_the_trace():
    traced = _trace(_Plan(), torch.randn(2, 2, 4))
    for batch in (2, 1, 5):
        x = torch.randn(batch, 2, 4)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert torch.equal(traced(x), _Plan()(x))


def test_a_one_element_numpy_array_keeps_its_shape_and_dtype():
    x = torch.randn(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = _trace(_OneElement(), x)(x)
    want = _OneElement()(x)
    assert got.shape == want.shape == (1, 3)
    assert got.dtype == want.dtype == torch.float64
    assert torch.equal(got, want)


def test_a_numpy_scalar_is_a_number():
    class Scaled(torch.nn.Module):
        def forward(self, x):
            return x * np.float32(2.0)

    x = torch.randn(3)
    assert torch.equal(_trace(Scaled(), x)(x), x * 2.0)
