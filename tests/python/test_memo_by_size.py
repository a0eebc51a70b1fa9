"""Values that only the input's sizes decide are computed once per size (issue 20, item 5).

A Hugging Face attention mask is built on every call from ``arange`` over the sequence
length, comparisons and broadcasts: the generated code computes such runs once per key of
sizes, devices and dtypes (runtime/memo.py), and gives the same results as eager at every
size, without ever handing out or writing into a kept tensor.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.runtime import memo

from .graph_helpers import counting

# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


class MaskFromSizes(nn.Module):
    """The pattern of transformers' masking_utils: index grids from sizes, then the mask."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x, keep):
        batch, length = x.shape[0], x.shape[1]
        q = torch.arange(length, device=x.device)[None, :, None]
        k = torch.arange(length, device=x.device)[None, None, :]
        causal = (k <= q).new_ones((), dtype=torch.bool) & (k <= q)
        b = torch.arange(batch, device=x.device)[:, None, None]
        mask = causal & keep.to(torch.bool)[b, k]
        scores = self.proj(x) @ self.proj(x).transpose(1, 2)
        return scores.masked_fill(~mask, -1e4).softmax(-1) @ x


def _inputs(batch, length, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, length, 4, generator=g)
    keep = (torch.rand(batch, length, generator=g) > 0.3).long()
    keep[:, 0] = 1
    return x, keep


def _memos(traced) -> list:
    method = traced._methods["forward"]
    fn = method._function((True, torch.is_grad_enabled() is False))
    return [v for v in fn.__kwdefaults__.values() if isinstance(v, memo.Memo)]


@pytest.mark.parametrize("reload", [False, True])
def test_a_mask_built_from_sizes_is_computed_once_per_size(reload, tmp_path):
    torch.manual_seed(0)
    model = MaskFromSizes().eval()
    traced = tracebridge.trace(model, _inputs(2, 5))
    if reload:
        traced.save(tmp_path / "m.tb")
        traced = tracebridge.load(tmp_path / "m.tb")
    assert "memoised by size" in traced.code
    with torch.no_grad():
        traced(*_inputs(2, 5))
        (runner,) = _memos(traced)
        calls = counting(runner)
        for batch, length, seed in [(2, 5, 1), (3, 7, 2), (2, 5, 3), (1, 1, 4), (3, 7, 5)]:
            x, keep = _inputs(batch, length, seed)
            torch.testing.assert_close(traced(x, keep), model(x, keep), rtol=0, atol=0)
    # Run again only for sizes not seen before: (batch, length) = (3, 7), then (1, 1).
    assert [sorted(k for k in key if type(k) is int) for key in calls] == [[3, 7], [1, 1]]
    assert runner.ops >= 5


def test_the_kept_values_are_made_again_in_inference_mode():
    model = MaskFromSizes().eval()
    traced = tracebridge.trace(model, _inputs(2, 5))
    x, keep = _inputs(2, 5, 1)
    with torch.inference_mode():
        traced(x, keep)
    x.requires_grad_(True)
    traced(x, keep).sum().backward()  # an inference tensor saved for backward would raise
    expected = x.grad.clone()
    x.grad = None
    model(x, keep).sum().backward()
    torch.testing.assert_close(x.grad, expected)


def test_a_few_sizes_are_kept():
    model = MaskFromSizes().eval()
    traced = tracebridge.trace(model, _inputs(1, 3))
    with torch.no_grad():
        for length in range(1, 3 * memo.KEEP):
            x, keep = _inputs(1, length, length)
            torch.testing.assert_close(traced(x, keep), model(x, keep), rtol=0, atol=0)
        (runner,) = _memos(traced)
    assert len(runner.cache) <= memo.KEEP


class WritesIntoGrid(nn.Module):
    def forward(self, x):
        grid = torch.arange(x.shape[0], device=x.device).float()[:, None]
        grid.add_(x[:1, :1])  # a write of the input's values: nothing is memoised
        return x + grid


