"""Bad input to ``trace`` is refused with a clear error, before anything runs where it can
be (api.py ``_check_options``; trace/capture.py ``_call_refused``): found by the snippet
trial's probes (a list of floats as example_inputs, a tensor as check_inputs, a misspelled
runtime that failed only after recording and checking)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import TraceError

pytestmark = pytest.mark.usefixtures("quiet_warnings")


def _counted():
    runs = []

    def double(x):
        runs.append(1)
        return x * 2

    return double, runs


@pytest.mark.parametrize(
    "options, error, words",
    [
        ({"runtime": "codgen"}, ValueError, "runtime must be 'codegen' or 'interpreter'"),
        ({"check_tolerance": -1}, TraceError, "check_tolerance must be 0 or more, not -1"),
        ({"check_tolerance": math.nan}, TraceError, "check_tolerance must be 0 or more"),
        ({"check_tolerance": "1e-3"}, TraceError, "check_tolerance must be a number, not str"),
        ({"check_inputs": torch.ones(3)}, TraceError, r"pass check_inputs=[(x,)]"),
        ({"example_kwarg_inputs": [1]}, TraceError, "example_kwarg_inputs must be a dict"),
    ],
)
def test_bad_options_are_refused_before_the_code_runs(options, error, words):
    double, runs = _counted()
    with pytest.raises(error) as info:
        tracebridge.trace(double, torch.ones(3), **options)
    assert words in str(info.value)
    assert runs == []


def test_bad_options_of_trace_module_too():
    with pytest.raises(ValueError, match="runtime must be"):
        tracebridge.trace_module(nn.Linear(2, 2), {"forward": torch.ones(1, 2)}, runtime="x")


def test_inputs_the_function_cannot_take_are_named():
    double, _ = _counted()
    with pytest.raises(TraceError) as info:
        tracebridge.trace(double, [1.0, 2.0])
    message = str(info.value)
    assert message.startswith("cannot call _counted.<locals>.double with the inputs given: ")
    assert "positional inputs: float, float" in message and "(that_list,)" in message

    with pytest.raises(TraceError, match="cannot call Linear.forward .* 'input'"):
        tracebridge.trace(nn.Linear(4, 2), ())


def test_a_check_input_the_function_cannot_take_is_named():
    with pytest.raises(TraceError, match="positional inputs: Tensor, Tensor"):
        tracebridge.trace(
            lambda x: x + 1, torch.ones(3), check_inputs=[(torch.ones(3), torch.ones(3))]
        )


def test_a_type_error_inside_the_code_is_the_code_s_own():
    def bad(x):
        return x + "a"

    with pytest.raises(TypeError) as info:
        tracebridge.trace(bad, torch.ones(3))
    assert not isinstance(info.value, TraceError)
    assert any("while it was recorded" in note for note in info.value.__notes__)
