"""Packed sequences (op-set 6): ``nn.utils.rnn.pack_padded_sequence`` into a recurrent
layer and ``pad_packed_sequence`` back, as sequence models traced with torch.jit.trace use
them. Recorded as ``_pack_padded_sequence`` / ``_pad_packed_sequence`` (checked: the
kernels read rows by the lengths and batch sizes), right on other lengths and batch sizes
in both runtimes, and refused clearly on arguments the kernels would trust.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import tracebridge
from tracebridge.runtime import checked_ops

RUNTIMES = ("codegen", "interpreter")


# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


class PackedEncoder(nn.Module):
    def __init__(self, cell=nn.LSTM, total=True, **kwargs):
        super().__init__()
        self.rnn = cell(4, 6, batch_first=True, **kwargs)
        self.total = total

    def forward(self, x, lengths):
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, hidden = self.rnn(packed)
        h = hidden[0] if isinstance(hidden, tuple) else hidden
        total = x.shape[1] if self.total else None
        return pad_packed_sequence(out, batch_first=True, total_length=total)[0], h


CALLS = [
    (3, 5, [4, 5, 1]),
    (2, 6, [6, 2]),
    (4, 5, [2, 2, 2, 1]),  # every sequence shorter than the steps
    (1, 3, [3]),
]


@pytest.mark.parametrize(
    "module",
    [
        PackedEncoder(),
        PackedEncoder(nn.GRU, bidirectional=True),
        PackedEncoder(nn.LSTM, num_layers=2),
        PackedEncoder(nn.LSTM, total=False),  # padded to the longest sequence of the call
    ],
    ids=["lstm", "gru-bidirectional", "lstm-2-layers", "lstm-longest"],
)
def test_packed_sequences_are_right_on_other_lengths_and_batches(module, tmp_path):
    module.eval()
    example = (torch.randn(3, 5, 4), torch.tensor([5, 3, 2]))
    traced = tracebridge.trace(module, example)
    path = tmp_path / "packed.tb"
    traced.save(path)
    runs = [traced] + [tracebridge.load(path, runtime=rt) for rt in RUNTIMES]
    for batch, steps, lengths in CALLS:
        x, n = torch.randn(batch, steps, 4), torch.tensor(lengths)
        expected = module(x, n)
        for fn in runs:
            got = fn(x, n)
            assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(got, expected))


def test_packed_sequences_train_through_the_trace():
    module = PackedEncoder()
    traced = tracebridge.trace(module, (torch.randn(3, 5, 4), torch.tensor([5, 3, 2])))
    x, n = torch.randn(2, 4, 4), torch.tensor([3, 4])
    traced(x, n)[0].sum().backward()
    got = [p.grad.clone() for p in traced.parameters()]
    module.zero_grad()
    module(x, n)[0].sum().backward()
    assert all(torch.allclose(a, p.grad, atol=1e-6) for a, p in zip(got, module.parameters()))


def _data(rows=6):
    return torch.randn(rows, 3)


@pytest.mark.parametrize(
    "args, message",
    [
        ((torch.randn(3, 5, 4), torch.tensor([3, 5, 2]), True), "sorted in decreasing order"),
        ((torch.randn(3, 5, 4), torch.tensor([9, 3, 2]), True), "between 1 and the 5 steps"),
        ((torch.randn(3, 5, 4), torch.tensor([5, 3, 0]), True), "between 1 and the 5 steps"),
        ((torch.randn(3, 5, 4), torch.tensor([5, 3]), True), r"one length per sequence \(3\)"),
        ((torch.randn(3, 5, 4), torch.tensor([5.0, 3.0, 2.0]), True), "CPU int64 vector"),
        ((torch.randn(0, 5, 4), torch.tensor([], dtype=torch.long), True), "empty batch"),
        ((torch.randn(5), torch.tensor([5]), True), "at least 2-d"),
    ],
)
def test_pack_refuses_lengths_the_kernel_would_trust(args, message):
    with pytest.raises(checked_ops.CheckFailed, match=message):
        checked_ops.pack_padded_sequence(*args)


@pytest.mark.parametrize(
    "batch_sizes, total, message",
    [
        ([3, 2, 2], 3, "sum to the packed rows"),  # 7 rows claimed, 6 packed
        ([2, 3, 1], 3, "non-increasing"),
        ([3, 0, 3], 3, "positive"),
        ([3, 2, 1], 2, "at least the 3 steps"),
        ([3, 2, 1], 2**40, "would allocate"),
    ],
)
def test_pad_refuses_batch_sizes_the_kernel_would_trust(batch_sizes, total, message):
    with pytest.raises(checked_ops.CheckFailed, match=message):
        checked_ops.pad_packed_sequence(_data(), torch.tensor(batch_sizes), True, 0.0, total)


def test_the_checked_forms_give_the_kernels_results():
    x, lengths = torch.randn(3, 5, 4), torch.tensor([5, 3, 2])
    data, sizes = checked_ops.pack_padded_sequence(x, lengths, True)
    want = torch._pack_padded_sequence(x, lengths, True)
    assert torch.equal(data, want[0]) and torch.equal(sizes, want[1])
    padded = checked_ops.pad_packed_sequence(data, sizes, True, -1.0, 6)
    want = torch._pad_packed_sequence(data, sizes, True, -1.0, 6)
    assert torch.equal(padded[0], want[0]) and torch.equal(padded[1], want[1])


def test_counts_of_a_crafted_expanded_vector_are_checked_without_listing_them():
    """An expanded one-element vector of 2**25 batch sizes (8 bytes of storage): checked
    with tensor ops, refused for the bytes it would allocate, in well under a second."""
    import time

    sizes = torch.ones(1, dtype=torch.int64).expand(2**25)
    data = torch.zeros(2**25, 0)
    start = time.perf_counter()
    with pytest.raises(checked_ops.CheckFailed, match="would allocate"):
        # one step of 2**28 sequences of nothing: the lengths it returns are 2 GiB
        checked_ops.pad_packed_sequence(torch.zeros(2**28, 0), torch.tensor([2**28]), False, 0.0, 1)
    padded, lengths = checked_ops.pad_packed_sequence(data, sizes, False, 0.0, 2**25)
    assert padded.shape == (2**25, 1, 0) and lengths.tolist() == [2**25]  # valid: it runs
    assert time.perf_counter() - start < 10  # the point: no Python list of 2**25 ints
    with pytest.raises(checked_ops.CheckFailed, match="more entries than"):
        checked_ops.pad_packed_sequence(torch.zeros(3, 2), sizes, False, 0.0, 2**25)