class ReturnsGrid(nn.Module):
    def forward(self, x):
        grid = torch.arange(x.shape[0], device=x.device)[:, None] + 1
        return x * 2, grid.t()  # the caller gets a view: nothing is memoised


@pytest.mark.parametrize("cls", [WritesIntoGrid, ReturnsGrid])
def test_values_that_could_change_or_escape_are_not_kept(cls):
    model = cls()
    traced = tracebridge.trace(model, (torch.randn(3, 2),))
    assert "memoised by size" not in traced.code
    for rows in (3, 5, 3):
        x = torch.randn(rows, 2)
        got, want = traced(x), model(x)
        torch.testing.assert_close(got, want)
    if cls is ReturnsGrid:
        first = traced(torch.randn(3, 2))[1]
        first.add_(100)
        torch.testing.assert_close(traced(torch.randn(3, 2))[1], model(torch.randn(3, 2))[1])


class OnesOfInputDtype(nn.Module):
    def forward(self, x):
        scale = torch.ones(x.shape[-1], dtype=x.dtype, device=x.device).cumsum(0)
        return x * scale


def test_the_key_holds_the_dtype():
    """Reading ``x.dtype`` records a guard (a call in float64 raises GuardError); with the
    guards off, the memo still keys on the dtype, so a value kept for float32 never serves
    a float64 call."""
    model = OnesOfInputDtype()
    traced = tracebridge.trace(model, (torch.randn(2, 3),))
    assert "memoised by size" in traced.code
    with pytest.raises(tracebridge.GuardError, match="x.dtype == torch.float32"):
        traced(torch.randn(2, 3, dtype=torch.float64))
    with tracebridge.guards_disabled():
        for dtype in (torch.float32, torch.float64, torch.float32):
            x = torch.randn(2, 3, dtype=dtype)
            out = traced(x)
            assert out.dtype == dtype
            torch.testing.assert_close(out, model(x), rtol=0, atol=0)


class Rotary(nn.Module):
    """Llama's rotary embedding: positions from the length, times a state buffer, in a
    no-grad block; ``scale`` is a parameter, to show gradients reach state."""

    def __init__(self):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, 4, 2).float() / 4))
        self.scale = nn.Parameter(torch.tensor(1.5))

    def forward(self, x):
        positions = torch.arange(x.shape[1], device=x.device)[None, :]
        with torch.no_grad():
            freqs = positions[..., None].float() * self.inv_freq.to(x.device, x.dtype)
            emb = torch.cat((freqs, freqs), dim=-1)
            cos, sin = emb.cos(), emb.sin()
        grid = torch.arange(x.shape[1], device=x.device).float()[:, None] * self.scale
        return x * cos + x.flip(-1) * sin + grid.sum()


def test_state_in_a_memoised_block_is_followed():
    torch.manual_seed(0)
    model = Rotary()
    traced = tracebridge.trace(model, (torch.randn(1, 5, 4),))
    assert "memoised by size" in traced.code
    x = torch.randn(1, 5, 4)
    with torch.no_grad():
        torch.testing.assert_close(traced(x), model(x), rtol=0, atol=0)
        model.inv_freq.mul_(2)  # in place: the version moves
        torch.testing.assert_close(traced(x), model(x), rtol=0, atol=0)
        model.load_state_dict({"inv_freq": torch.ones(2), "scale": torch.tensor(0.5)})
        torch.testing.assert_close(traced(x), model(x), rtol=0, atol=0)
        traced.inv_freq = torch.full((2,), 0.25)  # a new tensor in the slot
        model.inv_freq = traced.inv_freq
        torch.testing.assert_close(traced(x), model(x), rtol=0, atol=0)
    traced(x).sum().backward()  # the parameter's op is not kept: its gradient arrives
    expected = model.scale.grad.clone()
    model.scale.grad = None
    model(x).sum().backward()
    torch.testing.assert_close(model.scale.grad, expected)


