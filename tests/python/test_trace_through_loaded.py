"""Code that calls a loaded traced function, traced in its turn (prober21b F8): the loaded
program compiles at its first call, and the tensors its compiler made were recorded as
ops of the code around it, so the check refused a right trace with excerpts of generated
code; and the guards recorded through it named lines of generated code. The trace is now
right and checked, and its guards name the user's line that calls the loaded program."""

from __future__ import annotations

import pytest
import torch

import tracebridge
from tracebridge.errors import GuardError

pytestmark = pytest.mark.usefixtures("quiet_warnings")


def inner(x):
    return x * 2 if x.shape[0] > 2 else x * 3


def test_code_around_a_loaded_traced_function_traces_and_checks(tmp_path):
    path = tmp_path / "inner.tb"
    tracebridge.save(tracebridge.trace(inner, torch.randn(4, 2)), path)
    model = tracebridge.load(path)  # not called yet: it compiles inside the trace below

    def outer(x):
        return model(x) + 1

    traced = tracebridge.trace(outer, torch.randn(4, 2))
    for n in (3, 5, 8):
        y = torch.randn(n, 2)
        torch.testing.assert_close(traced(y), inner(y) + 1)
    with pytest.raises(GuardError) as info:
        traced(torch.randn(5, 2, dtype=torch.float64))
    text = str(info.value)
    assert "test_trace_through_loaded.py" in text and "return model(x) + 1" in text
    assert "<tracebridge:" not in text
    assert "<tracebridge:" not in traced.graph
