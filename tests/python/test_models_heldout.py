"""Patterns that the held-out sweep (benchmarks/heldout.py) found in published models the
zoo does not hold, reproduced by small stand-in modules (no timm or transformers needed).
Each test asserts results: the trace agrees with eager on calls it was not made with, or it
refuses with an error that names the line and the reason.
"""

from __future__ import annotations

import inspect
import math
import os
import warnings

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import UnsupportedOpError

HERE = os.path.basename(__file__)


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _line_of(cls, text: str) -> int:
    lines, first = inspect.getsourcelines(cls)
    return first + next(i for i, line in enumerate(lines) if text in line)


# --- a traced size where PyTorch takes only a tensor --------------------------------------


def _torch_int(x):
    """transformers' ``torch_int``: a tensor under torch.jit.trace, else a Python int."""
    if torch.jit.is_tracing() and isinstance(x, torch.Tensor):
        return x.to(torch.int64)
    return int(x)


class JitSizesAsTensors(nn.Module):
    """transformers' MobileViT unfolding: behind ``torch.jit.is_tracing()`` it calls
    ``torch.ceil`` on a size, as torch.jit.trace presents sizes (0-dim tensors)."""

    def forward(self, x):
        h = x.shape[2]
        new_h = (
            _torch_int(torch.ceil(h / 2) * 2) if torch.jit.is_tracing() else math.ceil(h / 2) * 2
        )
        return x[:, :, :new_h].sum(2)


def test_a_size_given_where_a_tensor_is_taken_is_refused_naming_the_line():
    x = torch.randn(2, 3, 8, 8)
    JitSizesAsTensors()(x)  # eager runs: the line is reached only while tracing
    with pytest.raises(UnsupportedOpError) as info:
        tracebridge.trace(JitSizesAsTensors(), (x,))
    message = str(info.value)
    assert f"{HERE}:{_line_of(JitSizesAsTensors, 'torch.ceil(h / 2)')}" in message
    assert "SymFloat" in message and "must be Tensor" in message
    assert "torch.jit.is_tracing()" in message and "math.ceil" in message


class PlainTypeError(nn.Module):
    def forward(self, x):
        return torch.ceil(2.5) + x  # the user's own mistake, eager raises it too


def test_a_type_error_not_about_traced_numbers_stays_as_eager_raises_it():
    x = torch.randn(2, 3)
    with pytest.raises(TypeError) as info:
        tracebridge.trace(PlainTypeError(), (x,))
    assert not isinstance(info.value, UnsupportedOpError)
    assert "must be Tensor, not float" in str(info.value)