class CausalMask(nn.Module):
    def forward(self, x):
        n = x.shape[-1]
        mask = torch.ones(n, n, device=x.device).tril().bool()
        return x.unsqueeze(-2).expand(-1, n, n).masked_fill(~mask, 0.0)


def test_large_values_are_not_kept(monkeypatch):
    model = CausalMask()
    traced = tracebridge.trace(model, (torch.randn(2, 4),))
    assert "memoised by size" in traced.code
    monkeypatch.setattr(memo, "KEEP_BYTES", 40)  # a 6 x 6 bool mask (36 bytes) fits, 7 x 7 not
    with torch.no_grad():
        for n in (3, 5, 6, 7, 8, 3):
            x = torch.randn(2, n)
            torch.testing.assert_close(traced(x), model(x), rtol=0, atol=0)
            (runner,) = _memos(traced)
            assert runner.bytes <= 40
            assert runner.bytes == sum(size for _, size in runner.cache.values())
    assert len(runner.cache) == 1  # 3 x 3 (9 bytes) pushed out 6 x 6 (36) to fit


class WritesStateAfterReading(nn.Module):
    """A sized value reads a buffer that the graph then updates in place: the value must be
    made before the update, where eager makes it."""

    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(3))

    def forward(self, x):
        grid = torch.arange(x.shape[0], device=x.device).float()[:, None] + self.count
        self.count.add_(1)
        return x + grid


def test_a_memoised_block_does_not_move_past_a_write_to_its_state():
    model, twin = WritesStateAfterReading(), WritesStateAfterReading()
    traced = tracebridge.trace(model, (torch.randn(2, 3),), check_trace=False)
    model.count.zero_()  # the trace ran the model once
    with torch.no_grad():
        for rows in (2, 4, 2, 2):
            x = torch.randn(rows, 3)
            torch.testing.assert_close(traced(x), twin(x), rtol=0, atol=0)
    torch.testing.assert_close(model.count, twin.count)


class MaskAndWrittenProbs(nn.Module):
    """Bigbird's pattern (a zeros tensor from sizes, then slice writes) beside a causal
    mask from sizes; retinanet's ``fill_`` and raft's ``relu_`` write the same way."""

    def __init__(self, write: str):
        super().__init__()
        self.write = write

    def forward(self, x):
        batch, length = x.shape[0], x.shape[1]
        q = torch.arange(length, device=x.device)[:, None]
        k = torch.arange(length, device=x.device)[None, :]
        mask = (k <= q) & (k >= 0)
        probs = torch.zeros(batch, length, length, device=x.device)
        if self.write == "slices":
            probs[:, :, 0] = 1.0
            probs[:, 1:, :1] += 2.0  # accumulates if a kept tensor were written again
        elif self.write == "input":
            probs[:, :, 0] = x[:, :, 0]  # the input's values: made on every call
            probs[:, 1:, :1] += 2.0
        elif self.write == "fill":
            probs[:, :1].fill_(3.0)
            probs.add_(1.0)
        else:
            probs = probs - torch.arange(length, device=x.device).float()
            probs.relu_()
            probs.add_(0.5)
        scores = (x @ x.transpose(1, 2)).masked_fill(~mask, -1e4).softmax(-1)
        return scores + probs


