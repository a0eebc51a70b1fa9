"""Guards on the sizes of values nothing else needs are checked once per size key (issue
20, item 5; runtime/size_checks.py).

EnCodec's ``encode`` returns the codes, then compares the decoded audio's length with the
input's: a guard on the size of a whole decoder. The generated code checks such guards
once per key of sizes (and state versions) instead of computing the decoder on every
call; the results stay bit for bit the interpreter's (which runs every node), a guard
still refuses a size where eager takes another branch, and a check whose outcome data
could change stays inline.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.runtime import size_checks

from .graph_helpers import counting, loaded, same_bits


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


class EncodeThenCheck(nn.Module):
    """EnCodec's pattern: the decoder's output is read only for its length, and that
    length decides a branch (``2L + 2`` is a multiple of 4 only for odd ``L``)."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.Conv1d(1, 4, 3, padding=1)
        self.lstm = nn.LSTM(4, 4, batch_first=True)
        self.decoder = nn.ConvTranspose1d(4, 1, 4, stride=2)

    def forward(self, x):
        codes = self.encoder(x)
        hidden = self.lstm(codes.transpose(1, 2))[0].transpose(1, 2)
        audio = self.decoder(torch.relu(hidden))
        if audio.shape[-1] % 4 == 0:
            return codes * 2
        return codes


def _runners(traced) -> list:
    method = traced._methods["forward"]
    fn = method._function((True, torch.is_grad_enabled() is False))
    return [v for v in fn.__kwdefaults__.values() if isinstance(v, size_checks.SizeChecks)]


def _same_as_interpreter(fast, tmp_path, x):
    plain = tracebridge.load(tmp_path / "m.tb", runtime="interpreter")
    assert same_bits(fast(x), plain(x))


@pytest.mark.parametrize("grad", [False, True])
def test_a_decoder_read_only_for_its_size_runs_once_per_size(grad, tmp_path):
    torch.manual_seed(0)
    model = EncodeThenCheck().eval()
    traced = tracebridge.trace(model, torch.randn(1, 1, 6))
    fast = loaded(traced, tmp_path)
    with torch.set_grad_enabled(grad):
        fast(torch.randn(1, 1, 6))
        (runner,) = _runners(fast)
        calls = counting(runner)
        for length, seed in [(6, 1), (8, 2), (6, 3), (6, 4), (10, 5), (8, 6)]:
            x = torch.randn(1, 1, length, generator=torch.Generator().manual_seed(seed))
            _same_as_interpreter(fast, tmp_path, x)
            with torch.no_grad():
                assert same_bits(fast(x), model(x))
    # Sizes 8 and 10 were new keys (6 passed on the first call); repeats were not checked.
    assert [key[0].shape[-1] for key in calls] == [8, 10]
    code = fast._methods["forward"].no_grad_code if not grad else fast.code
    assert "size checks" in code
    assert "op_conv_transpose1d" not in code and "op_lstm" not in code


def test_the_guard_still_decides_where_eager_takes_the_other_branch(tmp_path):
    torch.manual_seed(0)
    model = EncodeThenCheck().eval()
    fast = loaded(tracebridge.trace(model, torch.randn(1, 1, 6)), tmp_path)
    with torch.no_grad():
        x = torch.randn(1, 1, 6)
        assert same_bits(fast(x), model(x))
        (runner,) = _runners(fast)
        calls = counting(runner)
        for _ in range(2):  # a refused key is never remembered: checked every time
            odd = torch.randn(1, 1, 5)
            # eager doubles at odd lengths: the size check refuses the trace's branch
            # there, and the call gets eager's result, not the traced branch's
            assert not torch.equal(model(odd), model.encoder(odd))
            assert same_bits(fast(odd), model(odd))
        assert [key[0].shape[-1] for key in calls] == [5, 5]
        assert {key[2][0][-1] for key in runner.passed} == {6}
        with tracebridge.guards_disabled():  # no checks at all: the traced branch
            odd = torch.ones(1, 1, 5)
            assert same_bits(fast(odd), model.encoder(odd))
