"""Which convolutions and adaptive pools run without the per-call bound of their result's
bytes (runtime/checked_sizes.py, "what runs without the bound"), and that the bound still
refuses a crafted padding wherever the weight's kernel does not cover it: a weight of the
caller's, or state replaced after load by a smaller kernel."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import TraceError
from tracebridge.ir import Node, Ref
from tracebridge.runtime import checked_sizes, support

pytestmark = pytest.mark.usefixtures("quiet_warnings")


def _conv_node(op: str, padding, dilation=1) -> Node:
    d = int(op[4])
    return Node(op, [Ref(0), Ref(1), None, [1] * d, padding, dilation, 1])


@pytest.mark.parametrize(
    ("op", "padding", "dilation", "kernel"),
    [
        ("conv2d", 3, 1, (7, 7)),  # ResNet's stem
        ("conv2d", [2, 2], 1, (5, 5)),  # MobileNet's 5x5 depthwise
        ("conv2d", [3, 1], [1, 2], (7, 2)),
        ("conv1d", 4, 1, (9,)),
        ("conv3d", [1, 2, 3], 1, (3, 5, 7)),
        ("conv2d", 12, 12, (3, 3)),  # DeepLab's dilated 3x3 (ASPP)
        ("conv2d", 2**20, 2**20, (3, 3)),
        ("conv2d", 5, 2, (6, 6)),  # 2 * 5 / 2 rounds up: a kernel of 6 covers it
    ],
)
def test_the_kernel_that_covers_a_literal_padding(op, padding, dilation, kernel):
    node = _conv_node(op, padding, dilation)
    assert checked_sizes.needs_bound(node)
    assert checked_sizes.kernel_covering(node) == kernel
    # the output of such a convolution is no larger than its input along any dimension
    d = len(kernel)
    for size in (1, 2, 7, 31):
        for stride in (1, 2, 3):
            x = torch.empty([1, 1] + [size] * d, device="meta")
            w = torch.empty([1, 1, *kernel], device="meta")
            f = getattr(torch.nn.functional, op)
            try:
                out = f(x, w, None, stride, padding, dilation)
            except RuntimeError:  # an output of no elements: PyTorch refuses it
                continue
            assert all(o <= size for o in out.shape[2:])


@pytest.mark.parametrize(
    "node",
    [
        Node("conv2d", [Ref(0), Ref(1), None, [1, 1], Ref(2)]),  # a padding computed
        Node("conv2d", [Ref(0), Ref(1), None, [1, 1], [3, 3], Ref(2)]),  # a dilation computed
        Node("conv_transpose2d", [Ref(0), Ref(1), None, [1, 1], [3, 3]]),
        Node("convolution", [Ref(0), Ref(1), None, [1, 1], [3, 3], [1, 1], False, [0, 0], 1]),
        Node("conv2d", [Ref(0), Ref(1), None, [1, 1], [-3, 3]]),
    ],
)
def test_no_kernel_covers_other_paddings(node):
    assert checked_sizes.kernel_covering(node) is None


@pytest.mark.parametrize(
    ("size", "bounded"),
    [
        (1, False),
        ([1, 1], False),
        ([7, 7], False),  # torchvision's VGG and AlexNet-style heads
        ([None, 4], False),  # None: the input's own size
        ([8, 8], False),
        ([9, 8], True),
        ([2**15, 2**15], True),
        ([Ref(3), 1], True),
    ],
)
def test_adaptive_pools_of_small_literal_sizes_run_unbounded(size, bounded):
    for op in ("adaptive_avg_pool2d", "adaptive_max_pool2d"):
        node = Node(op, [Ref(0), size])
        assert checked_sizes.needs_bound(node) is bounded
        fn = support.node_callable(node, {})
        assert (getattr(fn, "bounds", None) is not None) is bounded


def test_an_empty_non_batch_dimension_is_refused_by_the_pool():
    # the premise of the exemption: a pool never makes elements from an empty row
    for op, x in (
        (torch._C._nn.adaptive_avg_pool2d, torch.empty(4, 3, 0, 5)),
        (torch._C._nn.adaptive_avg_pool3d, torch.empty(4, 3, 2, 0, 5)),
        (torch.adaptive_avg_pool1d, torch.empty(4, 3, 0)),
    ):
        with pytest.raises(RuntimeError, match="non-zero size"):
            op(x, 8)


class Padded(nn.Module):
    def __init__(self, k: int = 7, padding: int = 3, dilation: int = 1):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, k, padding=padding, dilation=dilation)

    def forward(self, x):
        return torch.relu(self.conv(x))


class Counted:
    """Counts the calls of checked_sizes' key (the bound's per-call work)."""

    def __init__(self, monkeypatch):
        self.calls = 0
        real = checked_sizes._key

        def key(args):
            self.calls += 1
            return real(args)

        monkeypatch.setattr(checked_sizes, "_key", key)


def _loaded(net, x, tmp_path):
    path = tmp_path / "net.tb"
    tracebridge.trace(net, x).save(path)
    return tracebridge.load(path)


@pytest.mark.parametrize("grad", [False, True])
def test_a_covered_padding_runs_without_the_key(tmp_path, monkeypatch, grad):
    torch.manual_seed(0)
    net = Padded().eval()
    x = torch.randn(1, 2, 9, 9)
    loaded = _loaded(net, x, tmp_path)
    counted = Counted(monkeypatch)
    for shape in ((1, 2, 9, 9), (2, 2, 5, 12), (1, 2, 1, 1)):
        y = torch.randn(shape)
        with torch.set_grad_enabled(grad):
            assert torch.equal(loaded(y), net(y))
    assert counted.calls == 0


def test_a_smaller_kernel_put_in_after_load_goes_through_the_bound(tmp_path, monkeypatch):
    torch.manual_seed(0)
    net = Padded().eval()
    x = torch.randn(1, 2, 9, 9)
    loaded = _loaded(net, x, tmp_path)
    counted = Counted(monkeypatch)
    with torch.no_grad():
        assert torch.equal(loaded(x), net(x))
    assert counted.calls == 0
    small = torch.randn(4, 2, 3, 3)
    net.conv.weight = nn.Parameter(small.clone())
    loaded.conv.weight = nn.Parameter(small.clone())
    with torch.no_grad():
        assert torch.equal(loaded(x), net(x))  # padding 3 on a 3x3 kernel: an 11x11 output
    assert counted.calls == 1


def test_a_crafted_padding_is_refused_where_the_kernel_does_not_cover_it(tmp_path):
    # padding and dilation 2**20 on a 3x3 kernel: an output the input's size, as eager's
    torch.manual_seed(0)
    net = Padded(k=3, padding=2**20, dilation=2**20).eval()
    x = torch.randn(1, 2, 5, 5)
    loaded = _loaded(net, x, tmp_path)
    with torch.no_grad():
        assert torch.equal(loaded(x), net(x))
        # the same padding with a 1x1 kernel asks for (5 + 2**21)**2 elements a channel
        loaded.conv.weight = nn.Parameter(torch.randn(4, 2, 1, 1))
        with pytest.raises(TraceError, match="more than the limit"):
            loaded(x)
        # a 3x3 kernel again: covered, and eager's result
        w, b = torch.randn(4, 2, 3, 3), loaded.conv.bias.detach()
        loaded.conv.weight = nn.Parameter(w.clone())
        expected = torch.conv2d(x, w, b, 1, 2**20, 2**20).relu()
        assert torch.equal(loaded(x), expected)


def test_a_weight_of_the_callers_is_tested_on_every_call(tmp_path):
    class Functional(nn.Module):
        def forward(self, x, w):
            return torch.nn.functional.conv2d(x, w, None, 1, 3)

    x, w = torch.randn(1, 2, 6, 6), torch.randn(4, 2, 7, 7)
    loaded = _loaded(Functional(), (x, w), tmp_path)
    with torch.no_grad():
        assert torch.equal(loaded(x, w), Functional()(x, w))
        small = torch.randn(4, 2, 1, 1)  # padding 3 on a 1x1 kernel: 12x12, bounded
        assert torch.equal(loaded(x, small), Functional()(x, small))


def test_a_covered_padding_of_a_subclass_weight_goes_through_the_bound(monkeypatch):
    class Sub(torch.Tensor):
        pass

    fn = checked_sizes.bounded("conv2d", torch.conv2d, (7, 7))
    counted = Counted(monkeypatch)
    x = torch.randn(1, 2, 9, 9)
    w = torch.randn(4, 2, 7, 7)
    assert torch.equal(fn(x, w, None, 1, 3), torch.conv2d(x, w, None, 1, 3))
    assert counted.calls == 0
    out = fn(x, w.as_subclass(Sub), None, 1, 3)
    assert counted.calls == 1
    assert torch.equal(out.as_subclass(torch.Tensor), torch.conv2d(x, w, None, 1, 3))
    # a weight given by keyword, and one of another rank, are bounded too
    assert torch.equal(fn(x, weight=w, padding=3), torch.conv2d(x, w, None, 1, 3))
    assert counted.calls == 1
    with pytest.raises(RuntimeError):
        fn(x, torch.randn(4, 2, 7), None, 1, 3)
    assert counted.calls == 2


class Positional(nn.Module):
    """A padded 1-d convolution (wav2vec2's positional one: kernel 19, padding 9) and a
    3-d one whose padding only some of its kernel's extents cover."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 4, 19, padding=9, groups=2)
        self.deep = nn.Conv3d(2, 2, (3, 5, 7), padding=(1, 2, 3))

    def forward(self, x, v):
        return torch.nn.functional.gelu(self.conv(x)), self.deep(v)


def _frames_from(module_file: str, fn) -> int:
    """The Python frames of ``module_file`` that ``fn()`` runs."""
    import sys

    seen = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.endswith(module_file):
            seen.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return len(seen)


@pytest.mark.parametrize("grad", [False, True])
def test_a_covered_padding_is_tested_inline_in_loaded_code(tmp_path, grad):
    # the bounded function's first test, written into the generated code: no frame of
    # checked_sizes.py runs where the weight's kernel covers the padding, and eager's bits
    torch.manual_seed(0)
    net = Positional().eval()
    x, v = torch.randn(1, 4, 30), torch.randn(1, 2, 4, 5, 6)
    loaded = _loaded(net, (x, v), tmp_path)
    for shape in ((1, 4, 30), (2, 4, 7), (1, 4, 1)):
        y = torch.randn(shape)
        with torch.set_grad_enabled(grad):
            expected = net(y, v)
            loaded(y, v)
            assert _frames_from("checked_sizes.py", lambda y=y: loaded(y, v)) == 0
            got = loaded(y, v)
        assert all(torch.equal(a, b) for a, b in zip(got, expected))


def test_an_uncovering_weight_after_load_is_bounded_inline_code_or_not(tmp_path, monkeypatch):
    # a smaller kernel (each extent of the 3-d one in turn) or a weight of another rank,
    # put in after load, takes the bounded call: its key, then eager's result or error
    torch.manual_seed(0)
    net = Positional().eval()
    x, v = torch.randn(1, 4, 30), torch.randn(1, 2, 4, 5, 6)
    loaded = _loaded(net, (x, v), tmp_path)
    counted = Counted(monkeypatch)
    with torch.no_grad():
        loaded(x, v)
        assert counted.calls == 0
        for k, kernel in enumerate([(2, 5, 7), (3, 4, 7), (3, 5, 6)]):
            w = torch.randn(2, 2, *kernel)
            net.deep.weight = nn.Parameter(w.clone())
            loaded.deep.weight = nn.Parameter(w.clone())
            got = loaded(x, v)
            assert counted.calls == k + 1
            assert all(torch.equal(a, b) for a, b in zip(got, net(x, v)))
        loaded.conv.weight = nn.Parameter(torch.randn(4, 2, 19, 1))
        with pytest.raises(RuntimeError):
            loaded(x, v)
        assert counted.calls == 4


def test_keyword_keys_are_the_generic_keys():
    # the keywords' key, made without _key_of's frames where every value is plain, is the
    # key _key_of makes, so a size passed once is never taken for another
    small, other = torch.tensor(6), torch.ones(2, 3)
    for kwargs in (
        {"n": 12, "dim": 1},
        {"n": None, "dim": -1, "norm": "ortho"},
        {"mode": "constant", "value": 0.5, "flag": True, "dtype": torch.float32},
        {"n": small, "dim": 1},
        {"s": [small, 4], "dim": (0, 1)},
        {"weight": other},
        {},
    ):
        assert checked_sizes._kwargs_key(kwargs) == checked_sizes._key_of(tuple(kwargs.items()))
    assert checked_sizes._kwargs_key({"n": 12}) != checked_sizes._kwargs_key({"n": 13})
    assert checked_sizes._kwargs_key({"n": small}) != checked_sizes._kwargs_key({"n": 7})


def test_an_fft_length_by_keyword_is_bounded_on_each_new_length(monkeypatch):
    asked = []
    real = checked_sizes.result_bytes

    def result_bytes(op, args, kwargs):
        asked.append(kwargs.get("n"))
        return real(op, args, kwargs)

    monkeypatch.setattr(checked_sizes, "result_bytes", result_bytes)
    monkeypatch.setattr(checked_sizes, "UPPER_BOUNDS", {})  # each new key asks the shape function
    fn = checked_sizes.bounded("fft.rfft", torch.fft.rfft)
    x = torch.randn(2, 6)
    for n in (8, 8, 12, 8):
        assert torch.equal(fn(x, n=n, dim=1), torch.fft.rfft(x, n=n, dim=1))
    assert asked == [8, 12]
    with pytest.raises(checked_sizes.CheckFailed, match="more than the limit"):
        fn(x, n=2**40, dim=1)
    with pytest.raises(checked_sizes.CheckFailed, match="more than the limit"):
        fn(x, n=2**40, dim=1)  # a length refused is never kept
    assert asked == [8, 12, 2**40, 2**40]


def test_the_positional_key_of_int_sequences():
    # tuples and lists of ints are keyed as tuples of those ints; any other element
    # (a bool, a 0-d size tensor, a float) takes _key_of's key, as before
    x, small = torch.ones(2, 3), torch.tensor(6)
    key = checked_sizes._key((x, [1, 2], (3, 4), (), [], None, 5))
    assert key == (x.shape, x.dtype, (1, 2), (3, 4), (), (), None, 5)
    assert checked_sizes._key(([1, True],)) == ((1, True),)
    assert checked_sizes._key(([small, 2],)) == ((6, 2),)
    assert checked_sizes._key(((1.5, 2),)) == ((1.5, 2),)
    assert checked_sizes._key(([2, 3],)) != checked_sizes._key(([2, 4],))


@pytest.mark.parametrize("by_keyword", [False, True])
def test_a_length_given_as_a_0d_tensor_is_bounded_by_its_value(by_keyword):
    # an FFT's n as a 0-d integer tensor: the bound reads its value (as the kernel does),
    # and the key holds the value, so a long length after a short one is still refused
    fn = checked_sizes.bounded("fft.rfft", torch.fft.rfft)
    x = torch.randn(2, 6)

    def call(n):
        return fn(x, n=n) if by_keyword else fn(x, n)

    for n in (8, 12, 8):
        assert torch.equal(call(torch.tensor(n)), torch.fft.rfft(x, n))
    for _ in range(2):
        with pytest.raises(checked_sizes.CheckFailed, match="more than the limit"):
            call(torch.tensor(2**30))


def test_a_traced_length_computed_as_a_tensor_is_refused_past_the_limit(tmp_path):
    class Spectrum(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("n", torch.tensor(8))

        def forward(self, x, k):
            return torch.fft.rfft(x, (k.sum() * self.n).long())

    net, x = Spectrum(), torch.randn(2, 6)
    loaded = _loaded(net, (x, torch.ones(1)), tmp_path)
    assert torch.equal(loaded(x, torch.ones(1)), net(x, torch.ones(1)))
    assert torch.equal(loaded(x, torch.full((1,), 2.0)), net(x, torch.full((1,), 2.0)))
    with pytest.raises(TraceError, match="more than the limit"):
        loaded(x, torch.full((1,), 2.0**27))  # 2**30 points: 8 GiB, refused before the kernel