@pytest.mark.parametrize("write", ["slices", "fill", "relu", "input"])
def test_a_write_into_one_sized_value_keeps_the_others_memoised(write):
    model = MaskAndWrittenProbs(write)
    traced = tracebridge.trace(model, (torch.randn(2, 5, 3),))
    assert "memoised by size" in traced.code  # the mask still is
    with torch.no_grad():
        traced(torch.randn(2, 5, 3))
        runners = _memos(traced)
        assert runners
        calls = [counting(r) for r in runners]
        for batch, length in [(2, 5), (2, 5), (3, 7), (1, 1), (3, 7), (2, 5)]:
            x = torch.randn(batch, length, 3)
            torch.testing.assert_close(traced(x), model(x), rtol=0, atol=0)
    # Each block runs once per new size (the first call, then (3, 7) and (1, 1)).
    assert sum(len(c) for c in calls) <= 2 * len(runners)
    # A write of the input's values: the written tensor is made inline, on every call (a
    # memoised node is not in the printed code). A write of values the block makes itself
    # (literals, the sizes' grids) is run in the block, once per size, with the tensor it
    # writes: the equal results above, on sizes seen before, say it is not written again.
    inline = "# zeros, test_memo_by_size.py" in traced.code
    assert inline == (write == "input")
    if write != "input":
        assert "setitem" not in traced.code and "_, test_memo_by_size.py" not in traced.code


class StateWrittenAfterItsCheck(nn.Module):
    """An LSTM-like state made from sizes, checked, then written with the input's data;
    a mask beside it is still kept."""

    def forward(self, x):
        n = x.shape[0]
        grid = torch.arange(n, device=x.device)[:, None] * torch.ones(1, 4, device=x.device)
        h = torch.zeros(n, 4, device=x.device)
        torch._assert(h.shape[0] == n, "state of the wrong size")
        h.add_(x)
        return h * grid


def test_a_written_value_with_a_guard_on_its_size_is_made_on_every_call():
    model = StateWrittenAfterItsCheck()
    traced = tracebridge.trace(model, (torch.randn(3, 4),))
    assert "memoised by size" in traced.code  # the grid
    assert "# zeros, test_memo_by_size.py" in traced.code  # the written state: inline
    with torch.no_grad():
        for rows in (3, 3, 5, 1, 5, 3):
            x = torch.randn(rows, 4)
            torch.testing.assert_close(traced(x), model(x), rtol=0, atol=0)


class BandFromNewOnes(nn.Module):
    """Longformer's ``_mask_invalid_locations``: a band mask made with ``new_ones`` of the
    scores (their dtype and device, never their values), flipped, expanded to a slice of
    the scores' size, where a buffer scales what it keeps."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.register_buffer("scale", torch.tensor(2.0))

    def forward(self, x):
        scores = self.proj(x) @ x.transpose(1, 2)
        n = scores.shape[-1]
        band = scores.new_ones(n, n).tril().flip(dims=[0])[None] * self.scale
        return torch.where(band.expand(scores.size()).bool(), scores * band, scores - 1)


def _meta_memos(traced) -> list:
    return [m for m in _memos(traced) if m.meta]


def test_a_tensor_read_for_its_dtype_and_device_alone_keys_a_memo_by_them(tmp_path):
    torch.manual_seed(0)
    model = BandFromNewOnes().eval()
    traced = tracebridge.trace(model, torch.randn(1, 5, 4))
    traced.save(tmp_path / "m.tb")
    loaded = tracebridge.load(tmp_path / "m.tb")
    with torch.no_grad():
        loaded(torch.randn(1, 5, 4))
        (runner,) = _meta_memos(loaded)
        calls = counting(runner)
        for length, dtype in [(5, None), (5, None), (3, None), (5, torch.float64), (5, None)]:
            x = torch.randn(1, length, 4)
            if dtype is not None:  # scores of another dtype: the band is made again in it
                loaded.double()
                model.double()
                x = x.double()
            got, expected = loaded(x), model(x)
            assert got.dtype == expected.dtype and torch.equal(got, expected)
            if dtype is not None:
                loaded.float()
                model.float()
        # new keys: length 3, then float64, then float32 again with the buffer that
        # .float() made (a new tensor: state keys by identity)
        assert [key[0].dtype for key in calls] == [torch.float32, torch.float64, torch.float32]
        assert [key[0].shape[-1] for key in calls] == [3, 5, 5]
        x = torch.randn(1, 5, 4)
        assert torch.equal(loaded(x), model(x))
        assert len(calls) == 3  # the same dtype, device and sizes: kept
        # the state changes after load: the band follows the buffer
        for owner in (loaded, model):
            owner.scale.fill_(3.0)
        assert torch.equal(loaded(x), model(x))
        assert len(calls) == 4


class Marked(torch.Tensor):
    """A tensor subclass (its ops' results are of it too)."""


def test_a_subclass_read_for_its_metadata_runs_its_own_ops(tmp_path):
    torch.manual_seed(0)
    model = BandFromNewOnes().eval()
    traced = tracebridge.trace(model, torch.randn(1, 5, 4))
    with torch.no_grad():
        traced(torch.randn(1, 5, 4))
        (runner,) = _meta_memos(traced)
        x = torch.randn(1, 5, 4).as_subclass(Marked)
        got, expected = traced(x), model(x)
        assert type(got) is type(expected) is Marked
        assert torch.equal(got.as_subclass(torch.Tensor), expected.as_subclass(torch.Tensor))
        assert len(runner.cache) == 1  # nothing kept for the subclass


class RampLike(nn.Module):
    """A ramp made with ``zeros_like`` of the input (its sizes, strides, dtype and device,
    never its values), then scaled by a buffer."""

    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.tensor(0.5))

    def forward(self, x):
        ramp = (torch.zeros_like(x) + 1).cumsum(-1) * self.scale
        return x * ramp


