"""What a traced call says when it fails or refuses (prober21b M2, M6 and the check's
batch probe): the user's op and line, the error's own type and words."""

from __future__ import annotations

import pytest
import torch

import tracebridge
from tracebridge import OpError


def add_in_place(a):
    return a.add_(1)  # the line an op failure names


@pytest.mark.parametrize("runtime", ["codegen", "interpreter", "loaded"])
def test_an_op_failure_names_the_op_and_the_users_line_not_generated_code(tmp_path, runtime):
    traced = tracebridge.trace(add_in_place, torch.randn(4, 6))
    if runtime == "loaded":
        tracebridge.save(traced, tmp_path / "f.tb")
        traced = tracebridge.load(tmp_path / "f.tb")
    elif runtime == "interpreter":
        method = traced._methods["forward"]
        method.runtime = "interpreter"
        method._compiled.clear()
    with pytest.raises(OpError) as info:
        traced(torch.randn(1, 6).expand(4, 6))  # a write into an expanded tensor
    text = str(info.value)
    assert "an op failed at Tensor.add_, " in text
    assert "test_call_messages.py:14" in text
    assert "`return a.add_(1)  # the line an op failure names`" in text
    for generated in ("op_Tensor", "_plain", "c0", "in0", "v1 ="):
        assert generated not in text, text
    assert "more than one element of the written-to tensor" in text
