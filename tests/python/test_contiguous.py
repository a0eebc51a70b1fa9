"""``x.contiguous().reshape(...)`` runs as one reshape, copied where not contiguous, in
calls without autograd (runtime/contiguous.py): the same values, sizes and strides as
eager and the interpreter on every layout, both calls wherever a view could be told apart."""

from __future__ import annotations

import pytest
import torch

import tracebridge

from .graph_helpers import loaded, no_grad_code, recording_subclass, same_bits, same_outputs

ONE = "Tensor.contiguous, Tensor.reshape: one reshape"
ONE_VIEW = "Tensor.contiguous, Tensor.view: one reshape"


# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


def merge_heads(x):
    """Hugging Face's attention epilogue."""
    b, h, s, d = x.shape
    y = (x * 2).transpose(1, 2)
    z = (x * 3).transpose(1, 2)
    return y.contiguous().reshape(b, s, -1) + 1, z.contiguous().view(b, s, h * d) * 3


def strided(x):
    """A tensor ``reshape`` can view but not as contiguous, and a channels-last one."""
    y = x[:, ::2]
    z = x.permute(0, 2, 3, 1)
    return y.contiguous().view(y.shape[0], y.shape[1], 1, -1) - 1, z.contiguous().reshape(-1) * 1


LAYOUTS = [
    torch.randn(1, 2, 3, 4),
    torch.randn(2, 3, 1, 4),  # the transpose is contiguous: a view, no copy
    torch.randn(2, 1, 5, 4),
    torch.randn(2, 4, 3, 5).transpose(1, 3),
    torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last),
    torch.randn(2, 0, 3, 4),
]


@pytest.mark.parametrize("fn", [merge_heads, strided])
def test_contiguous_then_reshape_is_one_reshape_with_the_same_results(fn, tmp_path):
    torch.manual_seed(0)
    traced = tracebridge.trace(fn, (torch.randn(2, 3, 4, 5),), check_trace=False)
    code = no_grad_code(traced)
    assert code.count(ONE) + code.count(ONE_VIEW) == 2
    assert ONE not in traced.code and ONE_VIEW not in traced.code  # the one with autograd
    fast = loaded(traced, tmp_path)
    plain = tracebridge.load(tmp_path / "m.tb", runtime="interpreter")
    with torch.no_grad():
        for x in LAYOUTS:
            if fn is strided and x.shape[1] == 0:
                continue
            for dtype in (torch.float32, torch.float64):
                x = x.to(dtype)
                expected = fn(x)
                for got in (fast(x), plain(x)):
                    assert all(same_bits(a, b) for a, b in zip(got, expected, strict=True))


def _read_twice(x):
    y = x.t().contiguous()
    return y.reshape(-1) * 1, y + 1


def _returned(x):
    return x.t().contiguous().reshape(-1)


def _written(x):
    y = x.t().contiguous().reshape(-1)
    y.add_(1)
    return y * 1


@pytest.mark.parametrize("fn", [_read_twice, _returned, _written])
def test_contiguous_results_that_could_be_told_apart_stay_calls(fn, tmp_path):
    traced = tracebridge.trace(fn, (torch.randn(3, 4),), check_trace=False)
    assert ONE not in no_grad_code(traced)
    fast = loaded(traced, tmp_path)
    with torch.no_grad():
        x = torch.randn(3, 4)
        got, expected = fast(x), fn(x)
        assert same_outputs(got, expected)


def test_subclasses_see_both_calls(tmp_path):
    Sub = recording_subclass()

    fast = loaded(tracebridge.trace(merge_heads, (torch.randn(2, 3, 4, 5),)), tmp_path)
    x = torch.randn(2, 3, 4, 5)
    with torch.no_grad():
        got = fast(x.as_subclass(Sub))
    assert Sub.calls.count("contiguous") == 2 and "is_contiguous" not in Sub.calls
    assert same_bits(got[0].as_subclass(torch.Tensor), merge_heads(x)[0])


def sizes_of_the_copy(x):
    """Older Hugging Face layers: the copy's sizes read between the two calls."""
    y = (x * 2).permute(0, 2, 1, 3).contiguous()
    return y.view(y.size()[:-2] + (y.size(-2) * y.size(-1),)) + y.numel() + len(y)


def sizes_after_a_write(x):
    y = (x * 2).permute(0, 2, 1, 3)
    c = y.contiguous()
    y.unsqueeze_(0)  # the permuted tensor's sizes change, the copy's do not
    return c.view(c.size(0), -1) + y.size(0), y


def test_sizes_read_between_the_two_calls_are_the_copied_tensor_s(tmp_path):
    torch.manual_seed(0)
    traced = tracebridge.trace(sizes_of_the_copy, (torch.randn(2, 3, 4, 5),), check_trace=False)
    assert no_grad_code(traced).count(ONE_VIEW) == 1
    fast = loaded(traced, tmp_path)
    plain = tracebridge.load(tmp_path / "m.tb", runtime="interpreter")
    with torch.no_grad():
        for x in LAYOUTS:
            expected = sizes_of_the_copy(x)
            assert same_bits(fast(x), expected) and same_bits(plain(x), expected)


def test_sizes_of_a_copy_whose_source_is_written_stay_the_copy_s(tmp_path):
    traced = tracebridge.trace(sizes_after_a_write, (torch.randn(2, 3, 4, 5),), check_trace=False)
    assert ONE_VIEW not in no_grad_code(traced)
    fast = loaded(traced, tmp_path)
    with torch.no_grad():
        for x in LAYOUTS[:4]:
            assert same_outputs(fast(x), sizes_after_a_write(x))
