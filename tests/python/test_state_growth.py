"""A module whose calls grow state for the longest input seen (Hugging Face's dynamic-NTK
rotary embedding) is refused where a later call would read what a longer call left; a
cache whose values do not depend on its length traces (check/state_growth.py)."""

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import TracingCheckError


class Rebuilt(nn.Module):
    """The table for the longest length seen, rebuilt when a longer one comes."""

    def __init__(self):
        super().__init__()
        self.register_buffer("freq", torch.ones(3), persistent=False)
        self.cached = 4

    def forward(self, x):
        n = x.shape[0]
        if n > self.cached:
            self.register_buffer("freq", torch.ones(3) * n, persistent=False)
            self.cached = n
        return x * self.freq


class LongestFromTheTable(nn.Module):
    """The same with the length read from the table's own shape."""

    def __init__(self):
        super().__init__()
        self.register_buffer("cos", torch.arange(4.0)[:, None].expand(4, 3).clone())

    def forward(self, x):
        n = x.shape[0]
        if n > self.cos.shape[0]:
            rows = torch.arange(float(n) * 2)[:, None].expand(n * 2, 3) / n
            self.register_buffer("cos", rows.clone(), persistent=False)
        return x * self.cos[:n]


@pytest.mark.parametrize("make", [Rebuilt, LongestFromTheTable])
def test_state_grown_for_the_longest_input_is_refused(make):
    with pytest.raises(TracingCheckError) as info:
        tracebridge.trace(make(), torch.ones(6, 3))
    message = str(info.value)
    assert "after a longer call" in message and "grows with the inputs" in message
    assert ("cached" if make is Rebuilt else "cos") in message


class SlicedTable(nn.Module):
    """Older Hugging Face rotary caches: grown for a longer input, but each row is the
    same whatever the table's length, so every call gives eager's answer."""

    def __init__(self):
        super().__init__()
        self.longest = 4
        self._build(4)

    def _build(self, n: int) -> None:
        rows = torch.cos(torch.arange(n, dtype=torch.float32))[:, None].expand(n, 3)
        self.register_buffer("cos", rows.clone(), persistent=False)

    def forward(self, x):
        n = x.shape[0]
        if n > self.longest:
            self.longest = n
            self._build(n)
        return x * self.cos[:n]


def test_a_grown_cache_whose_rows_do_not_change_traces_and_stays_right():
    traced = tracebridge.trace(SlicedTable(), torch.ones(6, 3))
    eager = SlicedTable()
    for n in (6, 9, 6, 12, 7):
        x = torch.rand(n, 3)
        torch.testing.assert_close(traced(x), eager(x))
