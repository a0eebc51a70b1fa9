"""``nn.TransformerEncoder``'s nested fast path, recorded as the dense ops that give its
results.

Note: why. In evaluation without autograd, with a ``src_key_padding_mask``, eager's encoder
packs the batch into a nested tensor (each sequence without its padding), runs its layers
on that, and pads the result back with zeros: its output is 0 at every padded position.
No graph holds a nested tensor, and the recording mode made the encoder take its dense
path instead, whose padded positions hold values: a trace was refused naming a private
op (``_nested_tensor_from_mask_left_aligned``), or, with ``mask_check=False``, differed
from eager at the padded positions (silently so with ``check_trace=False``), where
torch.jit.trace was right (an outside prober). While tracing, the encoder's ``forward`` is
this module's wherever eager would take the nested path: its layers run on the dense
batch with the padding mask (each valid position attends to the valid ones only, as in
the nested batch: the same numbers), then the padded positions are set to zero, as eager's
padding back does. The nested path reads only the first positions of each sequence, so
the trace guards that the mask pads at the end (left-aligned), as eager's ``mask_check``
tests; and it is eager's path only without autograd (or where nothing requires grad),
which the graph guards.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import transformer as _transformer

from .helpers import active_tracer
from .patches import BUILTIN_PATCHES

_original_forward = nn.TransformerEncoder.forward
_original_grad_enabled = torch._C.is_grad_enabled


def _first_layer_args(layer: nn.Module) -> tuple:
    attention = layer.self_attn
    return (
        attention.in_proj_weight,
        attention.in_proj_bias,
        attention.out_proj.weight,
        attention.out_proj.bias,
        layer.norm1.weight,
        layer.norm1.bias,
        layer.norm2.weight,
        layer.norm2.bias,
        layer.linear1.weight,
        layer.linear1.bias,
        layer.linear2.weight,
        layer.linear2.bias,
    )


def _nested_path(encoder, src, mask, padding) -> bool:
    """Whether eager's encoder would pack ``src`` into a nested tensor, save the left
    alignment of the padding, which the caller guards (its ``mask_check``)."""
    first = encoder.layers[0]
    if not isinstance(first, nn.TransformerEncoderLayer):
        return False
    if not torch.backends.mha.get_fastpath_enabled():  # a setting: guarded
        return False
    if not getattr(encoder, "use_nested_tensor", False) or first.training:
        return False
    if src.dim() != 3 or padding is None or src.is_nested or mask is not None:
        return False
    if torch.is_autocast_enabled() or src.device.type not in ("cpu", "cuda"):
        return False
    tensors = (src, *_first_layer_args(first))
    if any(t is None for t in tensors):
        return False
    # Eager's path only without autograd, or where nothing requires grad: the graph
    # guards the mode (a call in the other one raises GuardError, or runs the graph
    # recorded for it: api.py's _without_autograd, which calls without autograd try
    # first), and the tracer guards each requires_grad it reads.
    tracer = active_tracer()
    grad = _original_grad_enabled()
    loc = tracer.location()
    ref = tracer._value_node("prim.grad_enabled", "bool", loc=loc)
    what = "torch.is_grad_enabled() (nn.TransformerEncoder's nested path is eager's without it)"
    tracer.guard(ref, grad, what, "branch", loc)
    return not (grad and any(t.requires_grad for t in tensors))


def _traced_forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
    tracer = active_tracer()
    if tracer is None or not tracer.is_active():
        return _original_forward(self, src, mask, src_key_padding_mask, is_causal)
    padding = F._canonical_mask(
        mask=src_key_padding_mask,
        mask_name="src_key_padding_mask",
        other_type=F._none_or_dtype(mask),
        other_name="mask",
        target_type=src.dtype,
    )
    canonical = F._canonical_mask(
        mask=mask,
        mask_name="mask",
        other_type=None,
        other_name="",
        target_type=src.dtype,
        check_other=False,
    )
    batch_first = self.layers[0].self_attn.batch_first
    nested = _nested_path(self, src, canonical, padding)
    if nested:
        padded = padding != 0  # (batch, sequence); -inf (or any non-zero) at the padding
        # The nested batch keeps each sequence's first positions: eager checks that the
        # padding is at the end (mask_check) and takes its dense path otherwise (without
        # the check it would read the wrong positions: refused here the same way). A
        # guard on the data: a call whose padding is elsewhere raises GuardError.
        nested = bool((~padded[:, :-1] | padded[:, 1:]).all())
    # The layers as eager's dense path calls them (its nested path gives the same numbers
    # at every position that is not padding).
    seq_len = _transformer._get_seq_len(src, batch_first)
    is_causal = _transformer._detect_is_causal_mask(canonical, is_causal, seq_len)
    output = src
    for layer in self.layers:
        output = layer(
            output, src_mask=canonical, is_causal=is_causal, src_key_padding_mask=padding
        )
    if nested:
        where = padded if batch_first else padded.t()
        output = output.masked_fill(where.unsqueeze(-1), 0.0)  # eager pads back with zeros
    if self.norm is not None:
        output = self.norm(output)
    return output


BUILTIN_PATCHES.add(nn.TransformerEncoder, "forward", _traced_forward)
