"""Safe saving: a unique temporary file beside the target, synced and renamed into place.
A kill mid-save, a failed save, concurrent saves from threads or processes, and a planted
link all leave one complete, loadable file."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import threading
import time

import pytest
import torch
import torch.nn as nn

import tracebridge


def _leftovers(folder) -> list[str]:
    return [n for n in os.listdir(folder) if n.endswith(".tmp")]


def _model(seed: int, width: int = 32) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 4)).eval()


def _check_one_of(path, models, width=32) -> int:
    x = torch.randn(3, width)
    got = tracebridge.load(path, verify=True)(x)
    matches = [i for i, m in enumerate(models) if torch.equal(got, m(x))]
    assert len(matches) == 1, "the file is none of the saved models"
    return matches[0]


def test_save_replaces_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "m.tb"
    a, b = _model(1), _model(2)
    x = torch.randn(2, 32)
    tracebridge.trace(a, x).save(path)
    tracebridge.trace(b, x).save(path)
    assert torch.equal(tracebridge.load(path)(x), b(x))
    assert _leftovers(tmp_path) == []
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_failed_save_keeps_the_old_file(tmp_path):
    path = tmp_path / "m.tb"
    x = torch.randn(2, 32)
    good = _model(1)
    tracebridge.trace(good, x).save(path)
    before = path.read_bytes()

    class Complex(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("c", torch.ones(2, dtype=torch.complex128))

        def forward(self, x):
            return x + self.c.real.sum()

    with pytest.raises(tracebridge.ArtifactError, match="complex128"):
        tracebridge.trace(Complex(), x).save(path)
    assert path.read_bytes() == before
    assert _leftovers(tmp_path) == []


def test_a_link_at_the_target_is_replaced_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    path = tmp_path / "m.tb"
    os.symlink(victim, path)
    tracebridge.trace(_model(1), torch.randn(2, 32)).save(path)
    assert victim.read_text() == "keep me"
    assert not os.path.islink(path)
    _check_one_of(path, [_model(1)])


def test_old_predictable_temporary_names_are_not_used(tmp_path):
    # Before: <path>.tmp<pid>. A link planted there made save write through it.
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    path = tmp_path / "m.tb"
    os.symlink(victim, f"{path}.tmp{os.getpid()}")
    tracebridge.trace(_model(1), torch.randn(2, 32)).save(path)
    assert victim.read_text() == "keep me"
    _check_one_of(path, [_model(1)])


def test_save_into_a_missing_folder_or_onto_a_folder_is_an_artifact_error(tmp_path):
    traced = tracebridge.trace(_model(1), torch.randn(2, 32))
    with pytest.raises(tracebridge.ArtifactError, match="does not exist"):
        traced.save(tmp_path / "nope" / "m.tb")
    with pytest.raises(tracebridge.ArtifactError, match="is a directory"):
        traced.save(tmp_path)


def test_concurrent_saves_from_threads_leave_one_complete_file(tmp_path):
    path = tmp_path / "m.tb"
    models = [_model(i) for i in range(8)]
    traced = [tracebridge.trace(m, torch.randn(2, 32)) for m in models]
    errors = []

    def save(t):
        try:
            for _ in range(3):
                t.save(path)
        except Exception as exc:  # pragma: no cover - the assertion below shows it
            errors.append(exc)

    threads = [threading.Thread(target=save, args=(t,)) for t in traced]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    _check_one_of(path, models)
    assert _leftovers(tmp_path) == []


def _save_forever(traced, path, started) -> None:
    started.set()
    while True:
        traced.save(path)


def _save_rounds(traced, path, rounds) -> None:
    for _ in range(rounds):
        traced.save(path)


# Note: the savers are forked from this process (torch already imported, the model already
# traced), so that each starts in milliseconds: the kill test needs many of them.
_FORK = multiprocessing.get_context("fork")


def test_concurrent_saves_from_processes_leave_one_complete_file(tmp_path):
    path = tmp_path / "m.tb"
    models = [_model(seed) for seed in range(4)]
    traced = [tracebridge.trace(m, torch.randn(2, 32)) for m in models]
    procs = [_FORK.Process(target=_save_rounds, args=(t, path, 5)) for t in traced]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=120)
        assert proc.exitcode == 0
    _check_one_of(path, models)
    assert _leftovers(tmp_path) == []


def test_killing_a_save_repeatedly_leaves_the_old_file_loadable(tmp_path):
    width = 1024  # 4 MiB of weights: long enough to be caught mid-write
    path = tmp_path / "m.tb"
    old, new = _model(100, width), _model(7, width)
    tracebridge.trace(old, torch.randn(2, width)).save(path)
    traced = tracebridge.trace(new, torch.randn(2, width))
    rng = random.Random(0)
    caught = 0
    for _ in range(10):
        started = _FORK.Event()
        proc = _FORK.Process(target=_save_forever, args=(traced, path, started))
        proc.start()
        assert started.wait(60)
        time.sleep(rng.uniform(0.0, 0.1))
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(timeout=60)
        assert proc.exitcode == -signal.SIGKILL
        _check_one_of(path, [old, new], width)
        caught += bool(_leftovers(tmp_path))
        for name in _leftovers(tmp_path):  # what a killed save leaves: never the target
            assert name.startswith(".m.tb.")
            os.unlink(tmp_path / name)
    assert caught, "no kill landed during a save"
