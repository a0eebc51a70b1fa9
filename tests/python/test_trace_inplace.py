"""In-place arithmetic into a tensor nothing else can see is recorded out of place
(trace/inplace.py), so that what only sizes decide stays memoisable; a write that another
value could see, or whose dtype could differ, stays in place. Every graph computes what
eager code computes on other shapes."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import tracebridge

from .graph_helpers import loaded, ops_of


class RelativeBias(nn.Module):
    """T5's relative position bias (transformers' modeling_t5.py): bucket ids built with
    ``relative_buckets += ...`` from sizes only, then an embedding of them."""

    def __init__(self, buckets: int = 16, distance: int = 32, heads: int = 2):
        super().__init__()
        self.buckets, self.distance = buckets, distance
        self.bias = nn.Embedding(buckets, heads)

    def bucket(self, relative_position):
        relative_buckets = 0
        num_buckets = self.buckets // 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
        max_exact = num_buckets // 2
        is_small = relative_position < max_exact
        large = max_exact + (
            torch.log(relative_position.float() / max_exact)
            / math.log(self.distance / max_exact)
            * (num_buckets - max_exact)
        ).to(torch.long)
        large = torch.min(large, torch.full_like(large, num_buckets - 1))
        relative_buckets += torch.where(is_small, relative_position, large)
        return relative_buckets

    def forward(self, scores):
        q, k = scores.shape[-2], scores.shape[-1]
        context = torch.arange(q, dtype=torch.long, device=scores.device)[:, None]
        memory = torch.arange(k, dtype=torch.long, device=scores.device)[None, :]
        values = self.bias(self.bucket(memory - context))  # (q, k, heads)
        return scores + values.permute([2, 0, 1]).unsqueeze(0)


def test_t5_relative_buckets_are_recorded_out_of_place_and_memoised(tmp_path):
    torch.manual_seed(0)
    model = RelativeBias()
    traced = tracebridge.trace(model, torch.randn(1, 2, 5, 5))
    ops = ops_of(traced)
    assert "Tensor.add_" not in ops and "Tensor.expand_as" in ops
    run = loaded(traced, tmp_path)
    assert "memoised by size" in run.code  # the whole bias is kept per size now
    for shape in [(2, 2, 3, 7), (1, 2, 12, 12), (1, 2, 1, 1), (1, 2, 5, 5)]:
        x = torch.randn(*shape)
        torch.testing.assert_close(run(x), model(x), rtol=0, atol=0)


def written_through_a_view(x):
    n = x.shape[0]
    buckets = torch.arange(n) * 2
    head = buckets[:2]  # a view of buckets: it must see the write
    buckets += torch.arange(n)
    return x + head.float().sum(), buckets


def test_a_tensor_with_a_view_is_written_in_place(tmp_path):
    traced = tracebridge.trace(written_through_a_view, torch.randn(4))
    assert "Tensor.add_" in ops_of(traced)
    run = loaded(traced, tmp_path)
    x = torch.randn(6)
    for got, want in zip(run(x), written_through_a_view(x)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def written_with_another_dtype(x):
    n = x.shape[0]
    acc = torch.arange(n, dtype=torch.float64) * 1
    acc += torch.arange(n, dtype=torch.float32)  # add_ keeps float64; so does add, but
    return acc  # the dtypes differ, so this stays a write (no proof needed)


def written_from_data(x):
    d = x.dtype
    acc = torch.zeros(x.shape, dtype=d) + 1
    acc += x  # x is an input: its data varies per call, so nothing is memoised here
    return acc


def test_writes_that_are_not_proven_the_same_stay_in_place(tmp_path):
    for fn, x in [
        (written_with_another_dtype, torch.randn(3)),
        (written_from_data, torch.randn(3)),
    ]:
        traced = tracebridge.trace(fn, x)
        assert "Tensor.add_" in ops_of(traced), fn.__name__
        run = loaded(traced, tmp_path)
        y = torch.randn(5)
        got, want = run(y), fn(y)
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def scaled_rows(x):
    # A fresh size-only tensor, then a smaller one added with alpha: the sum broadcasts
    # into the written tensor's shape, as add_ requires.
    n, m = x.shape
    grid = torch.arange(n * m, dtype=torch.float32).reshape(n, m) * 0.5
    grid.sub_(torch.arange(m, dtype=torch.float32), alpha=2)
    grid *= 3
    return x * grid


def test_subtract_with_alpha_and_multiply_by_a_number_are_recorded_out_of_place(tmp_path):
    traced = tracebridge.trace(scaled_rows, torch.randn(2, 3))
    ops = ops_of(traced)
    assert not {"Tensor.sub_", "Tensor.mul_"} & set(ops)
    run = loaded(traced, tmp_path)
    for shape in [(4, 5), (1, 1), (3, 2)]:
        x = torch.randn(*shape)
        torch.testing.assert_close(run(x), scaled_rows(x), rtol=0, atol=0)


def broadcasts_out_of_its_shape(x):
    n = x.shape[0]
    column = torch.arange(n).reshape(n, 1) * 1
    column += torch.arange(n)  # add_ cannot grow (n, 1) to (n, n): eager raises
    return column


def test_a_write_that_eager_refuses_raises_eagers_error_when_traced():
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        broadcasts_out_of_its_shape(torch.randn(3))
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        tracebridge.trace(broadcasts_out_of_its_shape, torch.randn(3))
