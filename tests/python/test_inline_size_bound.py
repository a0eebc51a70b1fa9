"""A factory whose sizes are traced ints is bounded inline by the generated code
(``CodeGen.unless_large``): the kernel runs where the sizes' product is within the
allocation limit at the widest element, the checked call otherwise, which refuses what
it refused before. Both give eager's tensors on every shape."""

from __future__ import annotations

import pytest
import torch

import tracebridge
from tracebridge.runtime import checked_ops

from .graph_helpers import loaded, same_bits

LIMIT = f"<= {checked_ops.ALLOC_BYTES}"


# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


def masks(x):
    b, n = x.shape[0], x.shape[1]
    return (
        x.new_ones(b, 1, n),
        x.new_zeros((b, n * 2)),
        torch.zeros(b, n, dtype=torch.int64),
        torch.full((n, b), 2.5),
        x.new_full([b, 3], 7.0),
        torch.ones(b * n) + x.sum(),
    )


def test_factories_of_traced_sizes_give_eagers_tensors(tmp_path):
    traced = tracebridge.trace(masks, (torch.randn(2, 3),), check_trace=False)
    assert traced.code.count(LIMIT) == 6
    fast = loaded(traced, tmp_path)
    plain = tracebridge.load(tmp_path / "m.tb", runtime="interpreter")
    for x in (torch.randn(2, 3), torch.randn(5, 1), torch.randn(1, 0), torch.randn(4, 7).double()):
        expected = masks(x)
        for got in (fast(x), plain(x)):
            assert all(same_bits(a, b) for a, b in zip(got, expected, strict=True))


def test_a_factory_past_the_limit_is_refused_as_before(tmp_path):
    def huge(x):
        return x.new_zeros(x.shape[0] * 2**20, x.shape[1] * 2**20)

    traced = tracebridge.trace(huge, (torch.randn(0, 0),), check_trace=False)
    assert LIMIT in traced.code
    fast = loaded(traced, tmp_path)
    assert fast(torch.randn(0, 3)).shape == (0, 3 * 2**20)
    with pytest.raises(tracebridge.OpError, match="would allocate .* more than the limit"):
        fast(torch.randn(2, 3))


def test_a_size_that_is_no_int_keeps_the_checked_call(tmp_path):
    def from_tensor(x):
        n = torch.tensor(x.shape[0]) + 1  # a 0-dim tensor used as a size
        return x.new_zeros((n, 2))

    traced = tracebridge.trace(from_tensor, (torch.randn(2, 3),), check_trace=False)
    assert LIMIT not in traced.code
    fast = loaded(traced, tmp_path)
    assert same_bits(fast(torch.randn(4, 3)), from_tensor(torch.randn(4, 3)))


@pytest.mark.parametrize(
    "sizes",
    [
        (2, 3),
        [torch.tensor(4), 1, torch.tensor(2, dtype=torch.int32)],
        (torch.tensor(-3), 5),
        (torch.tensor(2.0), 3),  # a float tensor is no size
        (True, 2),
        ((2, 3), 4),
        torch.Size([3, 4]),
        (torch.tensor([2, 3]), 1),
        torch.tensor(7),
        3.5,
    ],
)
def test_sizes_read_by_the_guard_are_those_of_the_full_reading(sizes):
    assert checked_ops._flat_ints(sizes) == checked_ops._ints_in(sizes)


def test_tensor_sizes_past_the_limit_are_refused():
    guard = checked_ops.sized_guard("Tensor.new_zeros", torch.Tensor.new_zeros, [1], ["size"], 1)
    x = torch.zeros(1)
    assert guard(x, (torch.tensor(2), 3)).shape == (2, 3)
    with pytest.raises(checked_ops.CheckFailed, match="would allocate"):
        guard(x, (torch.tensor(2**20), torch.tensor(2**20)))


def routing(x, perm):
    # a mixture of experts' routing (transformers' integrations/moe.py): the inverse of a
    # permutation, written from arange(n); so are a range of ints from 1 and one of floats
    n = perm.shape[0]
    inv, positions, halves = torch.zeros_like(perm), torch.zeros_like(perm), torch.zeros(n)
    inv[perm] = torch.arange(n, device=x.device)
    positions[perm] = torch.arange(1, n + 1)
    halves[perm] = torch.arange(0.5, n + 0.5)
    return (x[perm] * 2.0)[inv] + positions[:, None] + halves[:, None]


