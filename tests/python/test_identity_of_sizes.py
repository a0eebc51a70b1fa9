"""``is`` / ``is not`` between a traced size and a small int (prober20b F7).

Eager Python answers ``x.shape[0] is 1`` by CPython's small-int cache: True exactly where
the size is 1. The traced size is an object of its own, so the trace once took the "not 1"
branch for every size, silently. Now a size that is not the int is guarded ``!=`` (the
branch holds for every other size) and a size that is gets the cached int itself with its
value guarded; a size kept in an attribute, which cannot be swapped, is refused.
"""

# ruff: noqa: F632 - the identity tests of ints are the subject

from __future__ import annotations

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import GuardError, UnsupportedOpError

pytestmark = [
    pytest.mark.usefixtures("quiet_warnings"),
    pytest.mark.filterwarnings("ignore::SyntaxWarning"),
]


class ShapeIs(nn.Module):
    def forward(self, x):
        if x.shape[0] is 1:
            return x * 2
        return x + 10


class SizeIsNot(nn.Module):
    def forward(self, x):
        n = x.size(0)
        if n is not 1:
            return x - 3
        return x * 5


class UnpackedIs(nn.Module):
    def forward(self, x):
        b, _ = x.shape
        return x * 3 if b is 1 else x + 30


class ArithmeticOnTheRight(nn.Module):
    def forward(self, x):
        n = x.shape[0]
        if 0 is n - 2:
            return x * 3
        return x + 30


class RankIs(nn.Module):
    def forward(self, x):
        if x.dim() is 2:
            return x * 7
        return x + 70


class IsAndIndex(nn.Module):
    """The size is compared by identity and also indexes a list: its value is guarded."""

    def forward(self, x):
        n = x.shape[0]
        scale = [1.0, 2.0, 3.0, 4.0][n]
        return x * scale if n is 1 else x + scale


def _eager_traced_loaded(model, example, tmp_path):
    traced = tracebridge.trace(model, example)
    path = tmp_path / "m.tb"
    tracebridge.save(traced, path)
    return traced, tracebridge.load(path), tracebridge.load(path, runtime="interpreter")


def _each_answers_as_eager(model, runners, sizes):
    """For each batch size: every runner gives eager's result or refuses (GuardError);
    returns the sizes all of them served."""
    served = []
    for n in sizes:
        x = torch.randn(n, 4)
        expected = model(x)
        answers = []
        for run in runners:
            try:
                answers.append(run(x))
            except GuardError:
                answers.append(None)
        assert all((a is None) == (answers[0] is None) for a in answers), n
        if answers[0] is not None:
            for got in answers:
                torch.testing.assert_close(got, expected, rtol=0, atol=0)
            served.append(n)
    return served


@pytest.mark.parametrize("model", [ShapeIs(), SizeIsNot(), UnpackedIs()], ids=type)
@pytest.mark.parametrize("example", [1, 3])
def test_an_identity_test_with_one_answers_as_eager(tmp_path, model, example):
    runners = _eager_traced_loaded(model, torch.randn(example, 4), tmp_path)
    served = _each_answers_as_eager(model, runners, [1, 2, 3, 5])
    # traced on 1: that size only (its value decides); else every size (1 by the
    # specialisation traced at size 1, check/specialise.py)
    assert served == ([1] if example == 1 else [1, 2, 3, 5])


@pytest.mark.parametrize("example", [1, 2, 3])
def test_an_identity_test_of_arithmetic_on_a_size(tmp_path, example):
    model = ArithmeticOnTheRight()
    runners = _eager_traced_loaded(model, torch.randn(example, 4), tmp_path)
    served = _each_answers_as_eager(model, runners, [1, 2, 3, 4])
    assert served == ([2] if example == 2 else [1, 3, 4])


def test_the_guard_names_the_line_of_the_identity_test(tmp_path):
    traced = tracebridge.trace(ArithmeticOnTheRight(), torch.randn(3, 4))
    with pytest.raises(GuardError) as info:
        traced(torch.randn(2, 4))
    assert "if 0 is n - 2:" in str(info.value)
    assert "(x.shape[0] - 2) != 0" in str(info.value)


def test_a_rank_tested_by_identity_stays_right(tmp_path):
    model = RankIs()
    traced, loaded, _ = _eager_traced_loaded(model, torch.randn(3, 4), tmp_path)
    for x in (torch.randn(5, 4), torch.randn(1, 4)):
        torch.testing.assert_close(loaded(x), model(x), rtol=0, atol=0)
        torch.testing.assert_close(traced(x), model(x), rtol=0, atol=0)


@pytest.mark.parametrize("example", [1, 2])
def test_an_identity_test_with_another_read_of_the_value(tmp_path, example):
    model = IsAndIndex()
    runners = _eager_traced_loaded(model, torch.randn(example, 4), tmp_path)
    # the value is guarded; size 1 is also served by its specialisation
    assert _each_answers_as_eager(model, runners, [1, 2, 3]) == sorted({1, example})


class KeptInAttribute(nn.Module):
    def forward(self, x):
        self.n = x.shape[0]
        return self.helper(x)

    def helper(self, x):
        if self.n is 1:
            return x * 3
        return x + 30


def test_a_kept_size_that_is_the_int_is_refused_naming_the_line():
    with pytest.raises(UnsupportedOpError) as info:
        tracebridge.trace(KeptInAttribute(), torch.randn(1, 4))
    message = str(info.value)
    assert "`x.shape[0] is 1`" in message
    assert "test_identity_of_sizes.py" in message
    assert "== 1" in message


def test_a_kept_size_that_is_not_the_int_is_guarded(tmp_path):
    model = KeptInAttribute()
    runners = _eager_traced_loaded(model, torch.randn(3, 4), tmp_path)
    assert _each_answers_as_eager(model, runners, [1, 2, 3]) == [2, 3]


class LargeInt(nn.Module):
    def forward(self, x):
        if x.shape[0] is 1000:  # never True in eager: a size is a new object
            return x * 3
        return x + 30


def test_an_int_outside_the_cache_needs_no_guard(tmp_path):
    model = LargeInt()
    runners = _eager_traced_loaded(model, torch.randn(1000, 4), tmp_path)
    assert _each_answers_as_eager(model, runners, [1, 1000]) == [1, 1000]
