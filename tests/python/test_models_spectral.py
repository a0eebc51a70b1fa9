"""Short-time Fourier transforms in traced code (op-set 6): a spectrogram front end
(``torch.stft``, as torchaudio's ``Spectrogram`` computes it) and its inverse, recorded as
``stft`` / ``istft``, right on other signal lengths and batches in both runtimes; their
results bounded in bytes before the kernel runs (a file could ask for a tiny hop over a
long signal, or an ``istft`` ``length`` of any size)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.runtime import checked_ops

RUNTIMES = ("codegen", "interpreter")


# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


class Spectrogram(nn.Module):
    def __init__(self, n_fft=64, hop=16):
        super().__init__()
        self.n_fft, self.hop = n_fft, hop
        self.register_buffer("window", torch.hann_window(n_fft))

    def forward(self, wave):
        spec = torch.stft(
            wave, self.n_fft, self.hop, window=self.window, center=True, return_complex=True
        )
        return (spec.abs() ** 2 + 1e-6).log()


class RoundTrip(Spectrogram):
    def forward(self, wave):
        spec = torch.stft(wave, self.n_fft, self.hop, window=self.window, return_complex=True)
        return torch.istft(
            spec * 0.5, self.n_fft, self.hop, window=self.window, length=wave.shape[-1]
        )


@pytest.mark.parametrize("module", [Spectrogram(), RoundTrip()], ids=["stft", "istft"])
def test_spectral_front_ends_are_right_on_other_lengths(module, tmp_path):
    traced = tracebridge.trace(module, torch.randn(2, 400))
    path = tmp_path / "spec.tb"
    traced.save(path)
    runs = [traced] + [tracebridge.load(path, runtime=rt) for rt in RUNTIMES]
    for shape in [(2, 400), (3, 560), (1, 1000), (1, 250)]:
        wave = torch.randn(*shape)
        expected = module(wave)
        for fn in runs:
            assert torch.allclose(fn(wave), expected, atol=1e-5)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: checked_ops.stft(torch.randn(100), 16, 0, return_complex=True), "hop_length"),
        (lambda: checked_ops.stft(torch.randn(100), 0, return_complex=True), "n_fft"),
        (
            lambda: checked_ops.stft(
                torch.randn(1, 2**22), 2**20, 1, center=True, return_complex=True
            ),
            "would allocate",
        ),
        (lambda: checked_ops.stft(torch.randn(2, 2, 100), 16, return_complex=True), "1-d or 2-d"),
        (
            lambda: checked_ops.istft(
                torch.randn(9, 5, dtype=torch.complex64), 16, 4, length=2**40
            ),
            "would allocate",
        ),
        (
            lambda: checked_ops.istft(torch.randn(9, 5, dtype=torch.complex64), 16, 2**40),
            "would allocate",
        ),
        (
            lambda: checked_ops.istft(torch.randn(9, 5, dtype=torch.complex64), 16, 4, length=-1),
            "length",
        ),
    ],
)
def test_spectral_ops_refuse_what_would_allocate_without_bound(call, message):
    with pytest.raises(checked_ops.CheckFailed, match=message):
        call()


def test_the_checked_forms_give_the_kernels_results():
    wave, window = torch.randn(2, 300), torch.hann_window(32)
    spec = checked_ops.stft(wave, 32, 8, window=window, center=True, return_complex=True)
    assert torch.equal(spec, torch.stft(wave, 32, 8, window=window, return_complex=True))
    back = checked_ops.istft(spec, 32, 8, window=window, length=300)
    assert torch.equal(back, torch.istft(spec, 32, 8, window=window, length=300))


# --- broadcast_tensors (op-set 6): what F.mse_loss, F.l1_loss, F.huber_loss call --------------


@pytest.mark.parametrize(
    "loss",
    [
        torch.nn.functional.mse_loss,
        torch.nn.functional.l1_loss,
        torch.nn.functional.huber_loss,
        lambda a, b: torch.nn.functional.smooth_l1_loss(a, b, beta=0.5, reduction="none"),
        lambda a, b: torch.broadcast_tensors(a, b[:1])[1] * a,
        # torch.distributions' validation: _is_all_true / _is_any_true
        lambda a, b: a * torch._is_all_true(b > -100) + torch._is_any_true(b > 100),
    ],
)
def test_losses_that_broadcast_their_operands_trace(loss, tmp_path):
    traced = tracebridge.trace(loss, (torch.randn(3, 4), torch.randn(3, 4)))
    path = tmp_path / "loss.tb"
    traced.save(path)
    a, b = torch.randn(5, 4), torch.randn(5, 4)
    for rt in RUNTIMES:
        assert torch.equal(tracebridge.load(path, runtime=rt)(a, b), loss(a, b))


def test_broadcast_tensors_bounds_what_its_views_present():
    wide = torch.zeros(1, 2**16)
    tall = torch.zeros(2**16, 1)
    with pytest.raises(checked_ops.CheckFailed, match="would present 4294967296 elements"):
        checked_ops.broadcast_tensors([wide, tall])
    same = checked_ops.broadcast_tensors([torch.ones(3, 4), torch.ones(4)])
    assert [tuple(t.shape) for t in same] == [(3, 4), (3, 4)]
