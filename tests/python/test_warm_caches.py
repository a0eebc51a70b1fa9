"""A one-entry cache keyed on a length, warmed by an eager call before tracing (prober20a
F4): traced as the code fills it, so the trace serves every length, as eager does
(trace/warm_caches.py). The rotary embeddings of transformers' Wav2Vec2-Conformer and
Wav2Vec2-BERT keep their table this way.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import GuardError

pytestmark = pytest.mark.usefixtures("quiet_warnings")


class CachedRotary(nn.Module):
    """Wav2Vec2-Conformer's rotary embedding: ``==`` on the key, the table returned."""

    def __init__(self, dim=8):
        super().__init__()
        self.inv_freq = nn.Buffer(1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim)))
        self.cached_sequence_length = None
        self.cached_table = None

    def forward(self, hidden):
        sequence_length = hidden.shape[1]
        if sequence_length == self.cached_sequence_length and self.cached_table is not None:
            return self.cached_table
        self.cached_sequence_length = sequence_length
        t = torch.arange(sequence_length).type_as(self.inv_freq)
        freqs = torch.cat((t[:, None] * self.inv_freq,) * 2, dim=-1)
        self.cached_table = torch.stack([freqs.cos(), freqs.sin()])
        return self.cached_table


class RefreshedRotary(nn.Module):
    """``!=`` on the key, the table kept in two attributes."""

    def __init__(self, dim=8):
        super().__init__()
        self.inv_freq = nn.Buffer(1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim)))
        self._cached_len = 0
        self._cos = self._sin = None

    def forward(self, x):
        seq_len = x.shape[1]
        if seq_len != self._cached_len:
            freqs = torch.outer(torch.arange(seq_len, dtype=self.inv_freq.dtype), self.inv_freq)
            emb = torch.cat((freqs, freqs), dim=-1)
            self._cos, self._sin = emb.cos(), emb.sin()
            self._cached_len = seq_len
        return torch.stack([self._cos, self._sin])


class Net(nn.Module):
    def __init__(self, rotary):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.rot = rotary

    def forward(self, x):
        h = self.lin(x)
        table = self.rot(h)
        return h * table[0] + h.flip(-1) * table[1]


def _runners(model, example, tmp_path):
    traced = tracebridge.trace(model, example)
    tracebridge.save(traced, tmp_path / "m.tb")
    return traced, tracebridge.load(tmp_path / "m.tb")


@pytest.mark.parametrize("rotary", [CachedRotary, RefreshedRotary])
@pytest.mark.parametrize("warmed_at", [None, 5, 7])
def test_a_warm_length_cache_serves_every_length(tmp_path, rotary, warmed_at):
    model = Net(rotary())
    if warmed_at is not None:
        model(torch.randn(2, warmed_at, 8))
    runners = _runners(model, torch.randn(2, 5, 8), tmp_path)
    for length in (5, 7, 3, 5):
        x = torch.randn(2, length, 8)
        expected = model(x)
        for run in runners:
            torch.testing.assert_close(run(x), expected, rtol=1e-6, atol=1e-6)


def test_the_cache_is_left_as_it_was(tmp_path):
    model = Net(CachedRotary())
    model(torch.randn(2, 5, 8))
    table = model.rot.cached_table
    tracebridge.trace(model, torch.randn(2, 5, 8))
    assert model.rot.cached_sequence_length == 5
    assert model.rot.cached_table is table


class Setting(nn.Module):
    """A length compared with a setting of ``__init__`` is a decision, not a cache key."""

    def __init__(self):
        super().__init__()
        self.full_length = 5

    def forward(self, x):
        if x.shape[1] == self.full_length:
            return x * 2
        return x + 1


class Counter(nn.Module):
    """An attribute compared and assigned something else (a counter) is not a key."""

    def __init__(self):
        super().__init__()
        self.seen = 5

    def forward(self, x):
        if x.shape[1] == self.seen:
            out = x * 2
        else:
            out = x + 1
        self.seen = 5
        return out


@pytest.mark.parametrize("model", [Setting(), Counter()], ids=type)
def test_a_compared_setting_keeps_its_guard(tmp_path, model):
    traced, loaded = _runners(model, torch.randn(2, 5, 8), tmp_path)
    x = torch.randn(2, 5, 8)
    for run in (traced, loaded):
        torch.testing.assert_close(run(x), model(x))
        with pytest.raises(GuardError, match="shape\\[1\\] == 5"):
            run(torch.randn(2, 7, 8))
