"""Patterns of the held-out sweep's tenth round (benchmarks/heldout_tenth.py) that tracebridge
failed on, reproduced by small stand-in modules (no transformers needed): the calls the trace
serves are right, and a call it cannot serve raises GuardError naming the model's line."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import tracebridge
from tracebridge.errors import GuardError

from .graph_helpers import line_of, loaded

# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


class BlockPadding(nn.Module):
    """Granite Speech's block attention (``modeling_granite_speech.py:198``): pad to whole
    blocks, and mask the padded block with ``torch.ones(..., dtype=bool)`` -- a Python type
    given as the dtype, as PyTorch allows."""

    def __init__(self, block: int = 4):
        super().__init__()
        self.block = block
        self.proj = nn.Linear(3, 3)

    def forward(self, x):
        length = x.shape[1]
        remainder = length % self.block
        x = F.pad(self.proj(x), (0, 0, 0, (self.block - remainder) % self.block))
        scores = x @ x.transpose(1, 2)
        keep = torch.ones(scores.shape[-1], dtype=bool, device=x.device)
        keep[length:] = False
        scores = scores.masked_fill(~keep, -1e4).to(float)
        return scores.softmax(-1)[:, :length]


@pytest.mark.parametrize("reload", [False, True])
def test_a_python_type_given_as_a_dtype_is_recorded_as_that_dtype(reload, tmp_path):
    torch.manual_seed(0)
    model = BlockPadding().eval()
    traced = tracebridge.trace(model, (torch.randn(2, 7, 3),))
    if reload:
        traced = loaded(traced, tmp_path)
    for length in (7, 5, 6):
        x = torch.randn(3, length, 3)
        got = traced(x)
        assert got.dtype is torch.float64  # ``.to(float)``, as eager reads it
        torch.testing.assert_close(got, model(x), rtol=0, atol=0)


class StepLoop(nn.Module):
    """Jamba's reference selective scan (``modeling_jamba.py:420``): ``C`` is transposed
    before a loop over ``range(seq_len)`` that reads ``C[:, index, :]`` at each step. The
    loop is unrolled and guarded; the views of ``C`` must not run before that guard."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        c = self.proj(x).transpose(1, 2).transpose(1, 2)
        state = torch.zeros(x.shape[0], 4)
        steps = []
        for index in range(x.shape[1]):
            state = state * 0.5 + c[:, index, :]
            steps.append(state.unsqueeze(-1))
        return torch.cat(steps, -1)


@pytest.mark.parametrize("reload", [False, True])
def test_views_of_an_unrolled_loop_do_not_run_before_its_guard(reload, tmp_path):
    torch.manual_seed(0)
    model = StepLoop().eval()
    with torch.no_grad():
        traced = tracebridge.trace(model, (torch.randn(2, 6, 4),))
        if reload:
            traced = loaded(traced, tmp_path)
        x = torch.randn(3, 6, 4)
        torch.testing.assert_close(traced(x), model(x), rtol=0, atol=0)
        line = line_of(StepLoop, "for index in range")
        for length in (4, 8):  # shorter: a view past the end; longer: steps left out
            with pytest.raises(GuardError, match=rf"(?s)unrolled a Python loop.*:{line}:"):
                traced(torch.randn(2, length, 4))


class FramesAttention(nn.Module):
    """Moonshine's encoder through transformers' SDPA path (``sdpa_attention.py:159``):
    strided convolutions make the frames, and ``is_causal = q_length > 1 and mask is None
    and is_causal`` is False for every length when ``is_causal`` is False."""

    def __init__(self, causal: bool):
        super().__init__()
        self.causal = causal
        self.conv = nn.Conv1d(1, 8, kernel_size=4, stride=4)

    def forward(self, audio, mask=None):
        h = self.conv(audio[:, None]).transpose(1, 2)
        q_length = h.shape[1]
        is_causal = self.causal
        is_causal = q_length > 1 and mask is None and is_causal
        return F.scaled_dot_product_attention(h, h, h, is_causal=is_causal)


@pytest.mark.parametrize("reload", [False, True])
def test_a_comparison_that_cannot_change_its_and_chain_is_not_guarded(reload, tmp_path):
    torch.manual_seed(0)
    model = FramesAttention(causal=False).eval()
    traced = tracebridge.trace(model, (torch.randn(2, 16),))
    if reload:
        traced = loaded(traced, tmp_path)
    for samples in (16, 4, 8):  # 4 samples: one frame, where the comparison is False
        x = torch.randn(3, samples)
        torch.testing.assert_close(traced(x), model(x), rtol=0, atol=0)


def test_a_comparison_that_decides_its_and_chain_stays_guarded():
    torch.manual_seed(0)
    model = FramesAttention(causal=True).eval()
    traced = tracebridge.trace(model, (torch.randn(2, 16),))
    x = torch.randn(3, 8)
    torch.testing.assert_close(traced(x), model(x), rtol=0, atol=0)
    line = line_of(FramesAttention, "is_causal = q_length > 1")
    with pytest.raises(GuardError, match=rf"(?s)> 1 is True.*:{line}:"):
        traced(torch.randn(2, 4))  # one frame: is_causal would be False


class KeptMasks(nn.Module):
    """A causal mask kept in the module's own dict by length, computed on a miss: a memo
    whatever the dict's name (the tenth round's "mask cached in module state")."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self._masks: dict[int, torch.Tensor] = {}

    def mask(self, n: int) -> torch.Tensor:
        if n not in self._masks:
            self._masks[n] = torch.triu(torch.full((n, n), float("-inf")), diagonal=1)
        return self._masks[n]

    def forward(self, x):
        scores = self.proj(x) @ x.transpose(1, 2) + self.mask(x.shape[1])
        return scores.softmax(-1) @ x


@pytest.mark.parametrize("reload", [False, True])
def test_a_dict_memoised_by_length_is_traced_through(reload, tmp_path):
    torch.manual_seed(0)
    model = KeptMasks().eval()
    model(torch.randn(1, 8, 4))  # an eager call first: the dict holds the example's mask
    before = dict(model._masks)
    traced = tracebridge.trace(model, (torch.randn(2, 8, 4),))
    assert model._masks.keys() == before.keys()  # no traced key left behind
    if reload:
        traced = loaded(traced, tmp_path)
    for length in (8, 5, 12):
        x = torch.randn(3, length, 4)
        torch.testing.assert_close(traced(x), model(x), rtol=0, atol=0)
