"""Clear errors where a review of this session found unclear ones, and tracing on meta."""

from __future__ import annotations

import pytest
import torch

import tracebridge
from tracebridge import TraceError


def test_none_where_a_tensor_was_traced_names_the_input_and_what_to_do():
    traced = tracebridge.trace(
        lambda a, b=None: a if b is None else a + b, (torch.ones(2), torch.ones(2))
    )
    with pytest.raises(
        TraceError, match=r"input 1 \(b\) is None, but the trace was made with a tensor"
    ):
        traced(torch.ones(2), None)


_KEPT: list = []


def _keeps_a_size(x):
    if not _KEPT:
        _KEPT.append(x.shape[0] * 2)  # a size kept past the trace that made it
    return x * _KEPT[0]


def test_a_size_kept_from_another_trace_says_where_and_what_to_do():
    _KEPT.clear()
    tracebridge.trace(_keeps_a_size, (torch.ones(3),), check_trace=False)
    with pytest.raises(TraceError, match=r"another trace, .*shape\[0\] \* 2.* compute it from"):
        tracebridge.trace(_keeps_a_size, (torch.ones(4),), check_trace=False)
    _KEPT.clear()


def test_tracing_on_the_meta_device_checks_sizes_and_dtypes():
    traced = tracebridge.trace(lambda a: (a + 1).sum(0), (torch.randn(3, 4, device="meta"),))
    out = traced(torch.randn(5, 2, device="meta"))
    assert out.is_meta and out.shape == (2,)
    with torch.device("meta"):
        made_on_meta = tracebridge.trace(lambda a: a * 2, (torch.randn(3, 4),))
    x = torch.randn(2, 2)
    torch.testing.assert_close(made_on_meta(x), x * 2)
