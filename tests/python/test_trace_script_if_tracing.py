"""``torch.jit._script_if_tracing`` functions (torchvision's ``batched_nms`` coordinate
trick, roi helpers) run as Python while tracebridge records: TorchScript would compute
them out of the recorder's sight, and their results would reach the trace as constants,
right only on the example inputs."""

from __future__ import annotations

import warnings

import torch

import tracebridge


@torch.jit._script_if_tracing
def _shifted(boxes: torch.Tensor, idxs: torch.Tensor) -> torch.Tensor:
    offsets = idxs.to(boxes) * (boxes.max() + 1)
    return boxes + offsets[:, None]


def _model(boxes, idxs):
    return _shifted(boxes, idxs) * 2


def test_a_script_if_tracing_function_is_recorded_not_baked():
    boxes, idxs = torch.rand(4, 4), torch.tensor([0, 1, 0, 2])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "stored in the trace as constant"
        traced = tracebridge.trace(_model, (boxes, idxs), check_trace=False)
    assert "max" in str(traced.graph) and "const" not in str(traced.graph)
    for n in (4, 7):  # same shape (a baked result would pass a shape check), and another
        other, others = torch.rand(n, 4) * 5, torch.randint(0, 3, (n,))
        assert torch.equal(traced(other, others), _model(other, others))


def test_library_code_still_sees_a_tracer():
    """Only the wrapper's own question is answered for PyTorch; library code asking
    ``torch.jit.is_tracing()`` directly still hears True (its general paths)."""
    seen = []

    def f(x):
        seen.append(torch.jit.is_tracing())
        return x + 1

    tracebridge.trace(f, torch.ones(2), check_trace=False)
    assert seen == [True]


def test_a_registered_operator_outside_the_op_set_is_named_as_written():
    library = torch.library.Library("tbtest_label", "DEF")
    library.define("twice(Tensor x) -> Tensor")
    library.impl("twice", lambda x: x * 2, "CPU")

    def f(x):
        return torch.ops.tbtest_label.twice(x) + 1

    try:
        tracebridge.trace(f, torch.ones(3), check_trace=False)
    except tracebridge.UnsupportedOpError as refused:
        message = str(refused)
    assert "cannot record a call to torch.ops.tbtest_label.twice at " in message
    assert "test_trace_script_if_tracing.py" in message
