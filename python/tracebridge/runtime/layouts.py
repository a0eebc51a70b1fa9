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

from . import folding

_CHANNELS_LAST = torch.channels_last
_PLAIN_TYPES = frozenset({torch.Tensor, torch.nn.Parameter})
_strided = torch.strided


def strides_like_channels_last(sizes, strides) -> bool:
    """Whether a 4-d tensor of ``sizes`` and ``strides`` has strides ATen reads as
    channels-last (c10's ``is_channels_last_strides_2d_s4``, behind
    ``suggest_memory_format``): the channel dimension densest, then width, height and
    batch, each at least the extent of the ones before, a zero size or a zero channel
    stride never, and a batch stride equal to the channel stride (an ``N111`` tensor) not
    either."""
    if len(sizes) != 4 or strides[1] == 0:
        return False
    least = 0
    for d in (1, 3, 2, 0):
        if sizes[d] == 0 or strides[d] < least:
            return False
        if d == 0 and least == strides[1]:
            return False
        least = strides[d]
        if sizes[d] > 1:
            least *= sizes[d]
    return True


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
        if (
            type(w) not in _PLAIN_TYPES
            or x.layout is not _strided
            or w.layout is not _strided
            or x.ndim != 4
            or w.ndim != 4
            or x.device.type != "cpu"
            or w.device.type != "cpu"
            or not strides_like_channels_last(x.shape, x.stride())
            or w.is_contiguous(memory_format=_CHANNELS_LAST)
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
        # A normal tensor, whatever the caller's mode: later calls may run outside it.
        made = folding.made_normal(_in_channels_last, w)
        self.entry = (w, version, pointer, epoch, made)
        return made


def _in_channels_last(w: torch.Tensor) -> torch.Tensor:
    return w.contiguous(memory_format=_CHANNELS_LAST)
