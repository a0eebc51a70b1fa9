"""functools caches a trace goes through (trace/cache_values.py, prober19 F4 and F13): a
write in place into a tensor the cache holds is refused, naming the cached function and the
line (eager accumulates across calls, a trace would compute the value afresh); the cache is
left as the trace found it."""

from __future__ import annotations

import functools
import inspect

import numpy as np
import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import TraceError

pytestmark = pytest.mark.usefixtures("quiet_warnings")


@functools.cache
def table(n):
    return torch.zeros(n)


@functools.lru_cache(maxsize=8)
def bounded_table(n):
    return torch.zeros(n)


@functools.cache
def pair(n):
    return torch.zeros(n), torch.ones(n)


def _line(fn, text: str) -> str:
    lines, first = inspect.getsourcelines(fn)
    offset = next(i for i, line in enumerate(lines) if text in line)
    return f"{inspect.getsourcefile(fn)}:{first + offset}"


def accumulates(x):
    t = table(x.shape[0])
    t.add_(1)
    return x * t


def accumulates_bounded(x):
    t = bounded_table(x.shape[0])
    t.add_(1)
    return x * t


def accumulates_a_view(x):
    t = table(x.shape[0])
    t[:1] += 1
    return x * t


def accumulates_by_setitem(x):
    t = table(x.shape[0])
    t[0] = t[0] + 1
    return x * t


def accumulates_in_a_tuple(x):
    a, b = pair(x.shape[0])
    a.mul_(2).add_(b)
    return x * a


class CachedMethod(nn.Module):
    @functools.cache  # noqa: B019 - the pattern under test
    def table(self, n):
        return torch.zeros(n)

    def forward(self, x):
        t = self.table(x.shape[0])
        t.add_(1)
        return x * t


CASES = [
    (accumulates, "table", "t.add_(1)"),
    (accumulates_bounded, "bounded_table", "t.add_(1)"),
    (accumulates_a_view, "table", "t[:1] += 1"),
    (accumulates_by_setitem, "table", "t[0] = t[0] + 1"),
    (accumulates_in_a_tuple, "pair", "a.mul_(2)"),
    (CachedMethod(), "CachedMethod.table", "t.add_(1)"),
]


@pytest.mark.parametrize("fn, cached, write", CASES, ids=lambda c: getattr(c, "__name__", None))
@pytest.mark.parametrize("check_trace", [True, False])
def test_a_write_into_a_cached_tensor_is_refused_at_its_line(fn, cached, write, check_trace):
    for cache in (table, bounded_table, pair):
        cache.cache_clear()
    eager = [fn(torch.ones(2)).tolist() for _ in range(3)]
    assert eager[0] != eager[1]  # eager accumulates: 1, 2, 3 (or 1, 3, 7)
    for cache in (table, bounded_table, pair):
        cache.cache_clear()
    source = fn.forward if isinstance(fn, nn.Module) else fn
    with pytest.raises(TraceError, match=f"functools cache {cached} holds") as info:
        tracebridge.trace(fn, torch.ones(2), check_trace=check_trace)
    assert _line(source, write) in str(info.value)
    # the cache is as the trace found it: empty
    assert table.cache_info().currsize == bounded_table.cache_info().currsize == 0
    assert pair.cache_info().currsize == 0


@functools.cache
def filled(n):
    t = torch.zeros(n)
    t[0] = 1  # the function's own work on what it makes
    t.add_(2)
    return t


def reads_filled(x):
    t = filled(x.shape[0])
    u = table(x.shape[0]).clone()
    u.add_(1)  # a copy: eager leaves the cached tensor as it is
    return x * t + u


def test_writes_inside_the_cached_function_or_into_a_copy_trace():
    filled.cache_clear()
    table.cache_clear()
    traced = tracebridge.trace(reads_filled, torch.ones(2))
    for size in (2, 5, 2, 7):
        x = torch.randn(size)
        assert torch.equal(traced(x), reads_filled(x))


@functools.cache
def grid(n):
    return torch.arange(n).float()


@functools.lru_cache(maxsize=4)
def small_grid(n):
    return torch.arange(n).float()


class UsesGrids(nn.Module):
    def forward(self, x):
        n = x.shape[0]
        return x * grid(n) + small_grid(n)


