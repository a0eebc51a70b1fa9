"""An error the traced code raises while it is recorded names the line that raised it
(trace/capture.py, ``_note_where``): the model's own message says what, not where."""

from __future__ import annotations

import warnings

import pytest
import torch

import tracebridge


def mismatched(x):
    y = x[:, :4]
    return y + x  # the sizes differ: PyTorch's message names no line


def test_an_error_of_the_traced_code_names_its_line():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError, match="must match the size") as info:
            tracebridge.trace(mismatched, torch.randn(2, 8))
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert f"{__file__}:" in notes and "(`return y + x" in notes
    assert "torch.jit.is_tracing() answer True" in notes


def test_a_trace_error_gets_no_note():
    def f(x):
        return x.storage()  # not recordable: tracebridge's own refusal names the line

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(tracebridge.TraceError) as info:
            tracebridge.trace(f, torch.randn(2))
    assert not getattr(info.value, "__notes__", [])