def test_a_tensor_read_for_its_sizes_and_strides_keys_a_memo_by_them(tmp_path):
    from .graph_helpers import same_bits

    model = RampLike().eval()
    traced = tracebridge.trace(model, torch.randn(3, 4))
    traced.save(tmp_path / "m.tb")
    loaded = tracebridge.load(tmp_path / "m.tb")
    with torch.no_grad():
        loaded(torch.randn(3, 4))
        (runner,) = _meta_memos(loaded)
        assert runner.like
        calls = counting(runner)
        rows = torch.randn(3, 4)
        columns = torch.randn(4, 3).t()  # the same sizes, other strides: another ramp
        for x in (rows, columns, rows, columns, torch.randn(2, 4)):
            assert same_bits(loaded(x), model(x))
        assert [key[0].stride() for key in calls] == [(1, 3), (4, 1)]
        for owner in (loaded, model):  # the state changes after load: followed
            owner.scale.fill_(2.0)
        assert same_bits(loaded(rows), model(rows))
        assert len(calls) == 3


class ResizedAfter(nn.Module):
    """A tensor resized in place after ``zeros_like`` read its sizes, before the ramp made
    from them is first read: a block moved there would read the new sizes."""

    def forward(self, x):
        y = x * 2
        ramp = (torch.zeros_like(y) + 1).cumsum(0)
        y.unsqueeze_(0)
        return ramp * 3 + y


def test_no_tensor_keys_a_memo_by_its_metadata_where_a_resize_in_place_could_move_them():
    from .graph_helpers import same_bits

    model = ResizedAfter().eval()
    traced = tracebridge.trace(model, torch.randn(3, 4))
    with torch.no_grad():
        for x in (torch.randn(3, 4), torch.randn(3, 4), torch.randn(2, 5)):
            assert same_bits(traced(x), model(x))
        assert not _meta_memos(traced)


class InterleavedRotary(nn.Module):
    """Qwen3.5's interleaved rotary table: frequencies from positions and a buffer, one
    section written into another by strided slices, then doubled and read."""

    def __init__(self):
        super().__init__()
        self.register_buffer("inv_freq", torch.rand(6) + 0.1)

    def forward(self, x):
        positions = torch.arange(x.shape[1], device=x.device).float()
        freqs = positions[None, :, None] * self.inv_freq  # (1, T, 6)
        freqs = freqs.expand(3, -1, -1) * 1.0  # three sections, memory of its own
        table = freqs[0]
        table[..., 1::3] = freqs[1, ..., 1::3]
        table[..., 2::3] = freqs[2, ..., 2::3] * 2.0
        emb = torch.cat((table, table), dim=-1)
        return x * emb.cos() + x.flip(-1) * emb.sin()


