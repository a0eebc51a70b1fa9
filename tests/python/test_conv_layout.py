"""A convolution whose input ATen runs channels-last gets its weight in that layout, made
once per weight, in calls without autograd (runtime/layouts.py): results and strides stay
eager's bit for bit, the weight is not copied on each call, and the copy follows every
change of the state that a folded value follows."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.runtime import layouts

pytestmark = pytest.mark.usefixtures("quiet_warnings")


class Downsample(nn.Module):
    """ConvNeXt's downsampling: a layer norm over channels, permuted back, then a 2x2
    convolution of stride 2 (its input is channels-last in memory)."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.conv = nn.Conv2d(8, 16, 2, stride=2)

    def forward(self, x):
        return self.conv(self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2))


class Reduction(nn.Module):
    """PVT's and SegFormer's reduction: tokens reshaped to a map of batch 1, whose batch
    stride breaks the channels-last pattern: ATen runs this convolution contiguous."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 2, stride=2)

    def forward(self, tokens):
        b, n, c = tokens.shape
        return self.conv(tokens.transpose(1, 2).reshape(b, c, 4, n // 4))


def _loaded(net, x, tmp_path):
    path = tmp_path / "net.tb"
    tracebridge.trace(net, x).save(path)
    return tracebridge.load(path)


def _same(a, b):
    assert torch.equal(a, b) and a.stride() == b.stride()


def _weight_copies(fn, weight_shape) -> int:
    """How many ``copy_`` of a tensor of ``weight_shape`` one call of ``fn`` runs."""
    with torch.profiler.profile(record_shapes=True) as prof:
        fn()
    shape = list(weight_shape)
    return sum(
        1 for e in prof.events() if e.name == "aten::copy_" and e.input_shapes[:1] == [shape]
    )


def test_a_channels_last_input_gets_its_weight_in_that_layout_once(tmp_path):
    torch.manual_seed(0)
    net = Downsample().eval()
    x = torch.randn(1, 8, 8, 8)
    loaded = _loaded(net, x, tmp_path)
    with torch.no_grad():
        _same(loaded(x), net(x))
        assert "conv2d weight in its input's layout" in loaded.code
        weight = loaded.conv.weight.shape
        assert _weight_copies(lambda: net(x), weight) == 1  # eager copies it every call
        assert _weight_copies(lambda: loaded(x), weight) == 0
        _same(loaded(x), net(x))
    # With autograd the call runs as traced: the same values, gradients to the weight.
    out = loaded(x)
    _same(out.detach(), net(x).detach())
    out.sum().backward()
    assert loaded.conv.weight.grad is not None


def test_the_weight_in_layout_follows_the_state():
    torch.manual_seed(0)
    net = Downsample().eval()
    x = torch.randn(2, 8, 6, 6)
    traced = tracebridge.trace(net, x)  # shares the model's tensors
    with torch.no_grad():
        _same(traced(x), net(x))
        net.conv.weight.mul_(2)  # in place: a new version
        _same(traced(x), net(x))
        net.conv.weight.data = torch.randn(16, 8, 2, 2)  # new memory, same version
        _same(traced(x), net(x))
        net.load_state_dict({k: torch.randn_like(v) for k, v in net.state_dict().items()})
        _same(traced(x), net(x))
        net.conv.weight.data.mul_(3)  # not recorded by torch: invalidate_caches() sees it
        tracebridge.invalidate_caches()
        _same(traced(x), net(x))
        net.conv.weight = nn.Parameter(torch.randn(16, 8, 2, 2))  # another tensor
        _same(traced(x), net(x))


def test_an_input_ATen_runs_contiguous_passes_the_weight_as_it_is(tmp_path):
    torch.manual_seed(0)
    net = Reduction().eval()
    tokens = torch.randn(1, 16, 8)
    loaded = _loaded(net, tokens, tmp_path)
    with torch.no_grad():
        _same(loaded(tokens), net(tokens))  # contiguous output, as eager's
        assert not loaded(tokens).is_contiguous(memory_format=torch.channels_last)
        # and a channels-last-like one (batch 2) takes the weight in layout
        tokens = torch.randn(2, 16, 8)
        _same(loaded(tokens), net(tokens))


def test_a_contiguous_input_and_a_subclass_run_as_recorded(tmp_path):
    class Sub(torch.Tensor):
        pass

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3)).eval()
    x = torch.randn(1, 3, 6, 6)
    loaded = _loaded(net, x, tmp_path)
    with torch.no_grad():
        _same(loaded(x), net(x))
        cl = x.contiguous(memory_format=torch.channels_last)
        _same(loaded(cl), net(cl))
        sub = cl.as_subclass(Sub)
        assert type(loaded(sub)) is Sub
        torch.testing.assert_close(loaded(sub).as_subclass(torch.Tensor), net(cl))


def test_one_by_one_and_depthwise_weights_are_not_tested():
    net = nn.Sequential(nn.Conv2d(4, 4, 1), nn.Conv2d(4, 4, 3, groups=4)).eval()
    x = torch.randn(1, 4, 6, 6)
    traced = tracebridge.trace(net, x)
    with torch.no_grad():
        traced(x)
        assert "weight in its input" not in traced.code


def _layouts():
    """4-d tensors of many strides: permuted, sliced, reshaped from tokens, expanded,
    with sizes of 1 where ATen's rule has its special cases."""
    for n, c, h, w in itertools.product((1, 2), (1, 3), (1, 3), (3, 4)):
        base = torch.randn(n, c, h, w)
        yield base
        for order in itertools.permutations(range(4)):
            inverse = [order.index(i) for i in range(4)]
            yield base.permute(*order).contiguous().permute(*inverse)
        yield torch.randn(n, h, w, c).permute(0, 3, 1, 2)
        yield torch.randn(n, h * w, c).transpose(1, 2).reshape(n, c, h, w)
        yield torch.randn(n, c, h, 2 * w)[..., ::2]
        yield torch.randn(1, c, h, w).expand(n, c, h, w)


def test_the_layout_rule_is_the_one_ATen_convolves_by():
    """``strides_like_channels_last`` against what a convolution does: its output is
    channels-last exactly where ATen chose that layout for the input."""
    for x in _layouts():
        c = x.shape[1]
        w = torch.randn(4, c, 2, 2)  # contiguous, not channels-last: the input decides
        out = torch.conv2d(x, w, padding=1)
        chose = out.is_contiguous(memory_format=torch.channels_last) and not out.is_contiguous()
        assert layouts.strides_like_channels_last(x.shape, x.stride()) == chose, (
            tuple(x.shape),
            x.stride(),
        )
        # and with the weight given channels-last there, the same result, bit for bit
        site = layouts.ChannelsLastWeight()
        if not x.is_contiguous():
            _same(torch.conv2d(x, site(x, w), padding=1), out)


def test_the_layout_rule_is_torchs_own_reading_of_strides():
    """``strides_like_channels_last`` against torch's Python form of the same c10 rule,
    on sizes with zeros and ones and strides with zeros and ties."""
    from torch._prims_common import are_strides_like_channels_last_or_false as theirs

    values = (0, 1, 3, 9, 27)
    for sizes in itertools.product((0, 1, 3), repeat=4):
        for strides in itertools.product(values, repeat=4):
            assert layouts.strides_like_channels_last(sizes, strides) == theirs(sizes, strides)
