"""The zoo's onnx column (issue 16, item 4): guards of published model code that say nothing
export's own size rule does not already say leave the ONNX model's sizes dynamic.

transformers' attention asks ``is_causal = q_length > 1 and attention_mask is None`` and its
mask code ``(kv_length + 0 - mask.shape[-1]) > 0``; the trace guards both. Export makes each
dynamic size at least 2 anyway, so neither narrows what the ONNX file serves: fixing the
sequence length there (as a guard ONNX cannot state does) made every transformers encoder
refuse other lengths in ONNX Runtime. A guard that does narrow (``x.shape[1] > 4``) still
fixes its sizes (tests/python/test_onnx.py).
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import tracebridge

onnx = pytest.importorskip("onnx", reason="the onnx extra is not installed")
onnxruntime = pytest.importorskip("onnxruntime", reason="the onnx extra is not installed")
pytest.importorskip("onnxscript", reason="the onnx extra is not installed")


class EncoderGuards(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x, mask):
        q_length = x.shape[1]
        # sdpa_attention.py:159 asks ``mask is None``: with a mask that chain is False at
        # every length and needs no guard (trace/short_circuit.py); this one decides.
        is_causal = q_length > 1 and mask is not None
        if (padding := q_length + 0 - mask.shape[-1]) > 0:  # masking_utils.py:244
            mask = nn.functional.pad(mask, (0, padding))
        h = self.proj(x) * mask[..., None]
        return h.cumsum(1) if not is_causal else h


def test_guards_implied_by_exports_size_rule_keep_sizes_dynamic(tmp_path):
    model = EncoderGuards()
    example = (torch.randn(2, 8, 4), torch.ones(2, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracebridge.trace(model, example)
    assert len(traced.guards) >= 2
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        path = tracebridge.export_onnx(traced, tmp_path / "enc.onnx")
    assert not [w for w in seen if "fixed in the file" in str(w.message)]
    inputs = onnx.load(path).graph.input
    # the features are fixed: the Linear's weight fixes them (export makes them static)
    assert [[d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in inputs] == [
        ["s0", "s1", 4],
        ["s0", "s1"],
    ]
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for batch, length in [(1, 5), (3, 12)]:
        x, mask = torch.randn(batch, length, 4), (torch.rand(batch, length) > 0.3).float()
        names = [i.name for i in session.get_inputs()]
        (got,) = session.run(None, dict(zip(names, (x.numpy(), mask.numpy()))))
        assert torch.allclose(torch.from_numpy(got), model(x, mask), atol=1e-5)