def test_a_write_into_memory_the_block_made_is_run_once_per_size(tmp_path):
    torch.manual_seed(0)
    model = InterleavedRotary()
    traced = tracebridge.trace(model, (torch.randn(2, 5, 12),))
    traced.save(tmp_path / "m.tb")
    loaded = tracebridge.load(tmp_path / "m.tb")
    with torch.no_grad():
        assert "memoised by size" in loaded.code
        assert "setitem" not in loaded.code  # the writes run in the block
        loaded(torch.randn(2, 5, 12))
        (runner,) = _memos(loaded)
        calls = counting(runner)
        for batch, length in [(2, 5), (1, 7), (2, 5), (1, 7), (3, 1)]:
            x = torch.randn(batch, length, 12)
            torch.testing.assert_close(loaded(x), model(x), rtol=0, atol=0)
        assert len(calls) == 2  # lengths 7 and 1; batch is no key
        # The state changes after load: the block runs again, with the new buffer.
        x = torch.randn(2, 5, 12)
        loaded.inv_freq.mul_(3)
        model.inv_freq.mul_(3)
        torch.testing.assert_close(loaded(x), model(x), rtol=0, atol=0)
        loaded.load_state_dict({"inv_freq": torch.full((6,), 0.5)})
        model.load_state_dict({"inv_freq": torch.full((6,), 0.5)})
        torch.testing.assert_close(loaded(x), model(x), rtol=0, atol=0)
        assert len(calls) == 4
    x.requires_grad_(True)  # with autograd: the block's writes run as eager's
    loaded(x).sum().backward()
    expected = x.grad.clone()
    x.grad = None
    model(x).sum().backward()
    torch.testing.assert_close(x.grad, expected, rtol=0, atol=0)


class WritesIntoStateRows(nn.Module):
    """Rows of a buffer chosen by the input's size, written in place: the memory is the
    state's, not the block's, so every call writes it again, as eager does."""

    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.zeros(8, 2))

    def forward(self, x):
        rows = self.table[: x.shape[0]]
        rows.add_(1.0)
        return x + rows * torch.arange(x.shape[0], device=x.device)[:, None]


def test_a_write_into_a_view_of_state_runs_on_every_call():
    model, twin = WritesIntoStateRows(), WritesIntoStateRows()
    traced = tracebridge.trace(model, (torch.randn(3, 2),), check_trace=False)
    model.table.zero_()  # the trace ran the model once
    assert "Tensor.add_, test_memo_by_size.py" in traced.code
    with torch.no_grad():
        for rows in (3, 3, 5, 3):
            x = torch.randn(rows, 2)
            torch.testing.assert_close(traced(x), twin(x), rtol=0, atol=0)
    torch.testing.assert_close(model.table, twin.table, rtol=0, atol=0)


class ReadsBeforeWriting(nn.Module):
    """A grid from sizes read by the output's first term, then written: the reader
    outside stands before the write, so the write is not the block's."""

    def forward(self, x):
        grid = torch.arange(x.shape[0], device=x.device).float()[:, None] * 1.0
        first = x * grid
        grid.add_(2.0)
        return first + grid


def test_a_write_after_a_reader_outside_the_block_runs_on_every_call():
    model = ReadsBeforeWriting()
    traced = tracebridge.trace(model, (torch.randn(3, 2),))
    assert "Tensor.add_, test_memo_by_size.py" in traced.code
    with torch.no_grad():
        for rows in (3, 3, 4, 3):
            x = torch.randn(rows, 2)
            torch.testing.assert_close(traced(x), model(x), rtol=0, atol=0)
