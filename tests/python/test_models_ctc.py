"""CTC losses (op-set 7): ``nn.CTCLoss`` / ``F.ctc_loss`` as speech models train with them
(torchaudio's and transformers' CTC heads). Recorded as ``ctc_loss``, run through a checked
implementation (its kernel reads the log-probabilities at the target labels without
checking them), right on other batch sizes, lengths and target widths in both runtimes and
after a save/load round trip, gradients included; and refused clearly, before the kernel,
on arguments the kernel would trust.
"""

from __future__ import annotations

import json
import zipfile

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import OpError
from tracebridge.ir import ops
from tracebridge.runtime import checked_ops

RUNTIMES = ("codegen", "interpreter")


# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


class SpeechCTC(nn.Module):
    """A strided conv front end, a classifier over characters, and the CTC loss over the
    frames it keeps (input lengths from the sizes, as torchaudio's recipes compute them)."""

    def __init__(self, classes: int = 6, reduction: str = "mean", concatenated: bool = False):
        super().__init__()
        self.conv = nn.Conv1d(4, 8, 3, stride=2, padding=1)
        self.head = nn.Linear(8, classes)
        self.ctc = nn.CTCLoss(blank=0, reduction=reduction, zero_infinity=True)
        self.concatenated = concatenated

    def forward(self, audio, targets, target_lengths):
        frames = self.conv(audio).transpose(1, 2)
        log_probs = self.head(frames).log_softmax(-1).transpose(0, 1)  # (T, N, C)
        lengths = torch.full((audio.shape[0],), log_probs.shape[0], dtype=torch.long)
        if self.concatenated:  # targets as one vector, the sequences one after another
            keep = torch.arange(targets.shape[1]) < target_lengths.unsqueeze(1)
            targets = targets[keep]
        return self.ctc(log_probs, targets, lengths, target_lengths)


def _batch(n, steps, width, seed=0):
    g = torch.Generator().manual_seed(seed)
    audio = torch.randn(n, 4, steps, generator=g)
    targets = torch.randint(1, 6, (n, width), generator=g)
    lengths = torch.randint(1, width + 1, (n,), generator=g)
    return audio, targets, lengths


CALLS = [(2, 16, 3), (5, 30, 6), (1, 12, 2), (4, 40, 1)]


@pytest.mark.parametrize(
    "module",
    [
        SpeechCTC(),
        SpeechCTC(reduction="sum"),
        SpeechCTC(reduction="none"),
        SpeechCTC(concatenated=True),
    ],
    ids=["mean", "sum", "none", "concatenated-targets"],
)
def test_ctc_loss_is_right_on_other_batches_and_lengths(module, tmp_path):
    traced = tracebridge.trace(module, _batch(3, 20, 4))
    assert "ctc_loss(" in str(traced.graph)
    traced.save(tmp_path / "ctc.tb")
    runs = [traced] + [tracebridge.load(tmp_path / "ctc.tb", runtime=rt) for rt in RUNTIMES]
    for i, call in enumerate(CALLS):
        args = _batch(*call, seed=i + 1)
        expected = module(*args)
        for fn in runs:
            assert torch.allclose(fn(*args), expected, atol=1e-5)


def test_ctc_loss_trains_through_the_trace():
    module = SpeechCTC()
    traced = tracebridge.trace(module, _batch(3, 20, 4))
    args = _batch(2, 24, 5, seed=3)
    traced(*args).backward()
    got = [p.grad.clone() for p in traced.parameters()]
    module.zero_grad()
    module(*args).backward()
    assert all(torch.allclose(a, p.grad, atol=1e-6) for a, p in zip(got, module.parameters()))


def test_unbatched_ctc_loss_and_lengths_as_lists():
    def loss(log_probs, targets):
        n = log_probs.shape[0]
        return torch.nn.functional.ctc_loss(log_probs, targets, [n], [targets.shape[0]])

    def batched(log_probs, targets):
        steps, width = log_probs.shape[0], targets.shape[0]
        return torch.nn.functional.ctc_loss(
            log_probs, targets, torch.tensor(steps), torch.tensor(width)
        )

    for fn in (loss, batched):
        traced = tracebridge.trace(fn, (torch.randn(10, 5).log_softmax(-1), torch.tensor([1, 2])))
        for steps, labels in [(12, [3, 1, 4]), (6, [2])]:
            lp, tg = torch.randn(steps, 5).log_softmax(-1), torch.tensor(labels)
            assert torch.allclose(traced(lp, tg), fn(lp, tg), atol=1e-6)


def _args(**change):
    steps, batch, classes, width = 6, 2, 5, 3
    args = {
        "log_probs": torch.randn(steps, batch, classes).log_softmax(2),
        "targets": torch.randint(1, classes, (batch, width)),
        "input_lengths": torch.full((batch,), steps),
        "target_lengths": torch.full((batch,), width),
        "blank": 0,
        "reduction": 1,
        "zero_infinity": False,
    }
    args.update(change)
    return list(args.values())


