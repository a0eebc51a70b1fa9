"""Hugging Face's ``repeat_kv`` runs as one ``repeat_interleave`` in calls without autograd
(runtime/repeats.py): the same values and strides as eager and the interpreter on every
shape (one head, empty, broadcast heads, other layouts), the three calls elsewhere."""

from __future__ import annotations

import pytest
import torch

import tracebridge
from tracebridge.runtime import checked_ops
from tracebridge.runtime.codegen import compile_function

from .graph_helpers import loaded, no_grad_code, recording_subclass, same_bits, same_outputs

ONE = "getitem, Tensor.expand, Tensor.reshape: repeat_interleave"


# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


def repeat_kv(x, n_rep=3):
    """transformers' ``repeat_kv``."""
    b, h, s, d = x.shape
    y = x[:, :, None, :, :].expand(b, h, n_rep, s, d)
    return y.reshape(b, h * n_rep, s, d) * 2


LAYOUTS = [
    torch.randn(1, 2, 3, 4),
    torch.randn(2, 1, 3, 4),  # one head: the reshape views
    torch.randn(2, 3, 0, 4),  # empty
    torch.randn(2, 1, 3, 4).expand(2, 5, 3, 4),  # heads broadcast: stride 0
    torch.randn(2, 3, 4, 5).transpose(1, 2),
    torch.randn(1, 4, 1, 8),
]


def test_repeat_kv_is_one_repeat_interleave_with_the_same_results(tmp_path):
    torch.manual_seed(0)
    traced = tracebridge.trace(repeat_kv, (torch.randn(1, 2, 3, 4),), check_trace=False)
    assert no_grad_code(traced).count(ONE) == 1
    assert ONE not in traced.code  # the function with autograd
    fast = loaded(traced, tmp_path)
    plain = tracebridge.load(tmp_path / "m.tb", runtime="interpreter")
    with torch.no_grad():
        for x in LAYOUTS:
            for dtype in (torch.float32, torch.float64):
                x = x.to(dtype)
                expected = repeat_kv(x)
                assert same_bits(fast(x), expected) and same_bits(plain(x), expected)
    x = torch.randn(1, 2, 3, 4, requires_grad=True)
    assert same_bits(fast(x), repeat_kv(x))  # with autograd: the three calls


def test_the_size_check_of_the_expand_still_refuses(tmp_path, monkeypatch):
    traced = tracebridge.trace(repeat_kv, (torch.randn(1, 2, 3, 4),), check_trace=False)
    fast = loaded(traced, tmp_path)
    monkeypatch.setattr(checked_ops, "ALLOC_BYTES", 64 * 16)
    gen = traced._methods["forward"].codegen(True)
    gen.common = True
    function = compile_function(gen).function
    with torch.no_grad():
        assert fast(torch.randn(1, 2, 3, 4)).shape == (1, 6, 3, 4)
        with pytest.raises(Exception, match="bytes|limit|alloc"):
            function(torch.randn(2, 4, 4, 4))  # 384 elements: past the lowered limit


def _other_axis(x):
    b, h, s, d = x.shape
    return x[:, None].expand(b, 2, h, s, d).reshape(b * 2, h, s, d) * 1


def _sizes_elsewhere(x):
    return x[:, :, None, :, :].expand(1, 2, 2, 3, 4).reshape(1, 4, 3, 4) * 1


def _expanded_read_twice(x):
    b, h, s, d = x.shape
    y = x[:, :, None, :, :].expand(b, h, 2, s, d)
    return y.reshape(b, h * 2, s, d) * 1, y.sum()


@pytest.mark.parametrize("fn", [_other_axis, _sizes_elsewhere, _expanded_read_twice])
def test_other_repeats_keep_their_calls(fn, tmp_path):
    traced = tracebridge.trace(fn, (torch.randn(1, 2, 3, 4),), check_trace=False)
    assert ONE not in no_grad_code(traced)
    fast = loaded(traced, tmp_path)
    with torch.no_grad():
        x = torch.randn(1, 2, 3, 4)
        got, expected = fast(x), fn(x)
        assert same_outputs(got, expected)


def test_subclasses_see_the_three_calls(tmp_path):
    Sub = recording_subclass()

    fast = loaded(tracebridge.trace(repeat_kv, (torch.randn(1, 2, 3, 4),)), tmp_path)
    x = torch.randn(1, 2, 3, 4)
    with torch.no_grad():
        got = fast(x.as_subclass(Sub))
    assert "expand" in Sub.calls and "repeat_interleave" not in Sub.calls
    assert same_bits(got.as_subclass(torch.Tensor), repeat_kv(x))
