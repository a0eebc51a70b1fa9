"""Progress bars: on a terminal, quiet otherwise and when asked (python/tracebridge/progress.py)."""

from __future__ import annotations

import io
import time

import pytest
import torch

import tracebridge
from tracebridge import progress
from tracebridge.frontends.cli import main


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def no_delay(monkeypatch):
    monkeypatch.setattr(progress, "DELAY", 0.0)
    monkeypatch.delenv(progress.ENV, raising=False)


def test_when_a_bar_shows(monkeypatch):
    monkeypatch.delenv(progress.ENV, raising=False)
    assert progress.wanted(None, Terminal()) is True
    assert progress.wanted(None, io.StringIO()) is False  # not a terminal: quiet
    assert progress.wanted(False, Terminal()) is False
    assert progress.wanted(True, io.StringIO()) is True
    monkeypatch.setenv(progress.ENV, "0")
    assert progress.wanted(None, Terminal()) is False
    assert progress.wanted(True, io.StringIO()) is True  # the argument wins
    monkeypatch.setenv(progress.ENV, "1")
    assert progress.wanted(None, io.StringIO()) is True


def test_a_bar_draws_on_a_terminal_and_ends_with_its_line(no_delay):
    stream = Terminal()
    with progress.track("copying", total=4096, unit="B", stream=stream) as bar:
        progress.stage("first half")
        progress.advance(2048)
        time.sleep(0.3)
    out = stream.getvalue()
    assert "copying: first half" in out and "2.0 KiB/4.0 KiB" in out
    last = out.split("\r")[-1]
    assert out.endswith("\n") and "copying: done" in last
    assert "100%" in last and bar.done == 4096


def test_quick_steps_and_quiet_bars_draw_nothing(monkeypatch):
    monkeypatch.delenv(progress.ENV, raising=False)
    stream = Terminal()
    with progress.track("quick", total=1, stream=stream):  # done before the delay
        progress.advance(1)
    assert stream.getvalue() == ""
    monkeypatch.setattr(progress, "DELAY", 0.0)
    for kwargs in ({"progress": False}, {"stream": io.StringIO()}):
        with progress.track("quiet", total=1, **kwargs) as bar:
            time.sleep(0.05)
        assert not bar.shown
    monkeypatch.setenv(progress.ENV, "0")
    with progress.track("off", stream=stream) as bar:
        time.sleep(0.05)
    assert stream.getvalue() == "" and not bar.shown


def test_a_failed_step_says_so(no_delay):
    stream = Terminal()
    with pytest.raises(ValueError), progress.track("work", stream=stream):
        time.sleep(0.05)
        raise ValueError("boom")
    assert "work: failed" in stream.getvalue().split("\r")[-1]


def _slow(x):
    time.sleep(0.15)  # runs on every recording and check: long enough to draw
    return x * 2


def test_tracing_shows_its_stages(no_delay, capsys):
    tracebridge.trace(_slow, torch.rand(3), progress=True)
    err = capsys.readouterr().err
    assert "tracing _slow: recording" in err and "tracing _slow: checking" in err
    assert err.split("\r")[-1].startswith("\x1b[2Ktracing _slow: done")


def test_tracing_is_quiet_when_asked_or_not_on_a_terminal(no_delay, capsys, monkeypatch):
    tracebridge.trace(_slow, torch.rand(3), progress=False)
    tracebridge.trace(_slow, torch.rand(3))  # capsys's stderr is not a terminal
    monkeypatch.setenv(progress.ENV, "0")
    tracebridge.trace(_slow, torch.rand(3))
    assert capsys.readouterr().err == ""


def test_save_and_load_count_bytes(no_delay, capsys, tmp_path):
    net = torch.nn.Linear(256, 256)
    traced = tracebridge.trace(net, torch.rand(2, 256))
    path = tmp_path / "big.tb"
    traced.save(path, progress=True)
    tracebridge.load(path, progress=True, verify=True)
    lines = [line.split("\r\x1b[2K")[-1] for line in capsys.readouterr().err.split("\n")]
    state = 256 * 256 * 4 + 256 * 4
    assert lines[0].startswith("saving: done") and f"{state / 1024:.1f} KiB" in lines[0]
    assert lines[1].startswith("loading: done") and "100%" in lines[1]


def test_the_command_line_shows_progress_unless_asked_not_to(no_delay, capsys, tmp_path):
    path = tmp_path / "m.tb"
    tracebridge.trace(torch.nn.Linear(3, 2), torch.rand(1, 3)).save(path)
    assert main(["validate", str(path)]) == 0  # stderr is not a terminal here: quiet
    assert capsys.readouterr().err == ""
    progress_on = {"TRACEBRIDGE_PROGRESS": "1"}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in progress_on.items():
            mp.setenv(key, value)
        assert main(["validate", str(path)]) == 0
        assert "validating m.tb: done" in capsys.readouterr().err
        assert main(["validate", "--no-progress", str(path)]) == 0
        assert capsys.readouterr().err == ""
        assert main(["graph", str(path)]) == 0
        assert "drawing m.tb: done" in capsys.readouterr().err