@pytest.mark.parametrize(
    "change, message",
    [
        ({"targets": torch.full((2, 3), 100000)}, r"target label is a class index in \[0, 5\)"),
        ({"targets": torch.full((2, 3), -5)}, r"target label is a class index"),
        ({"targets": torch.tensor([1, 2, 9, 1, 2, 3])}, "target label is a class index"),
        ({"targets": torch.tensor([1, 2])}, "add up to the 2 targets"),
        ({"targets": torch.ones(2, 3)}, "targets is an integer tensor"),
        ({"targets": torch.ones(2, 3, dtype=torch.bool)}, "targets is an integer tensor"),
        ({"targets": torch.ones(2, 3, dtype=torch.long, device="meta")}, "not the meta device"),
        ({"targets": torch.ones(3, 3, dtype=torch.long)}, r"one row per sequence \(2\)"),
        ({"input_lengths": torch.full((2,), 9)}, "between 0 and the 6 steps"),
        ({"input_lengths": torch.full((3,), 6)}, r"3 entries, one per sequence \(2\)"),
        ({"input_lengths": torch.full((2,), 6.0)}, "input_lengths must be integers"),
        ({"input_lengths": [6, 6.0]}, "list of ints or an integer tensor"),
        ({"input_lengths": torch.full((2,), 6, device="meta")}, "a vector of data"),
        ({"target_lengths": torch.full((2, 1), 3)}, "target_lengths is a vector"),
        ({"target_lengths": torch.full((2,), 4)}, "within the 3 columns"),
        ({"target_lengths": torch.full((2,), -1)}, "not negative"),
        ({"blank": 5}, "blank is a class index"),
        ({"reduction": 7}, "reduction is 0, 1 or 2"),
        ({"zero_infinity": 1}, "zero_infinity is a bool"),
        ({"log_probs": torch.ones(6, 2, 5, dtype=torch.long)}, "log_probs is a float tensor"),
    ],
)
def test_ctc_loss_refuses_arguments_the_kernel_would_trust(change, message):
    with pytest.raises(checked_ops.CheckFailed, match=message):
        checked_ops.ctc_loss(*_args(**change))


def test_narrow_integer_targets_run_as_pytorch_runs_them():
    args = _args(targets=torch.tensor([[1, 2, 3], [4, 1, 2]], dtype=torch.int16))
    assert torch.equal(checked_ops.ctc_loss(*args), torch.ctc_loss(*args))


def test_padding_past_the_target_lengths_is_not_read_so_not_checked():
    """Padding beyond each target's length (often -1) is never read by the kernel."""
    targets = torch.tensor([[1, 2, -1], [3, -1, -1]])
    args = _args(targets=targets, target_lengths=torch.tensor([2, 1]))
    assert torch.equal(checked_ops.ctc_loss(*args), torch.ctc_loss(*args))


def test_the_bytes_of_the_kernels_variables_are_bounded_before_it_runs():
    """A long target over many steps: batch x steps x (2 x longest + 1), refused before
    the kernel allocates it (expanded tensors: a few bytes of storage each)."""
    steps, batch, width = 2**14, 2**8, 2**10
    log_probs = torch.zeros(1, 1, 2).expand(steps, batch, 2)
    targets = torch.ones(1, 1, dtype=torch.long).expand(batch, width)
    with pytest.raises(checked_ops.CheckFailed, match="would allocate"):
        checked_ops.ctc_loss(
            log_probs, targets, torch.full((batch,), steps), torch.full((batch,), width), 0, 1
        )


def test_a_file_with_out_of_range_labels_fails_at_the_call_naming_the_node(tmp_path):
    traced = tracebridge.trace(SpeechCTC(), _batch(3, 20, 4))
    traced.save(tmp_path / "ctc.tb")
    for rt in RUNTIMES:
        loaded = tracebridge.load(tmp_path / "ctc.tb", runtime=rt)
        audio, targets, lengths = _batch(2, 16, 3)
        with pytest.raises(OpError, match="ctc_loss") as info:
            loaded(audio, targets + 50, lengths)
        assert "target label is a class index" in str(info.value)


def test_ctc_loss_is_op_set_7(tmp_path):
    info = ops.info("ctc_loss")
    assert "checked" in info.flags and ops.SINCE["ctc_loss"] == 7 <= ops.OPSET_VERSION
    assert info.enums == {"reduction": (0, 1, 2)}  # checked at load too
    traced = tracebridge.trace(SpeechCTC(), _batch(3, 20, 4))
    traced.save(tmp_path / "ctc.tb")
    with zipfile.ZipFile(tmp_path / "ctc.tb") as archive:
        assert json.loads(archive.read("program.json"))["opset_version"] == ops.OPSET_VERSION
