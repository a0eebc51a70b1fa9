"""The ONNX refusal of a method that writes state (prober21d F4): a buffer written in
eval mode is named with the line that writes it and the reason (an ONNX model has no
state); only a training graph's BatchNorm statistics get the advice to trace in eval
mode, which cannot help the other."""

from __future__ import annotations

import warnings

import pytest
import torch

import tracebridge
from tracebridge.export import OnnxExportError

pytest.importorskip("onnx", reason="the onnx extra is not installed")
pytest.importorskip("onnxscript", reason="the onnx extra is not installed")


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        self.count += 1  # the write the refusal names
        return x * 2


def _trace(module, x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tracebridge.trace(module, x)


def test_an_eval_mode_write_is_named_by_its_line_without_eval_advice(tmp_path):
    traced = _trace(Counter().eval(), torch.rand(2, 3))
    with pytest.raises(OnnxExportError) as caught:
        tracebridge.export_onnx(traced, tmp_path / "counter.onnx")
    message = str(caught.value)
    assert "count at " in message and "test_onnx_state.py:" in message
    assert "`self.count += 1  # the write the refusal names`" in message
    assert "ONNX cannot hold such an update" in message
    assert "eval mode" not in message and ".eval()" not in message
    assert not (tmp_path / "counter.onnx").exists()


def test_training_batch_norm_is_advised_to_trace_in_eval_mode(tmp_path):
    module = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)).train()
    traced = _trace(module, torch.rand(2, 3, 8, 8))
    with pytest.raises(OnnxExportError, match=r"running_mean.*trace the module in eval mode"):
        tracebridge.export_onnx(traced, tmp_path / "bn.onnx")
    with pytest.raises(OnnxExportError) as caught:
        tracebridge.export_onnx(traced, tmp_path / "bn.onnx")
    assert "ONNX cannot hold" not in str(caught.value)  # num_batches_tracked is BN's own


def test_both_kinds_get_both_answers(tmp_path):
    class Both(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.BatchNorm1d(3)
            self.counter = Counter()

        def forward(self, x):
            return self.counter(self.norm(x))

    traced = _trace(Both().train(), torch.rand(4, 3))
    with pytest.raises(OnnxExportError) as caught:
        tracebridge.export_onnx(traced, tmp_path / "both.onnx")
    message = str(caught.value)
    assert "counter.count at " in message and "norm.running_mean" in message
    assert "ONNX cannot hold such an update" in message and "model.eval()" in message
