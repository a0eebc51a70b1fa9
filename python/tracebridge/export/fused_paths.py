"""The fused inference paths of ``nn.MultiheadAttention`` and ``nn.TransformerEncoderLayer``,
written in the ops that ``torch.export``, AOTInductor and ONNX know.

Note: why the bridge rewrites them.
  Eager PyTorch runs these modules as one fused op per layer
  (``_native_multi_head_attention``, ``_transformer_encoder_layer_fwd``) in evaluation
  without autograd, so a trace made under ``torch.no_grad()`` (the usual way to record an
  inference model) holds those ops, behind a guard that autograd is off. Neither op has an
  exported form: ``torch.export`` stops at them, and ONNX has no operator for them. Under
  ``torch.export`` the bridge (export/fx.py) runs the functions below instead: the same
  computation as the C++ kernels (attention with the packed in-projection, the residuals,
  the two norms in the order ``norm_first`` picks, the feed-forward layer), in ordinary ops.
  Results agree with the fused kernels to float rounding, not bit for bit. Eagerly and
  under ``torch.compile`` the GraphModule keeps the fused op.

  An attention mask is not rewritten: the kernels read any mask as booleans (a float
  mask's nonzero entries are masked out) and give fully masked rows zeros, which no single
  exported op does alike on every backend. Such a graph's export fails, naming the module
  and what to do (trace it with autograd on: the module's unfused path, which exports, is
  then the main graph).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..errors import TraceError
from ..runtime.checked_ops import check_attention_arguments, check_encoder_layer_arguments


def _masks_refused(module: str, mask) -> None:
    if mask is not None:
        raise TraceError(
            f"{module}'s fused inference path with an attention mask has no exported form "
            "(its kernel reads the mask as booleans); trace the model with autograd on "
            "(outside torch.no_grad()), so that the trace records the module's unfused "
            "path, which exports"
        )


def _heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """``(batch, length, embed)`` -> ``(batch, heads, length, embed // heads)``."""
    return x.unflatten(-1, (num_heads, -1)).transpose(1, 2)


def _attention(
    query,
    key,
    value,
    embed_dim,
    num_heads,
    qkv_weight,
    qkv_bias,
    proj_weight,
    proj_bias,
    need_weights,
    average_attn_weights,
):
    weights = qkv_weight.chunk(3)
    biases = qkv_bias.chunk(3)
    q, k, v = (
        _heads(F.linear(x, w, b), num_heads)
        for x, w, b in zip((query, key, value), weights, biases)
    )
    if need_weights:
        scores = (q * (1.0 / math.sqrt(embed_dim // num_heads))) @ k.transpose(-2, -1)
        attention = scores.softmax(-1)
        out = attention @ v
        attention = attention.mean(1) if average_attn_weights else attention
    else:
        out, attention = F.scaled_dot_product_attention(q, k, v), None
    out = F.linear(out.transpose(1, 2).flatten(2), proj_weight, proj_bias)
    return out, attention


def multi_head_attention(
    query,
    key,
    value,
    embed_dim,
    num_head,
    qkv_weight,
    qkv_bias,
    proj_weight,
    proj_bias,
    mask=None,
    need_weights=True,
    average_attn_weights=True,
    mask_type=None,
):
    """``torch._native_multi_head_attention`` in exportable ops (batch-first inputs, as the
    fused path takes them)."""
    check_attention_arguments(embed_dim, num_head, proj_bias)
    _masks_refused("nn.MultiheadAttention", mask)
    return _attention(
        query,
        key,
        value,
        embed_dim,
        num_head,
        qkv_weight,
        qkv_bias,
        proj_weight,
        proj_bias,
        need_weights,
        average_attn_weights,
    )


def transformer_encoder_layer(
    src,
    embed_dim,
    num_heads,
    qkv_weight,
    qkv_bias,
    proj_weight,
    proj_bias,
    use_gelu,
    norm_first,
    eps,
    norm_weight_1,
    norm_bias_1,
    norm_weight_2,
    norm_bias_2,
    ffn_weight_1,
    ffn_bias_1,
    ffn_weight_2,
    ffn_bias_2,
    mask=None,
    mask_type=None,
):
    """``torch._transformer_encoder_layer_fwd`` in exportable ops, in the kernel's order."""
    check_encoder_layer_arguments(
        embed_dim, num_heads, proj_bias, ffn_weight_1, ffn_bias_1, ffn_bias_2
    )
    _masks_refused("nn.TransformerEncoderLayer", mask)

    def norm(x, weight, bias):
        return F.layer_norm(x, (embed_dim,), weight, bias, eps)

    x = norm(src, norm_weight_1, norm_bias_1) if norm_first else src
    x = (
        _attention(
            x,
            x,
            x,
            embed_dim,
            num_heads,
            qkv_weight,
            qkv_bias,
            proj_weight,
            proj_bias,
            False,
            True,
        )[0]
        + src
    )
    if not norm_first:
        x = norm(x, norm_weight_1, norm_bias_1)
    residual = x
    if norm_first:
        x = norm(x, norm_weight_2, norm_bias_2)
    hidden = F.linear(x, ffn_weight_1, ffn_bias_1)
    hidden = F.gelu(hidden) if use_gelu else F.relu(hidden)
    x = F.linear(hidden, ffn_weight_2, ffn_bias_2) + residual
    if not norm_first:
        x = norm(x, norm_weight_2, norm_bias_2)
    return x


EXPORTED_FORMS: dict[str, Callable] = {
    "_native_multi_head_attention": multi_head_attention,
    "_transformer_encoder_layer_fwd": transformer_encoder_layer,
}


def exportable(op: str, fused: Callable) -> Callable:
    """The function an FX node of ``op`` calls: ``fused`` (the checked fused op), or under
    ``torch.export`` the op written in exportable ops."""
    exported = EXPORTED_FORMS[op]

    def tracebridge_fused_path(*args, **kwargs):
        if torch.compiler.is_exporting():
            return exported(*args, **kwargs)
        return fused(*args, **kwargs)

    return tracebridge_fused_path
