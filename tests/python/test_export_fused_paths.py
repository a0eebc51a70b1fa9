"""The fused inference paths (nn.MultiheadAttention, nn.TransformerEncoderLayer) recorded
under ``torch.no_grad()`` export: the bridge writes them in exportable ops under
``torch.export`` (export/fused_paths.py), and keeps the fused op everywhere else."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import TraceError
from tracebridge.export import fused_paths
from tracebridge.runtime import checked_ops

pytestmark = pytest.mark.usefixtures("quiet_warnings")


def _layer(norm_first: bool, activation: str) -> nn.TransformerEncoderLayer:
    torch.manual_seed(0)
    return nn.TransformerEncoderLayer(
        16, 4, 24, activation=activation, norm_first=norm_first, batch_first=True
    ).eval()


def _encoder_arguments(layer: nn.TransformerEncoderLayer) -> list:
    attention = layer.self_attn
    return [
        attention.embed_dim,
        attention.num_heads,
        attention.in_proj_weight,
        attention.in_proj_bias,
        attention.out_proj.weight,
        attention.out_proj.bias,
        layer.activation_relu_or_gelu == 2,
        layer.norm_first,
        layer.norm1.eps,
        layer.norm1.weight,
        layer.norm1.bias,
        layer.norm2.weight,
        layer.norm2.bias,
        layer.linear1.weight,
        layer.linear1.bias,
        layer.linear2.weight,
        layer.linear2.bias,
    ]


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("shape", [(2, 5), (1, 1), (3, 7)])
def test_the_encoder_layer_form_computes_what_the_fused_kernel_does(norm_first, activation, shape):
    layer = _layer(norm_first, activation)
    src = torch.randn(*shape, 16)
    with torch.no_grad():
        fused = checked_ops.transformer_encoder_layer_fwd(src, *_encoder_arguments(layer))
        written = fused_paths.transformer_encoder_layer(src, *_encoder_arguments(layer))
        eager = layer(src)
    torch.testing.assert_close(written, fused)
    torch.testing.assert_close(written, eager)


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("average", [False, True])
@pytest.mark.parametrize("cross", [False, True])
def test_the_attention_form_computes_what_the_fused_kernel_does(need_weights, average, cross):
    torch.manual_seed(1)
    attention = nn.MultiheadAttention(12, 3, batch_first=True).eval()
    query = torch.randn(2, 4, 12)
    key = value = torch.randn(2, 4, 12) if cross else query  # the kernel takes equal shapes
    arguments = [
        12,
        3,
        attention.in_proj_weight,
        attention.in_proj_bias,
        attention.out_proj.weight,
        attention.out_proj.bias,
        None,
        need_weights,
        average,
        None,
    ]
    with torch.no_grad():
        fused = checked_ops.native_multi_head_attention(query, key, value, *arguments)
        written = fused_paths.multi_head_attention(query, key, value, *arguments)
        eager = attention(
            query, key, value, need_weights=need_weights, average_attn_weights=average
        )
    torch.testing.assert_close(written[0], fused[0])
    torch.testing.assert_close(written[0], eager[0])
    if need_weights:
        torch.testing.assert_close(written[1], fused[1])
        torch.testing.assert_close(written[1], eager[1])
    else:
        assert written[1] is None and fused[1] is None


def test_the_written_forms_make_the_fused_kernels_checks():
    layer = _layer(False, "relu")
    arguments = _encoder_arguments(layer)
    arguments[1] = 0  # num_heads 0: the kernel divides by zero (checked_ops.py's Note)
    with pytest.raises(Exception, match="num_heads must be integers >= 1"):
        fused_paths.transformer_encoder_layer(torch.randn(1, 2, 16), *arguments)


def _encoder() -> nn.Module:
    torch.manual_seed(2)
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()


class SelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = nn.MultiheadAttention(16, 4, batch_first=True)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        out, weights = self.attention(x, x, x)
        return self.head(out), weights


def _traced_without_autograd(model: nn.Module, example: torch.Tensor):
    with torch.no_grad():
        traced = tracebridge.trace(model, example)
    ops = {node.op for node in traced.program.methods["forward"].nodes}
    assert ops & set(fused_paths.EXPORTED_FORMS), "the trace should hold eager's fused path"
    return traced


@pytest.mark.parametrize("make", [_encoder, lambda: SelfAttention().eval()])
def test_a_fused_path_traced_without_autograd_exports_at_other_sizes(make):
    model = make()
    traced = _traced_without_autograd(model, torch.randn(2, 5, 16))
    gm = tracebridge.to_graph_module(traced)
    assert any("fused_path" in str(node.target) for node in gm.graph.nodes)
    exported = torch.export.export(
        gm, (torch.randn(2, 5, 16),), dynamic_shapes=tracebridge.export.fx.dynamic_shapes(gm)
    )
    names = {str(node.target) for node in exported.graph.nodes}
    assert not any("transformer_encoder_layer" in n or "native_multi_head" in n for n in names)
    for shape in [(3, 7), (1, 4)]:
        x = torch.randn(*shape, 16)
        with torch.no_grad():
            want = model(x)
        got = exported.module()(x)
        want = want if isinstance(want, tuple) else (want,)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-4)
    # Eagerly the GraphModule still runs the fused op, and still refuses autograd.
    with torch.no_grad():
        torch.testing.assert_close(
            gm(torch.randn(2, 5, 16))[0].shape,
            torch.Size([2, 5, 16]) if make is _encoder else torch.Size([2, 5, 3]),
        )
    with pytest.raises(tracebridge.GuardError, match="is_grad_enabled"):
        gm(torch.randn(2, 5, 16))


def test_an_encoder_traced_without_autograd_runs_in_onnx_runtime(tmp_path: Path):
    onnxruntime = pytest.importorskip("onnxruntime", reason="the onnx extra is not installed")
    pytest.importorskip("onnxscript", reason="the onnx extra is not installed")
    model = _encoder()
    traced = _traced_without_autograd(model, torch.randn(2, 5, 16))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = tracebridge.export_onnx(traced, tmp_path / "encoder.onnx")
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = torch.randn(3, 9, 16)
    (got,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    with torch.no_grad():
        torch.testing.assert_close(torch.from_numpy(got), model(x), atol=1e-5, rtol=1e-4)


def test_a_fused_path_with_a_mask_is_refused_at_export_naming_what_to_do():
    model = _encoder()
    mask = torch.zeros(2, 5, dtype=torch.bool)
    mask[1, 3:] = True
    with torch.no_grad():
        traced = tracebridge.trace(
            lambda x, m: model(x, src_key_padding_mask=m), (torch.randn(2, 5, 16), mask)
        )
    if not {n.op for n in traced.program.methods["forward"].nodes} & set(
        fused_paths.EXPORTED_FORMS
    ):
        pytest.skip("eager took the unfused path with this mask")
    gm = tracebridge.to_graph_module(traced)
    with pytest.raises(Exception, match="trace the model with autograd on"):
        torch.export.export(gm, (torch.randn(2, 5, 16), mask), strict=False)


def test_an_encoder_traced_with_autograd_exports_its_main_graph_as_before():
    model = _encoder()
    traced = tracebridge.trace(model, torch.randn(2, 5, 16))
    main = {node.op for node in traced.program.methods["forward"].nodes}
    assert not main & set(fused_paths.EXPORTED_FORMS)
    gm = tracebridge.to_graph_module(traced)
    exported = torch.export.export(gm, (torch.randn(2, 5, 16),), strict=False)
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        torch.testing.assert_close(exported.module()(x)[0], model(x), atol=1e-5, rtol=1e-4)


def test_the_export_error_names_an_unsupported_op_without_a_data_guard_hint():
    from tracebridge.backends import aot

    class Unsupported(Exception):
        pass

    with pytest.raises(TraceError) as raised:
        aot._export_failed("forward", Unsupported("aten.foo.default is not supported"))
    assert "guard on tensor data" not in str(raised.value)
    assert "aten.foo.default" in str(raised.value)
