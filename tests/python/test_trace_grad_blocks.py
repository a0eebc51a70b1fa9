"""``torch.inference_mode()`` inside traced code is recorded as a block without autograd
(trace/patches.py), as ``torch.no_grad()`` is: its results do not require grad, in the
traced object and once loaded; and keywords of PyTorch's bindings that no op takes (``out=``,
``requires_grad=True``) are refused saying what to write instead."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import UnsupportedOpError

pytestmark = pytest.mark.usefixtures("quiet_warnings")


class InferenceBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        with torch.inference_mode():
            target = self.lin(x) * 2
        return self.lin(x) - target.clone(), target.clone()


class InferenceDecorated(nn.Linear):
    @torch.inference_mode()
    def forward(self, x):
        return super().forward(x).relu()


def _both(model, example, tmp_path):
    traced = tracebridge.trace(model, example)
    traced.save(tmp_path / "m.tb")
    return traced, tracebridge.load(tmp_path / "m.tb")


def test_an_inference_mode_block_gives_results_without_grad(tmp_path):
    model = InferenceBlock()
    for runner in _both(model, torch.rand(2, 4), tmp_path):
        x = torch.rand(5, 4)
        (diff, target), (want_diff, want_target) = runner(x), model(x)
        assert diff.requires_grad and not target.requires_grad
        assert not want_target.requires_grad
        torch.testing.assert_close(diff, want_diff)
        torch.testing.assert_close(target, want_target)
        # The caller's mode comes back after the block, whatever it was; no guard on it.
        with torch.no_grad():
            assert not runner(x)[0].requires_grad
        assert torch.is_grad_enabled()


def test_the_decorator_form_is_recorded_too(tmp_path):
    model = InferenceDecorated(4, 3)
    for runner in _both(model, torch.rand(2, 4), tmp_path):
        out = runner(torch.rand(3, 4))
        assert not out.requires_grad
        assert runner.guards == []


def test_inference_mode_false_records_no_switch():
    def f(x):
        with torch.inference_mode(False):
            return x * 2

    traced = tracebridge.trace(f, torch.rand(3, requires_grad=True))
    assert "set_grad_enabled" not in traced.graph
    assert traced(torch.rand(3, requires_grad=True)).requires_grad


def test_out_keyword_is_refused_with_what_to_write_instead():
    class RunningMax(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("peak", torch.zeros(4))

        def forward(self, x):
            torch.maximum(self.peak, x.amax(0), out=self.peak)
            return x / (self.peak + 1)

    class Resized(RunningMax):  # eager resizes an out of another shape: no copy does that
        def forward(self, x):
            torch.maximum(self.peak, x.amax(0), out=torch.empty(0))
            return x / (self.peak + 1)

    with pytest.raises(UnsupportedOpError, match=r"keyword 'out'.*dest\.copy_\(op\(\.\.\.\)\)"):
        tracebridge.trace(Resized(), torch.rand(3, 4))

    # An out of the result's shape and dtype is that copy (review 9; spectral norm's power
    # iteration writes its vectors so): recorded as the op and the copy.
    model, eager = RunningMax(), RunningMax()
    traced = tracebridge.trace(model, torch.zeros(3, 4))
    for _ in range(2):
        x = torch.rand(3, 4) * 3
        torch.testing.assert_close(traced(x), eager(x))
    torch.testing.assert_close(model.peak, eager.peak)

    class CopyInto(RunningMax):
        def forward(self, x):
            self.peak.copy_(torch.maximum(self.peak, x.amax(0)))  # what the message says
            return x / (self.peak + 1)

    model, eager = CopyInto(), CopyInto()
    traced = tracebridge.trace(model, torch.zeros(3, 4))
    for _ in range(2):
        x = torch.rand(3, 4) * 3
        torch.testing.assert_close(traced(x), eager(x))
    torch.testing.assert_close(model.peak, eager.peak)


def test_requires_grad_keyword_is_refused_with_what_to_write_instead():
    def f(x):
        w = torch.ones(4, requires_grad=True)
        return x * w

    with pytest.raises(UnsupportedOpError, match=r"keyword 'requires_grad'.*nn\.Parameter"):
        tracebridge.trace(f, torch.rand(4))


@pytest.mark.parametrize(
    "wrap", [nn.utils.spectral_norm, nn.utils.parametrizations.spectral_norm], ids=["old", "new"]
)
def test_spectral_norm_in_training_traces_and_updates_its_vectors_as_eager(wrap):
    # Review 9: its power iteration calls F.normalize(..., out=u), refused as out=, so a
    # spectral-normalised layer could not be traced in training mode.
    def make():
        torch.manual_seed(0)
        return nn.Sequential(wrap(nn.Linear(4, 4)), nn.ReLU()).train()

    model, eager = make(), make()
    traced = tracebridge.trace(model, torch.randn(3, 4))
    for seed in range(3):
        x = torch.randn(3, 4, generator=torch.Generator().manual_seed(seed))
        torch.testing.assert_close(traced(x), eager(x), rtol=0, atol=0)
    for (name, mine), (_, theirs) in zip(model.named_buffers(), eager.named_buffers()):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=0, msg=name)


def test_a_trace_made_under_inference_mode_serves_calls_with_autograd():
    """A number the code multiplies by is passed to the op as a tensor made once
    (runtime/scalars.py): made in inference mode, autograd refused to save it."""

    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(10, 4)

        def forward(self, ids):
            return self.emb(ids) * 2.0

    model = Scaled()
    ids = torch.tensor([[1, 2, 3]])
    with torch.inference_mode():
        traced = tracebridge.trace(model, ids)
    traced(ids).sum().backward()
    traced_grad = model.emb.weight.grad.clone()
    model.zero_grad()
    model(ids).sum().backward()
    assert torch.equal(traced_grad, model.emb.weight.grad)
