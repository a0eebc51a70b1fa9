"""Conversions that do nothing on every call are not recorded (trace/noops.py): a ``to`` to a
dtype the tensor has on every call the guards accept, a ``contiguous`` of a tensor that is
contiguous on every call. Ones that are no-ops only at trace time stay recorded, and every
graph still computes what eager code computes on other shapes, dtypes and layouts."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tracebridge

from .graph_helpers import loaded, ops_of


class RMSNorm(nn.Module):
    """Llama's RMSNorm (transformers' modeling_llama.py): a float32 round trip."""

    def __init__(self, width: int):
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, width))

    def forward(self, hidden):
        input_dtype = hidden.dtype
        hidden = hidden.to(torch.float32)
        variance = hidden.pow(2).mean(-1, keepdim=True)
        hidden = hidden * torch.rsqrt(variance + 1e-6)
        return self.weight * hidden.to(input_dtype)


def test_rms_norm_records_no_conversion_of_a_float32_that_is_guarded(tmp_path):
    model = RMSNorm(8)
    traced = tracebridge.trace(model, torch.randn(2, 3, 8))
    ops = ops_of(traced)
    assert "Tensor.to" not in ops
    assert ops.count("prim.guard") == 1  # the dtype read: float32 on every accepted call
    run = loaded(traced, tmp_path)
    for shape in [(1, 5, 8), (4, 1, 8), (2, 3, 8)]:
        x = torch.randn(*shape)
        torch.testing.assert_close(run(x), model(x), rtol=0, atol=0)
    with pytest.raises(tracebridge.GuardError):
        run(torch.randn(2, 3, 8, dtype=torch.float64))  # the read dtype decides: refused


def to_float32_unread(x):
    return x.to(torch.float32) * 2


def test_a_conversion_that_was_a_no_op_at_trace_time_guards_the_dtype(tmp_path):
    """Nothing fixes the input's dtype, but ``to`` gave the input back when traced: the
    trace cannot tell later uses of the input from uses of the result, so the input's
    dtype is guarded (trace/noops.py, ``guard_returned_input``), and the call left out."""
    traced = tracebridge.trace(to_float32_unread, torch.randn(3, 4))
    assert "Tensor.to" not in ops_of(traced)
    run = loaded(traced, tmp_path)
    x = torch.randn(5, 2)
    torch.testing.assert_close(run(x), to_float32_unread(x), rtol=0, atol=0)
    with pytest.raises(tracebridge.GuardError, match="gave it back when traced"):
        run(torch.randn(5, 2, dtype=torch.float64))


def read_then_convert(x, y):
    # y.dtype is read (and guarded), then y is converted to x's dtype and to its own.
    scale = torch.ones(1, dtype=y.dtype)
    return (x.to(y.dtype) + y.float()) * scale, y.to(dtype=torch.float32, non_blocking=True)


def test_conversions_that_gave_their_input_back_are_left_out(tmp_path):
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    traced = tracebridge.trace(read_then_convert, (x, y))
    ops = ops_of(traced)
    # y's dtype is read and guarded; x's conversion gave x back, which guards x's dtype
    assert "Tensor.to" not in ops and "Tensor.float" not in ops
    run = loaded(traced, tmp_path)
    for args in [(torch.randn(4, 1), torch.randn(4, 5)), (torch.randn(1, 2), torch.randn(3, 2))]:
        for got, want in zip(run(*args), read_then_convert(*args)):
            assert got.dtype == want.dtype
            torch.testing.assert_close(got, want, rtol=0, atol=0)
    with pytest.raises(tracebridge.GuardError):
        run(torch.randn(2, 3, dtype=torch.float16), torch.randn(2, 3))


def float64_chain(x):
    # The dtype is fixed (read and guarded) as float64; the arithmetic keeps it, and the
    # conversion back to float64 does nothing; to float32 does something.
    d = x.dtype
    y = (x * 3 + 1).sigmoid() / 2
    return y.to(d), y.to(torch.float32)


def test_arithmetic_on_a_fixed_dtype_keeps_it_and_a_real_conversion_stays(tmp_path):
    traced = tracebridge.trace(float64_chain, torch.randn(3, dtype=torch.float64))
    assert ops_of(traced).count("Tensor.to") == 1
    run = loaded(traced, tmp_path)
    x = torch.randn(7, dtype=torch.float64)
    for got, want in zip(run(x), float64_chain(x)):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def heads_merged(x):
    # Attention's head merge: transpose, contiguous (a copy), a view, contiguous again.
    b, h, s, d = x.shape
    merged = x.transpose(1, 2).contiguous().view(b, s, h * d).contiguous()
    return merged.unsqueeze(0).contiguous() * 2


def test_contiguous_of_a_view_of_contiguous_is_left_out(tmp_path):
    traced = tracebridge.trace(heads_merged, torch.randn(2, 3, 4, 5))
    assert ops_of(traced).count("Tensor.contiguous") == 1  # the copy after transpose
    run = loaded(traced, tmp_path)
    for shape in [(1, 2, 7, 3), (3, 1, 1, 2)]:
        x = torch.randn(*shape)
        torch.testing.assert_close(run(x), heads_merged(x), rtol=0, atol=0)


def contiguous_input(x):
    return x.contiguous().view(-1)


def test_contiguous_of_an_input_stays_for_callers_that_pass_a_transposed_one(tmp_path):
    traced = tracebridge.trace(contiguous_input, torch.randn(3, 4))
    assert "Tensor.contiguous" in ops_of(traced)
    run = loaded(traced, tmp_path)
    x = torch.randn(4, 3).t()  # not contiguous: view(-1) needs the copy
    torch.testing.assert_close(run(x), contiguous_input(x), rtol=0, atol=0)


def test_inside_autocast_nothing_is_left_out():
    def under_autocast(x):
        d = x.dtype
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = x.to(d) + 1
        return y

    x = torch.randn(2, 3)
    traced = tracebridge.trace(under_autocast, x)
    assert "Tensor.to" in ops_of(traced)
    torch.testing.assert_close(traced(x), under_autocast(x), rtol=0, atol=0)


class DropoutThenNorm(nn.Module):
    """T5's order: the dtype is read before an evaluation-mode dropout, the conversion
    happens after it (the dropout's result has its input's dtype)."""

    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        dtype = x.dtype
        y = self.drop(x)
        return y.to(torch.float32) * torch.ones(1, dtype=dtype)


def test_a_dropout_keeps_the_fixed_dtype_of_its_input(tmp_path):
    model = DropoutThenNorm().eval()
    traced = tracebridge.trace(model, torch.randn(2, 3))
    assert "Tensor.to" not in ops_of(traced)
    run = loaded(traced, tmp_path)
    x = torch.randn(4, 1)
    torch.testing.assert_close(run(x), model(x), rtol=0, atol=0)


def test_a_conversion_that_gave_its_input_back_guards_the_dtype():
    """``x.float()`` of a float32 ``x`` is ``x`` itself: the trace cannot tell the code's
    later uses of ``x`` from those of the result, so the input's dtype is guarded. Recorded
    instead, a float64 call ran ``x.double()`` as ``double(float(x))`` and lost precision."""

    def both(x):
        return x.float(), x.double()

    traced = tracebridge.trace(both, (torch.randn(2, 3),))
    assert "Tensor.float" not in ops_of(traced)
    x = torch.randn(4, 3)
    for got, want in zip(traced(x), both(x), strict=True):
        assert torch.equal(got, want) and got.dtype == want.dtype
    with pytest.raises(tracebridge.GuardError, match=r"float\(\) gave it back when traced"):
        traced(torch.randn(2, 3, dtype=torch.float64))


def test_a_conversion_that_converts_when_traced_stays_general():
    def widen(x):
        return x.float() * 2

    traced = tracebridge.trace(widen, (torch.randn(2, 3, dtype=torch.float64),))
    assert "Tensor.float" in ops_of(traced)
    for dtype in (torch.float16, torch.float32, torch.float64):
        x = torch.randn(3, 2).to(dtype)
        got, want = traced(x), widen(x)
        assert torch.equal(got, want) and got.dtype == want.dtype


def test_a_conversion_with_a_device_that_gave_its_input_back_guards_the_dtype(tmp_path):
    """``x.to(device=d, dtype=float32)`` of a float32 ``x`` on ``d`` gives ``x`` back too:
    its dtype is guarded as for ``x.to(float32)``, and the call stays (on a call with
    another device it moves the tensor). Before, a float64 call silently returned the
    input's later uses as float32 (found by the perf engineer: the conversion with a
    device was not seen as a conversion)."""

    def move_then_convert(x, y):
        a = x.to(y.device)
        b = a.to(device=y.device, dtype=torch.float32)
        return a * 2, b + 1

    traced = tracebridge.trace(move_then_convert, (torch.randn(3), torch.randn(2)))
    assert "Tensor.to" in ops_of(traced)
    run = loaded(traced, tmp_path)
    x, y = torch.randn(5), torch.randn(2)
    for got, want in zip(run(x, y), move_then_convert(x, y)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    with pytest.raises(tracebridge.GuardError, match="gave it back when traced"):
        run(x.double(), y)
    positional = tracebridge.trace(lambda x: x.to("cpu", torch.float32) * 2, torch.randn(3))
    with pytest.raises(tracebridge.GuardError, match="gave it back when traced"):
        positional(torch.randn(3, dtype=torch.float64))
