"""``torch.as_tensor(x, dtype=...)`` of a tensor that already has that dtype gives ``x``
itself, as ``x.to(dtype)`` does (prober21b F6): recorded, every later use of ``x`` read the
conversion, and a float64 call lost its precision in the output ``x + 0``, silently. It
is now guarded as ``to()`` is: a call of another dtype raises GuardError naming the line;
calls of the traced dtype are right, saved and loaded too."""

from __future__ import annotations

import io

import pytest
import torch

import tracebridge
from tracebridge.errors import GuardError

pytestmark = pytest.mark.usefixtures("quiet_warnings")


def reloaded(traced):
    buffer = io.BytesIO()
    tracebridge.save(traced, buffer)
    return tracebridge.load(buffer.getvalue())


def plain(x):
    return torch.as_tensor(x, dtype=torch.float32) * 2, x + 0


def with_device(x):
    return torch.as_tensor(x, dtype=torch.float32, device="cpu") * 2, x + 0


@pytest.mark.parametrize("fn", [plain, with_device])
def test_as_tensor_that_gave_its_input_back_guards_the_dtype(fn):
    traced = tracebridge.trace(fn, torch.tensor([1.0, 2.0]))
    x64 = torch.tensor([0.1, 0.2], dtype=torch.float64)
    y = torch.randn(5)
    for t in (traced, reloaded(traced)):
        for got, expected in zip(t(y), fn(y)):
            assert got.dtype == expected.dtype
            torch.testing.assert_close(got, expected)
        with pytest.raises(GuardError, match=r"as_tensor\(\) gave it back"):
            t(x64)


def test_as_tensor_that_converts_when_traced_stays_general():
    traced = tracebridge.trace(plain, torch.tensor([1.0, 2.0], dtype=torch.float64))
    for x in (torch.randn(3, dtype=torch.float64), torch.randn(5, dtype=torch.float64)):
        for got, expected in zip(traced(x), plain(x)):
            assert got.dtype == expected.dtype
            torch.testing.assert_close(got, expected)


def test_as_tensor_of_python_numbers_is_unchanged():
    traced = tracebridge.trace(lambda x: x + torch.as_tensor([1.0, 2.0]), torch.zeros(2))
    torch.testing.assert_close(traced(torch.ones(2)), torch.tensor([2.0, 3.0]))
