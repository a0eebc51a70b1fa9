"""nn.TransformerEncoder with a padding mask, whose nested fast path eager takes in
evaluation without autograd (zeros at the padded positions): traced as the dense ops that
give its results (trace/transformer_encoder.py)."""

import io

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import GuardError


def _encoder(batch_first: bool, norm: bool, **kwargs) -> nn.Module:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(
        d_model=16, nhead=2, dim_feedforward=32, batch_first=batch_first, dropout=0.0
    )
    return nn.TransformerEncoder(
        layer, num_layers=2, norm=nn.LayerNorm(16) if norm else None, **kwargs
    ).eval()


class Padded(nn.Module):
    def __init__(self, encoder):
        super().__init__()
        self.enc = encoder

    def forward(self, x, pad):
        return self.enc(x, src_key_padding_mask=pad)


def _inputs(batch: int, length: int, pads: list[int], batch_first: bool, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, length, 16, generator=g)
    pad = torch.zeros(batch, length, dtype=torch.bool)
    for row, n in enumerate(pads):
        if n:
            pad[row, length - n :] = True
    return (x if batch_first else x.transpose(0, 1)), pad


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("kwargs", [{}, {"mask_check": False}])
@pytest.mark.parametrize("grad", [False, True])
def test_padded_encoder_is_right_at_other_shapes_with_and_without_autograd(
    batch_first, kwargs, grad
):
    model = Padded(_encoder(batch_first, norm=True, **kwargs)).eval()
    with torch.set_grad_enabled(grad):
        traced = tracebridge.trace(model, _inputs(2, 6, [2, 0], batch_first))
    buffer = io.BytesIO()
    traced.save(buffer)
    buffer.seek(0)
    loaded = tracebridge.load(buffer)
    for pads, seed in ([3, 1, 0], 0), ([4, 0, 0, 1], 1):
        inputs = _inputs(len(pads), 9, pads, batch_first, seed=seed)
        # Traced without autograd, the nested path is eager's there only: a call with
        # autograd is refused (GuardError), as for the fused layers' path.
        for mode in (torch.no_grad(), torch.enable_grad()) if grad else (torch.no_grad(),):
            with mode:
                expected = model(*inputs)
                torch.testing.assert_close(traced(*inputs), expected, atol=1e-5, rtol=1e-5)
                torch.testing.assert_close(loaded(*inputs), expected, atol=1e-5, rtol=1e-5)
    if not grad and batch_first:  # (batch_first=False: eager's dense path in both modes)
        with pytest.raises(GuardError, match="is_grad_enabled"):
            traced(*inputs)


def test_padding_inside_a_sequence_is_refused_where_eager_reads_it_otherwise():
    model = Padded(_encoder(True, norm=False))
    with torch.no_grad():
        traced = tracebridge.trace(model, _inputs(2, 6, [2, 0], True))
        x, pad = _inputs(2, 6, [0, 0], True)
        pad[0, 1] = True  # not at the end: eager checks and takes its dense path
        with pytest.raises(GuardError):
            traced(x, pad)


@pytest.mark.parametrize("grad", [False, True])
def test_a_wrapper_left_in_training_is_right_or_refuses(grad):
    """The root in training around an encoder in evaluation: eager's nested path is the
    encoder's choice; every call is eager's answer or a GuardError, never another."""
    model = Padded(_encoder(True, norm=True))  # the wrapper stays in training mode
    with torch.set_grad_enabled(grad):
        traced = tracebridge.trace(model, _inputs(2, 6, [2, 0], True))
    inputs = _inputs(3, 9, [3, 1, 0], True)
    served = 0
    for mode in (torch.no_grad(), torch.enable_grad()):
        with mode:
            try:
                got = traced(*inputs)
            except GuardError:
                continue
            torch.testing.assert_close(got, model(*inputs), atol=1e-5, rtol=1e-5)
            served += 1
    assert served >= 1  # the mode it was traced in