def test_ranges_of_traced_ints_give_eagers_tensors(tmp_path):
    """``arange(n)`` and ``arange(a, b)`` of ints are bounded inline; a float end keeps
    the checked call; both runtimes give eager's tensors, an empty range included."""
    x, perm = torch.randn(5, 3), torch.tensor([3, 0, 4, 1, 2])
    traced = tracebridge.trace(routing, (x, perm), check_trace=False)
    lines = [line for line in traced.code.splitlines() if "# arange" in line]
    assert len(lines) == 3 and sum(LIMIT in line for line in lines) == 2, lines
    fast = loaded(traced, tmp_path)
    plain = tracebridge.load(tmp_path / "m.tb", runtime="interpreter")
    for n in (5, 1, 0, 9):
        x, perm = torch.randn(n, 3), torch.randperm(n)
        for got in (fast(x, perm), plain(x, perm)):
            assert same_bits(got, routing(x, perm))


def test_a_range_past_the_limit_is_refused_as_before(tmp_path):
    def long_range(x):
        return torch.arange(x.shape[0] * 2**27)

    traced = tracebridge.trace(long_range, (torch.randn(0, 3),), check_trace=False)
    assert LIMIT in traced.code
    fast = loaded(traced, tmp_path)
    assert fast(torch.randn(0, 3)).shape == (0,)
    with pytest.raises(tracebridge.OpError, match="would allocate .* more than the limit"):
        fast(torch.randn(2, 3))


def test_a_range_end_read_from_a_tensor_is_tested_to_be_an_int(tmp_path):
    def counted(x, k):
        return x.sum() + torch.arange(k.item())

    k = torch.tensor(4)
    traced = tracebridge.trace(counted, (torch.randn(2), k), check_trace=False)
    line = next(line for line in traced.code.splitlines() if "# arange" in line)
    assert LIMIT in line and "_type(" in line and "is _int" in line, line
    fast = loaded(traced, tmp_path)
    x = torch.randn(2)
    for n in (4, 0, 7):
        assert same_bits(fast(x, torch.tensor(n)), counted(x, torch.tensor(n)))


def spread(x, y):
    b, n = y.shape[0], y.shape[1]
    return (
        x.expand(b, n),
        x.expand((b, 2, n)),
        x[None].expand([b * 3, -1, n]),
        x.expand(n, -1) + 1,
    )


def test_expands_of_traced_sizes_give_eagers_tensors(tmp_path):
    # Tensor.expand bounded inline (CodeGen.unless_large_view): the kernel where the input
    # is plain and the sizes are ints >= 0 within the limit, the guard otherwise
    x, y = torch.randn(1, 1), torch.randn(2, 3)
    traced = tracebridge.trace(spread, (x, y), check_trace=False)
    assert traced.code.count(LIMIT) == 4
    fast = loaded(traced, tmp_path)
    plain = tracebridge.load(tmp_path / "m.tb", runtime="interpreter")
    for a, b in ((x, y), (torch.randn(1, 1), torch.randn(5, 1)), (x.double(), torch.randn(0, 4))):
        expected = spread(a, b)
        for got in (fast(a, b), plain(a, b)):
            assert all(same_bits(g, e) for g, e in zip(got, expected, strict=True))
            assert all(g.stride() == e.stride() for g, e in zip(got, expected, strict=True))


def test_an_expand_past_the_limit_or_of_a_negative_size_is_refused_as_before(tmp_path):
    def wide(x, y):
        return x.expand(y.shape[0] * 2**16, y.shape[1] * 2**16 - 2)

    x = torch.randn(1, 1)
    traced = tracebridge.trace(wide, (x, torch.randn(0, 1)), check_trace=False)
    assert LIMIT in traced.code
    fast = loaded(traced, tmp_path)
    assert fast(x, torch.randn(0, 2)).shape == (0, 2**17 - 2)
    with pytest.raises(tracebridge.OpError, match="more than the limit"):
        fast(x, torch.randn(1, 1))  # 2**16 x (2**16 - 2) floats: 16 GiB
    with pytest.raises(tracebridge.OpError, match="size -2 is negative"):
        fast(x, torch.randn(0, 0))  # -2 passes no inline test: the guard refuses it


def test_a_subclass_input_of_an_expand_takes_the_guard(tmp_path, monkeypatch):
    class Sub(torch.Tensor):
        pass

    traced = tracebridge.trace(spread, (torch.randn(1, 1), torch.randn(2, 3)), check_trace=False)
    fast = loaded(traced, tmp_path)
    calls = []
    real = checked_ops._flat_ints

    def counted(value):
        calls.append(value)
        return real(value)

    monkeypatch.setattr(checked_ops, "_flat_ints", counted)
    x, y = torch.randn(1, 1), torch.randn(3, 2)
    fast(x, y)
    assert calls == []  # plain: inline, no guard
    got = fast(x.as_subclass(Sub), y)
    assert calls  # the guard read the sizes
    expected = spread(x, y)
    assert all(same_bits(g.as_subclass(torch.Tensor), e) for g, e in zip(got, expected))
