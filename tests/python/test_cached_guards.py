"""Guards whose outcome is decided by a cache key are checked with the cached values.

A guard on values that only state decides (a weight's dtype, a sum of a weight) is checked
in the folded function (runtime/folding.py), again whenever the state changes; a guard on
values that only sizes decide (the shapes of ``zeros(2, batch, 16)``) is checked in the
memoised block (runtime/memo.py), once per key. Either way a call that breaks it is
refused every time, with the error the interpreter (which caches nothing) gives.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import GuardError

sys.path.insert(0, str(Path(__file__).parent))
from models import CASES  # noqa: E402

# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


def _both(model, example, tmp_path):
    """The loaded codegen and interpreter forms of ``model`` traced on ``example``."""
    path = tmp_path / "m.tb"
    tracebridge.save(tracebridge.trace(model, example), path)
    return tracebridge.load(path), tracebridge.load(path, runtime="interpreter")


def _refusal(fn, *args) -> str:
    with pytest.raises(GuardError) as info:
        fn(*args)
    return str(info.value)


def _runners(loaded, kind: str, guards: bool = True) -> list:
    """The folded or memo runners the generated function of ``loaded`` calls."""
    method = loaded._methods["forward"]
    function = method._function((guards, not torch.is_grad_enabled()))
    bound = {**function.__globals__, **(function.__kwdefaults__ or {})}
    return [v for v in bound.values() if repr(v).startswith(kind)]


def test_the_lstm_checks_its_memoised_states_once_per_key(tmp_path):
    case = CASES["lstm"]()
    loaded, interpreted = _both(case.model, case.example_inputs, tmp_path)
    code = loaded.code
    assert "shape[0] == 2" not in code and "!= 8" not in code  # in the memoised block
    (memo,) = _runners(loaded, "memo(")
    assert memo.guards == 7
    for batch, length in ((1, 6), (3, 4), (1, 6)):
        x = torch.randn(batch, length, 8)
        assert all(torch.equal(a, b) for a, b in zip(loaded(x), interpreted(x)))
    wide = torch.randn(1, 6, 9)  # breaks the memoised guard x.shape[2] != 8
    want = _refusal(interpreted, wide)
    assert "x.shape[2] != 8" in want
    assert _refusal(loaded, wide) == want
    assert _refusal(loaded, wide) == want  # a refused key is never kept
    x = torch.randn(1, 6, 8)  # and the key that was refused did not spoil the others
    assert all(torch.equal(a, b) for a, b in zip(loaded(x), interpreted(x)))


class SizedThenData(nn.Module):
    """A memoised guard, a guard on data, then another guard on the memoised values."""

    def forward(self, x):
        n = x.shape[0]
        grid = torch.arange(n)[:, None] + torch.arange(n)[None, :]
        if grid.shape[0] > 1:
            x = x + 1
        if bool(x.sum() > 1e6):
            x = x - 1
        if grid.shape[1] < 100:
            x = x * 2
        return x + grid.float().sum()


@pytest.mark.parametrize(
    "rows, scale",
    [(3, 1.0), (5, 1.0), (1, 1.0), (1, 1e9), (150, 1e9), (150, 1.0)],
)
def test_guards_are_checked_in_the_traced_order(tmp_path, rows, scale):
    """A guard kept in a memoised block runs where it stood: where a call breaks two
    guards, it is refused by the first one, as the interpreter refuses it."""
    loaded, interpreted = _both(SizedThenData(), (torch.rand(3, 2),), tmp_path)
    assert "memoised by size" in loaded.code
    x = torch.rand(rows, 2) * scale
    try:
        want = interpreted(x)
    except GuardError as exc:
        assert _refusal(loaded, x) == str(exc)
    else:
        assert torch.equal(loaded(x), want)


class KeyAfterGuard(nn.Module):
    """Sized work after a memoised guard that reads a size read only after the guard."""

    def forward(self, x):
        grid = torch.arange(x.shape[0])[:, None] * torch.arange(x.shape[0])[None, :]
        if grid.shape[0] > 1:
            x = x + 1
        width = x.shape[1]
        cols = torch.arange(width) * grid.shape[1]
        return x + cols + grid.sum()


def test_sized_work_that_reads_a_later_size_is_memoised_apart(tmp_path):
    loaded, interpreted = _both(KeyAfterGuard(), (torch.rand(3, 2),), tmp_path)
    assert loaded.code.count("memoised by size") == 2
    for rows, cols in ((3, 2), (4, 5), (4, 5), (1, 3)):
        x = torch.rand(rows, cols)
        assert torch.equal(loaded(x), interpreted(x))


class StateDecides(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.rand(4, 4) + 0.5)

    def forward(self, x):
        wt = self.w.t().contiguous()
        if self.w.shape[0] == 4 and self.w.dtype == torch.float32:
            x = x + 1
        if bool(self.w.abs().sum() > 0):
            x = x * 2
        return x @ wt


def test_guards_on_state_are_checked_in_the_folded_function(tmp_path):
    loaded, interpreted = _both(StateDecides(), (torch.rand(2, 4),), tmp_path)
    code = loaded.code
    assert "_raise_guard" not in code and "folded" in code
    x = torch.rand(3, 4)
    with torch.no_grad():
        assert torch.equal(loaded(x), interpreted(x))
        (folded,) = _runners(loaded, "folded(")
        assert folded.guards == 3
        both = (loaded.w, interpreted.w)

        for w in both:
            w.zero_()  # in place: a new version, and the sum guard breaks
        want = _refusal(interpreted, x)
        assert "sum" in want
        assert _refusal(loaded, x) == want
        assert _refusal(loaded, x) == want  # refused every time
        for w in both:
            w.fill_(1.0)
        assert torch.equal(loaded(x), interpreted(x))

        new = torch.rand(5, 4)
        for w in both:
            w.data = new  # same object and version: another shape
        want = _refusal(interpreted, torch.rand(3, 5))
        assert "shape[0] == 4" in want
        assert _refusal(loaded, torch.rand(3, 5)) == want

        new = torch.rand(4, 4, dtype=torch.float64)
        for w in both:
            w.data = new
        x64 = x.double()
        want = _refusal(interpreted, x64)
        assert "dtype" in want
        assert _refusal(loaded, x64) == want
        with tracebridge.guards_disabled():  # guards off: the folded code checks none
            assert torch.allclose(loaded(x64), (x64 + 1) * 2 @ new.t())


class OnlyAGuard(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(3))

    def forward(self, x):
        if bool(self.w.sum() > 0):
            return x + 1
        return x - 1


def test_a_fold_that_only_guards_is_called_for_its_guards(tmp_path):
    loaded, interpreted = _both(OnlyAGuard(), (torch.rand(2),), tmp_path)
    assert "folded guards" in loaded.code
    with torch.no_grad():
        assert torch.equal(loaded(torch.zeros(2)), torch.ones(2))
        loaded.w.neg_()
        interpreted.w.neg_()
        assert _refusal(loaded, torch.zeros(2)) == _refusal(interpreted, torch.zeros(2))


def test_with_guards_off_a_fold_of_guards_only_is_not_called(tmp_path):
    loaded, _ = _both(OnlyAGuard(), (torch.rand(2),), tmp_path)
    with torch.no_grad():
        assert len(_runners(loaded, "folded(")) == 1
        assert not _runners(loaded, "folded(", guards=False)
        loaded.w.neg_()
        with tracebridge.guards_disabled():
            assert torch.equal(loaded(torch.zeros(2)), torch.ones(2))


class ReadsAScale(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.tensor(3.0))

    def forward(self, x):
        return x * self.scale.item()


def test_a_value_read_from_state_data_is_still_folded(tmp_path):
    """``item`` waits for the data (on an accelerator, for the device): folded."""
    loaded, _ = _both(ReadsAScale(), (torch.rand(2),), tmp_path)
    assert "folded" in loaded.code and ".item()" not in loaded.code
    with torch.no_grad():
        assert torch.equal(loaded(torch.ones(2)), torch.full((2,), 3.0))
        loaded.scale.fill_(5.0)
        assert torch.equal(loaded(torch.ones(2)), torch.full((2,), 5.0))


def test_a_lone_attribute_read_of_state_is_not_folded(tmp_path):
    """``weight.dtype`` read inline costs a tenth of a folded call: it is not folded."""
    case = CASES["gru"]()
    loaded, _ = _both(case.model, case.example_inputs, tmp_path)
    assert "folded" not in loaded.code
    assert ".dtype" in loaded.code
