"""Values a loaded program keeps from its state (folds, memos keyed on state) follow every
write torch records, and ``tracebridge.invalidate_caches()`` covers the one it does not: an
in-place write through ``.data``, whose version counter is its own."""

from __future__ import annotations

import os

import pytest
import torch
from torch import nn

import tracebridge


class Scaled(nn.Module):
    """``weight * 2 + 1`` depends on state alone: the runtime folds it."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(3))

    def forward(self, x):
        return x * (self.weight * 2 + 1)


@pytest.fixture(params=["traced", "loaded"])
def pair(request, tmp_path):
    model = Scaled().eval()
    traced = tracebridge.trace(model, torch.ones(3))
    if request.param == "loaded":
        path = os.path.join(tmp_path, "scaled.tb")
        traced.save(path)
        traced = tracebridge.load(path)
    return model if request.param == "traced" else traced, traced


def _same(traced, owner, x=None):
    x = torch.arange(3.0) if x is None else x
    with torch.no_grad():
        want = x * (owner.weight * 2 + 1)
        torch.testing.assert_close(traced(x), want, rtol=0, atol=0)


def test_recorded_writes_are_seen_without_asking(pair):
    owner, traced = pair
    _same(traced, owner)
    with torch.no_grad():
        owner.weight.copy_(torch.full((3,), 5.0))  # a version moves
    _same(traced, owner)
    owner.weight.data = torch.full((3,), 7.0)  # the data pointer moves
    _same(traced, owner)
    owner.load_state_dict({"weight": torch.zeros(3)})
    _same(traced, owner)


def test_a_write_through_data_needs_invalidate_caches(pair):
    owner, traced = pair
    _same(traced, owner)  # the fold is cached now
    version = owner.weight._version
    with torch.no_grad():
        owner.weight.data.copy_(torch.full((3,), 4.0))
    assert owner.weight._version == version  # torch recorded nothing
    tracebridge.invalidate_caches()
    _same(traced, owner)
    with torch.no_grad():
        owner.weight.data.mul_(2)
    tracebridge.invalidate_caches()
    _same(traced, owner)


class Table(nn.Module):
    """``table[:n] * 2`` depends on state and a size: a memo keyed on both."""

    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.arange(8.0))

    def forward(self, x):
        return x + self.table[: x.shape[0]] * 2


def test_memos_keyed_on_state_follow_invalidate_caches():
    model = Table().eval()
    traced = tracebridge.trace(model, torch.zeros(3))
    with torch.no_grad():
        for n in (3, 5, 3):
            x = torch.zeros(n)
            torch.testing.assert_close(traced(x), model(x), rtol=0, atol=0)
        model.table.data.fill_(1.0)
        tracebridge.invalidate_caches()
        for n in (3, 5):
            x = torch.zeros(n)
            torch.testing.assert_close(traced(x), model(x), rtol=0, atol=0)
