"""Two slices that cut one dimension in two run as one ``split_with_sizes`` in calls
without autograd (runtime/halves.py): the same views and values as eager and the
interpreter on every shape (odd sizes, empty ones), the two slices wherever that could
differ (autograd, subclasses, other cuts, a write in between)."""

from __future__ import annotations

import pytest
import torch

import tracebridge

from .graph_helpers import loaded, no_grad_code, recording_subclass, same_view

# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


def rotate_half(x):
    """Llama's ``rotate_half``, with the halves also returned as they are."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1), x1, x2


def thirds_of_dim_one(x):
    """Full slices before the cut, the cut a third, the high part sliced first."""
    high = x[:, x.shape[1] // 3 :]
    low = x[:, : x.shape[1] // 3]
    return high * 2, low + 1, high, low


def _shapes(dim_sizes):
    for n in dim_sizes:
        yield torch.randn(2, 3, 4, n)
        yield torch.randn(2, n, 4, 3).transpose(1, 3)  # the cut dimension not contiguous


@pytest.mark.parametrize("fn", [rotate_half, thirds_of_dim_one])
def test_the_pair_runs_as_one_split_with_the_same_views(fn, tmp_path):
    torch.manual_seed(0)
    traced = tracebridge.trace(fn, (torch.randn(2, 3, 4, 8),), check_trace=False)
    assert no_grad_code(traced).count("op_split_with_sizes_") == 1
    assert "op_split_with_sizes_" not in traced.code  # the function with autograd
    fast = loaded(traced, tmp_path)
    plain = tracebridge.load(tmp_path / "m.tb", runtime="interpreter")
    with torch.no_grad():
        for x in _shapes([8, 7, 1, 0, 5]):
            for dtype in (torch.float32, torch.float64):
                x = x.to(dtype)
                expected = fn(x)
                for got in (fast(x), plain(x)):
                    assert all(same_view(a, b) for a, b in zip(got, expected, strict=True))
                x_grad = x.clone().requires_grad_()  # views of a tensor that needs gradients
                assert all(same_view(a, b) for a, b in zip(fast(x_grad), fn(x_grad), strict=True))


def test_calls_with_autograd_slice_and_get_eagers_gradients(tmp_path):
    """Two slices' gradients are summed into zeros (``-0.0 + 0.0`` is ``+0.0``), a split's
    are concatenated: a call with autograd keeps the slices."""
    fast = loaded(tracebridge.trace(rotate_half, (torch.randn(2, 8),)), tmp_path)
    x = torch.randn(2, 8)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    g = torch.tensor([[-0.0] * 8, [1.5] * 8])
    (a,) = torch.autograd.grad(fast(x1)[0], x1, g)
    (b,) = torch.autograd.grad(rotate_half(x2)[0], x2, g)
    assert torch.equal(a, b) and torch.equal(a.signbit(), b.signbit())


def _cut_elsewhere(x):
    return x[..., :2] + x[..., 2:4].sum(), x[..., : x.shape[0] // 2], x[..., x.shape[0] // 2 :]


def _written_between(x):
    y = x * 1
    low = y[..., : y.shape[-1] // 2]
    y.unsqueeze_(0)
    return low, y[..., y.shape[-1] // 2 :]


def _other_sizes(x):
    h = x.shape[-1] // 2
    return x[..., :h] + 1, x[..., 1:]


@pytest.mark.parametrize("fn", [_cut_elsewhere, _written_between, _other_sizes])
def test_other_pairs_keep_their_slices(fn, tmp_path):
    torch.manual_seed(1)
    traced = tracebridge.trace(fn, (torch.randn(4, 4),), check_trace=False)
    assert "op_split_with_sizes_" not in no_grad_code(traced)
    fast = loaded(traced, tmp_path)
    with torch.no_grad():
        x = torch.randn(4, 4)
        for a, b in zip(fast(x), fn(x), strict=True):
            assert same_view(a, b)


def test_subclasses_see_the_slices(tmp_path):
    Sub = recording_subclass()

    fast = loaded(tracebridge.trace(rotate_half, (torch.randn(2, 8),)), tmp_path)
    x = torch.randn(2, 8)
    with torch.no_grad():
        got = fast(x.as_subclass(Sub))
    assert Sub.calls.count("__getitem__") == 2 and "split_with_sizes" not in Sub.calls
    assert torch.equal(got[0].as_subclass(torch.Tensor), rotate_half(x)[0])
