"""A ``collections.defaultdict`` read with a traced size (prober19 F8): a memo of its
factory's value (``__missing__`` stores it, as ``if k not in d: d[k] = factory()`` does),
traced through, general in size; entries put there by hand decide (guarded, or refused at
the example's key); a count kept in one is guarded or refused. The dict is left as it
was, with no traced key in it (trace/caches.py ``_default_memo``)."""

from __future__ import annotations

import collections

import pytest
import torch
from torch import nn

import tracebridge

pytestmark = pytest.mark.usefixtures("quiet_warnings")


def _one():
    return torch.ones(()) * 1.5


class Table(nn.Module):
    def __init__(self, filled=None):
        super().__init__()
        self.table = collections.defaultdict(_one, filled or {})

    def forward(self, x):
        return x * self.table[x.shape[0]]


def _keys(model):
    return [(type(k), k) for k in model.table]


@pytest.mark.parametrize("check_trace", [True, False])
def test_a_defaultdict_memo_is_traced_through(check_trace):
    model = Table()
    traced = tracebridge.trace(model, torch.ones(2), check_trace=check_trace)
    assert _keys(model) == []  # no traced key left, nothing added
    assert not traced.guards
    eager = Table()
    for size in (2, 5, 12, 5, 2):
        x = torch.randn(size)
        assert torch.equal(traced(x), eager(x))


def test_entries_put_there_by_hand_decide():
    model = Table({12: torch.tensor(5.0)})
    traced = tracebridge.trace(model, torch.ones(2))
    assert _keys(model) == [(int, 12)]
    eager = Table({12: torch.tensor(5.0)})
    for size in (2, 5, 3):
        x = torch.randn(size)
        assert torch.equal(traced(x), eager(x))
    with pytest.raises(tracebridge.GuardError):
        traced(torch.ones(12))  # eager: the entry put by hand (5.0)


def test_an_entry_by_hand_at_the_examples_key_is_refused():
    model = Table({2: torch.tensor(5.0)})
    with pytest.raises(tracebridge.TraceError, match="memo self.table held"):
        tracebridge.trace(model, torch.ones(2))
    assert _keys(model) == [(int, 2)] and model.table[2].item() == 5.0


class CountBySize(nn.Module):
    def __init__(self):
        super().__init__()
        self.counts = collections.defaultdict(int)

    def forward(self, x):
        self.counts[x.shape[0]] += 1
        return x * self.counts[x.shape[0]]


class HistoryBySize(nn.Module):
    def __init__(self):
        super().__init__()
        self.seen = collections.defaultdict(list)

    def forward(self, x):
        self.seen[x.shape[0]].append(1)
        return x * len(self.seen[x.shape[0]])


@pytest.mark.parametrize("cls, name", [(CountBySize, "counts"), (HistoryBySize, "seen")])
def test_a_count_kept_in_a_defaultdict_is_refused(cls, name):
    """Eager gives 1, 2, 3...: the repeated-call check refuses, naming the attribute (the
    history's second call finds the list the first stored)."""
    model = cls()
    with pytest.raises(tracebridge.TracingCheckError, match=f"of the module \\({name}\\)"):
        tracebridge.trace(model, torch.ones(2))
    assert dict(getattr(model, name)) == {}
