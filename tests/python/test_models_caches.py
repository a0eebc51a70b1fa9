"""Caches in library code (issue 20, item 3): a traced size in a cache key is a miss.

transformers' detection transformers compute anchors through
``compile_compatible_method_lru_cache`` (an ``lru_cache`` called from a wrapper, as
``func_with_cache``); other code keeps a dict keyed on a shape tuple. Either used to guard
the sizes of the key, fixing the trace to the example's image size. The trace now records
the cached function's work, general in size, and leaves the caches without traced values.
A lookup that is not a cache's still guards.
"""

from __future__ import annotations

import functools
import os

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge import GuardError

HERE = os.path.basename(__file__)


# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


@functools.lru_cache(maxsize=8)
def grid(height, width):
    ys, xs = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")
    return torch.stack([ys, xs], -1).float().flatten(0, 1)


def compile_compatible_method_lru_cache(*lru_args, **lru_kwargs):
    """transformers.pytorch_utils' decorator: an lru_cache called from a wrapper."""

    def decorator(func):
        func_with_cache = functools.lru_cache(*lru_args, **lru_kwargs)(func)

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            return func_with_cache(*args, **kwargs)

        return wrapper

    return decorator


class Anchors(nn.Module):
    """Anchors for two feature levels from a cached method and a cached function."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Conv2d(3, 2, 1)

    @compile_compatible_method_lru_cache(maxsize=32)
    def generate_anchors(self, spatial_shapes):
        return torch.cat([grid(h, w) for h, w in spatial_shapes]) / 10

    def forward(self, x):
        h, w = x.shape[2], x.shape[3]
        anchors = self.generate_anchors(((h, w), (h // 2, w // 2)))
        feats = self.proj(x).flatten(2).transpose(1, 2)  # (B, h*w, 2)
        return feats.sum(1) + anchors.sum(0)


class ShapeDictCache(nn.Module):
    """A hand-written cache of position tables, keyed on a shape tuple."""

    def __init__(self):
        super().__init__()
        self._pos_cache = {}

    def positions(self, shape):
        key = tuple(shape)
        if key not in self._pos_cache:
            self._pos_cache[key] = torch.arange(shape[0] * shape[1]).float().view(shape)
        return self._pos_cache[key]

    def forward(self, x):
        return x + self.positions(x.shape[-2:])


@pytest.mark.parametrize("cls", [Anchors, ShapeDictCache])
def test_a_size_in_a_cache_key_keeps_the_trace_general(cls, tmp_path):
    torch.manual_seed(0)
    model = cls()
    x = torch.randn(2, 3, 4, 6)
    model(x)  # an eager call first: the cache holds an entry for the example's sizes
    traced = tracebridge.trace(model, x)
    assert not [g for g in traced.guards if "shape" in g and "results" not in g]
    path = tmp_path / "m.tb"
    traced.save(path)
    loaded = tracebridge.load(path)
    for h, w in [(4, 6), (8, 8), (6, 10)]:
        y = torch.randn(3, 3, h, w)
        assert torch.allclose(traced(y), model(y), atol=1e-5)
        assert torch.equal(loaded(y), traced(y))


def test_the_caches_hold_no_traced_value_afterwards():
    model = ShapeDictCache()
    x = torch.randn(2, 3, 4, 6)
    model(x)
    before = dict(model._pos_cache)
    tracebridge.trace(model, x)
    assert model._pos_cache == before and all(type(k[0]) is int for k in model._pos_cache)
    anchors = Anchors()
    anchors(x)
    assert grid.cache_info().currsize > 0
    tracebridge.trace(anchors, x, check_trace=False)  # check_trace's eager calls fill it
    assert grid.cache_info().currsize == 0  # emptied: its entries were made while tracing


class Table(nn.Module):
    """A dict lookup that decides: not a cache, so the size is guarded."""

    table = {4: 2.0, 6: 3.0}

    def forward(self, x):
        return x * self.table.get(x.shape[1], 1.0)


def test_a_lookup_that_is_not_a_cache_still_guards():
    model = Table()
    traced = tracebridge.trace(model, torch.randn(2, 4))
    x = torch.randn(3, 4)
    assert torch.equal(traced(x), model(x))
    with pytest.raises(GuardError) as info:
        traced(torch.randn(2, 6))
    assert HERE in str(info.value) and "self.table.get" in str(info.value)


class ParentPositions(nn.Module):
    @functools.lru_cache(maxsize=2)  # noqa: B019 - the pattern under test
    def pos(self, h, w):
        return torch.arange(h * w).float().view(h, w)


class ChildPositions(ParentPositions):
    """A cached method of the parent class, reached through ``super()``."""

    def forward(self, x):
        return x + super().pos(x.shape[-2], x.shape[-1])


class ThroughType(ParentPositions):
    def forward(self, x):
        return x + type(self).pos(self, x.shape[-2], x.shape[-1])


class ThroughClass(ParentPositions):
    def forward(self, x):
        return x + self.__class__.pos(self, x.shape[-2], x.shape[-1])


class ThroughGetattr(ParentPositions):
    def forward(self, x):
        return x + getattr(self, "pos")(x.shape[-2], x.shape[-1])  # noqa: B009


def made_for_the_call(x):
    """A functools cache made inline, for this one call: it misses every time."""
    return x + functools.lru_cache()(lambda n: torch.arange(n).float())(x.shape[-1])


@pytest.mark.parametrize("warm", [False, True])
@pytest.mark.parametrize("kind", ["super", "type", "class", "getattr", "inline"])
def test_a_cache_found_through_super_or_made_inline_keeps_the_trace_general(kind, warm):
    ParentPositions.pos.cache_clear()
    models = {"super": ChildPositions, "type": ThroughType, "class": ThroughClass}
    models["getattr"] = ThroughGetattr
    model = models[kind]() if kind in models else made_for_the_call
    x = torch.randn(3, 4)
    if warm:
        model(x)  # the cache holds the example's entry: a hit would hand out eager's tensor
    traced = tracebridge.trace(model, x)
    assert traced.guards == []
    for h, w in [(3, 4), (5, 6), (1, 2)]:
        y = torch.randn(h, w)
        torch.testing.assert_close(traced(y), model(y))
    ParentPositions.pos.cache_clear()
    tracebridge.trace(model, x, check_trace=False)
    assert ParentPositions.pos.cache_info().currsize == 0  # its traced entries are gone


@functools.cache
def _noise_by_length(n):
    return torch.randn(n, 1)


def _noised(x):
    return x * _noise_by_length(x.shape[0])


def test_a_random_draw_inside_a_functools_cache_is_refused_at_its_line():
    with pytest.raises(tracebridge.TraceError, match="draws inside _noise_by_length"):
        tracebridge.trace(_noised, torch.ones(2, 3))
    _noise_by_length.cache_clear()
