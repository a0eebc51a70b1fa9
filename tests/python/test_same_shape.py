"""A reshape or view to the shape its tensor already has is a shape test in calls without
autograd (runtime/same_shape.py): the same results as eager and the interpreter on every
shape (other sizes, 0 beside -1), and the call wherever a view could be told apart."""

from __future__ import annotations

import re

import pytest
import torch

import tracebridge
from tracebridge.errors import TraceError

from .graph_helpers import loaded, no_grad_code, recording_subclass, same_bits

# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


def attention_output(x, w):
    """Hugging Face's sdpa epilogue: the output reshaped to its own shape, then merged."""
    y = torch.matmul(x, w)
    b, _, s, d = y.shape
    z = y.reshape(b, -1, s, d).transpose(1, 2).contiguous().reshape(b, s, -1)
    return z * 2, y.view(b, y.shape[1], s, d) + 1


def _tested(code: str) -> int:
    """How many reshapes and views the code writes as a shape test."""
    return len(re.findall(r"= v\d+ if _plain and _type\(v\d+\) is _Tensor and \(v\d+\.shape", code))


def test_reshapes_to_the_same_shape_are_shape_tests(tmp_path):
    torch.manual_seed(0)
    w = torch.randn(5, 5)
    traced = tracebridge.trace(attention_output, (torch.randn(1, 2, 3, 5), w))
    assert _tested(no_grad_code(traced)) == 2
    assert _tested(traced.code) == 0  # the function with autograd calls
    fast = loaded(traced, tmp_path)
    plain = tracebridge.load(tmp_path / "m.tb", runtime="interpreter")
    with torch.no_grad():
        for shape in [(1, 2, 3, 5), (2, 4, 1, 5), (3, 1, 7, 5), (2, 0, 3, 5)]:
            x = torch.randn(shape)
            expected = attention_output(x, w)
            for got in (fast(x, w), plain(x, w)):
                assert all(same_bits(a, b) for a, b in zip(got, expected, strict=True))


def test_a_zero_beside_minus_one_raises_as_eager_does(tmp_path):
    def f(x):
        y = x * 2
        return y.reshape(y.shape[0], -1) + 1

    traced = tracebridge.trace(f, (torch.randn(2, 3),))
    assert _tested(no_grad_code(traced)) == 1
    fast = loaded(traced, tmp_path)
    with torch.no_grad():
        x = torch.randn(4, 6)
        assert same_bits(fast(x), f(x))
        with pytest.raises(RuntimeError):
            f(torch.randn(0, 3))
        with pytest.raises((RuntimeError, TraceError)):
            fast(torch.randn(0, 3))


def _returned(x):
    y = x * 2
    return y.reshape(y.shape)


def _written(x):
    y = x * 2
    z = y.view(y.shape[0], y.shape[1])
    z.add_(1)
    return z * 1


def _a_view(x):
    y = x.transpose(0, 1)
    return y.reshape(y.shape[0], -1) * 1


@pytest.mark.parametrize("fn", [_returned, _written, _a_view])
def test_views_that_could_be_told_apart_stay_calls(fn, tmp_path):
    traced = tracebridge.trace(fn, (torch.randn(2, 3),), check_trace=False)
    assert _tested(no_grad_code(traced)) == 0
    fast = loaded(traced, tmp_path)
    with torch.no_grad():
        x = torch.randn(2, 3)
        assert same_bits(fast(x), fn(x))


def test_subclasses_see_the_reshape(tmp_path):
    Sub = recording_subclass()

    w = torch.randn(5, 5)
    fast = loaded(tracebridge.trace(attention_output, (torch.randn(1, 2, 3, 5), w)), tmp_path)
    x = torch.randn(1, 2, 3, 5)
    with torch.no_grad():
        got = fast(x.as_subclass(Sub), w)
    assert Sub.calls.count("reshape") == 2 and "view" in Sub.calls
    assert same_bits(got[0].as_subclass(torch.Tensor), attention_output(x, w)[0])