@pytest.mark.parametrize(
    "options",
    [{}, {"check_trace": False}, {"check_inputs": [(torch.ones(5),), (torch.ones(7),)]}],
    ids=["default", "nocheck", "check_inputs"],
)
def test_a_cache_is_left_as_the_trace_found_it(options):
    grid.cache_clear()
    small_grid.cache_clear()
    kept = grid(3)  # an entry the user's eager call made
    traced = tracebridge.trace(UsesGrids(), torch.ones(3), **options)
    # the user's entry is kept, the same tensor; the recordings' and checks' are gone
    assert grid.cache_info().currsize == 1 and grid(3) is kept
    assert small_grid.cache_info().currsize == 0  # bounded: emptied as it was
    for size in (3, 6):
        x = torch.randn(size)
        assert torch.equal(traced(x), UsesGrids()(x))


@functools.cache
def offsets(n):
    return list(range(n))


@functools.cache
def counts(n):
    return np.zeros(n)


def appends_to_a_cached_list(x):
    o = offsets(x.shape[0])
    o.append(0)  # no recorded op shows it
    return x * float(len(o))


def adds_into_a_cached_array(x):
    a = counts(x.shape[0])
    a += 1
    return x * torch.from_numpy(a).float()


@functools.lru_cache(maxsize=4)
def bounded_offsets(n):
    return list(range(n))


def appends_to_a_bounded_cached_list(x):
    o = bounded_offsets(x.shape[0])
    o.append(0)
    return x * float(len(o))


@pytest.mark.parametrize(
    "fn", [appends_to_a_cached_list, appends_to_a_bounded_cached_list, adds_into_a_cached_array]
)
def test_a_cached_python_value_changed_by_the_caller_is_refused_by_the_check(fn):
    caches = (offsets, bounded_offsets, counts)
    for cache in caches:
        cache.cache_clear()
    eager = [fn(torch.ones(2)).tolist() for _ in range(2)]
    assert eager[0] != eager[1]
    for cache in caches:
        cache.cache_clear()
    named = r"functools cache\(s\) (offsets|bounded_offsets|counts)"
    with pytest.raises(tracebridge.TracingCheckError, match=named):
        tracebridge.trace(fn, torch.ones(2))
    assert all(cache.cache_info().currsize == 0 for cache in caches)


class MemoWrittenInPlace(nn.Module):
    """A dict memo whose value the code then writes in place (an accumulator by size)."""

    def __init__(self):
        super().__init__()
        self.memo = {}

    def forward(self, x):
        n = x.shape[0]
        if n not in self.memo:
            self.memo[n] = torch.zeros(n)
        t = self.memo[n]
        t.add_(1)
        return x * t


def test_a_memo_value_written_in_place_is_refused_by_the_check():
    model = MemoWrittenInPlace()
    eager = MemoWrittenInPlace()
    assert [eager(torch.ones(2)).tolist() for _ in range(2)] == [[1.0, 1.0], [2.0, 2.0]]
    with pytest.raises(tracebridge.TracingCheckError, match="finding what the first call stored"):
        tracebridge.trace(model, torch.ones(2))
    assert model.memo == {}


# prober19b F10: a functools cache keyed on text of sizes
@functools.cache
def mask_from_text(key):
    rows, columns = map(int, key.split("x"))
    return torch.ones(rows, columns).tril()


@functools.lru_cache(maxsize=4)
def bounded_mask_from_text(key):
    rows, columns = map(int, key.split("x"))
    return torch.ones(rows, columns).triu()


def masked_by_text(x):
    return x * mask_from_text(f"{x.shape[0]}x{x.shape[1]}")


def masked_by_a_local_key(x):
    key = f"{x.shape[0]}x{x.shape[1]}"
    return x * bounded_mask_from_text(key)


@pytest.mark.parametrize(
    ("fn", "cache"),
    [(masked_by_text, mask_from_text), (masked_by_a_local_key, bounded_mask_from_text)],
)
def test_a_cache_keyed_on_text_of_sizes_is_traced_with_guards(fn, cache):
    """The text's sizes are guarded (the key is plain text), and the check's second
    recording misses as the first did: it found the first one's entry and recorded a
    constant, refused as "the trace is not stable ... at node 4"."""
    cache.cache_clear()
    traced = tracebridge.trace(fn, torch.ones(3, 4))
    assert cache.cache_info().currsize == 0  # left as the trace found it
    x = torch.randn(3, 4)
    assert torch.equal(traced(x), fn(x))
    with pytest.raises(tracebridge.GuardError, match=r"x.shape\[1\] == 4"):
        traced(torch.ones(3, 6))
    assert "prim.state" not in traced.graph  # the mask is computed, not a kept constant
