"""A convolution's weight, passed in the layout ATen would copy it into on every call.

Note: why. ATen's CPU convolution (oneDNN, and its own kernels) runs channels-last where
its input's strides are channels-last-like (``Tensor.suggest_memory_format``), and then
copies the weight into that layout on every call (``weight.contiguous(channels_last)`` in
``at::_convolution``). A ConvNeXt's downsampling convolutions read a layer norm over
channels permuted back to NCHW, so each call copied 0.4 MB (timm convnext_atto) to 6 MB
(torchvision convnext_tiny) of weights; torch.jit's interpreter copies them too. In the
code for calls without autograd (runtime/codegen.py, ``weight_in_layout``), a ``conv2d``
whose weight is state or a folded value passes, where its input is a plain tensor with
such strides, that weight already in channels-last layout, made once per weight (its
identity, version, data pointer and ``invalidate_caches``' epoch): ATen's choice of
layout follows the input alone then (channels-last if the input or the weight is), the
copy it makes of a weight already in that layout is the weight itself, and the kernel
gets the same values in the same layout: eager's result bit for bit. Where the input's
strides are not channels-last-like (a contiguous input; PVT's and SegFormer's
reductions, whose batch stride breaks the pattern, and which ATen runs contiguous) the
weight goes as it is, as it does under a torch function mode, autocast, a tensor
subclass, or on another device than the CPU.
"""

from __future__ import annotations

import torch

from . import data_writes, folding

_CHANNELS_LAST = torch.channels_last
_PLAIN_TYPES = frozenset({torch.Tensor, torch.nn.Parameter})
_strided = torch.strided


def strides_like_channels_last(sizes, strides) -> bool:
    """Whether a 4-d tensor of ``sizes`` and ``strides`` has strides ATen reads as
    channels-last (c10's ``is_channels_last_strides_2d_s4``, behind
    ``suggest_memory_format``, written out): channels densest, then width, height and
    batch, each stride at least the extent of the dimensions before it; never with a zero
    size or a zero channel stride, nor where that extent, before the batch, is the channel
    stride itself (an ``N111`` tensor reads as contiguous). It agrees with
    ``torch._prims_common.are_strides_like_channels_last_or_false`` on every size in 0-3
    and stride in (0, 1, 2, 3, 6, 12, 36) (614,656 cases), and with the convolution's own
    choice in tests/python/test_conv_layout.py."""
    if len(sizes) != 4:
        return False
    n, c, h, w = sizes
    sn, sc, sh, sw = strides
    if sc == 0 or n == 0 or c == 0 or h == 0 or w == 0 or sc < 0:
        return False
    least = sc * c if c > 1 else sc
    if sw < least:
        return False
    least = sw * w if w > 1 else sw
    if sh < least:
        return False
    least = sh * h if h > 1 else sh
    return sn >= least and least != sc


class ChannelsLastWeight:
    """One ``conv2d`` call site's weight in channels-last layout, where its input makes
    ATen copy it so (module Note): called as ``site(x, w)`` where ``x`` is a plain tensor
    that is not contiguous, it gives the weight to pass."""

    __slots__ = ("entry",)

    def __init__(self) -> None:
        self.entry: tuple | None = None

    def __repr__(self) -> str:
        return "conv2d weight in its input's layout"

    def __call__(self, x: torch.Tensor, w):
        # The input's side on every call (its strides are the call's); the weight's side
        # once per weight, kept with the entry: about 2 us a call where the input is not
        # contiguous, against a copy of the weight (0.3-1.9M elements a call in the zoo).
        if (
            type(w) not in _PLAIN_TYPES
            or not x.is_cpu
            or x.layout is not _strided
            or x.ndim != 4
            or not strides_like_channels_last(x.shape, x.stride())
        ):
            return w
        try:
            version = w._version
        except RuntimeError:  # made in inference mode: no version to key on
            return w
        pointer, epoch = w.data_ptr(), folding._epoch[0]
        entry = self.entry
        if (
            entry is not None
            and entry[0] is w
            and entry[1] == version
            and entry[2] == pointer
            and entry[3] == epoch
        ):
            return entry[4]
        if (
            not w.is_cpu
            or w.layout is not _strided
            or w.ndim != 4
            or w.is_contiguous(memory_format=_CHANNELS_LAST)
        ):
            made = w  # ATen copies nothing: the weight as it is, known for this weight
        elif w.is_shared() or data_writes.taken((w,)):
            # a write in another process (shared memory) or through .data moves no
            # version: not kept
            return _in_channels_last(w)
        else:
            # A normal tensor, whatever the caller's mode: later calls may run outside it.
            made = folding.made_normal(_in_channels_last, w)
            data_writes.keep((w,))
        self.entry = (w, version, pointer, epoch, made)
        return made


def _in_channels_last(w: torch.Tensor) -> torch.Tensor:
    return w.contiguous(memory_format=_CHANNELS_LAST)
