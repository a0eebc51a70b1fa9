"""One loaded module, many threads: each call gives what one thread alone gets."""

from __future__ import annotations

import threading

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import GuardError

THREADS = 8
RUNTIMES = ("codegen", "interpreter")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 5)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        y = y.mean(dim=(2, 3))
        if y.shape[0] > 1:  # a guard on the batch size (batch 1 is a specialisation)
            y = y * 2
        if x.max() < 100:  # a guard on the data that no specialisation covers
            y = y + 1
        return self.fc(y), y.shape[0]

    def encode(self, x):
        return self.conv(x).flatten(1)


def _run_together(fn, inputs: list) -> list:
    """Call ``fn`` on each input, all threads released at once; results (or errors)."""
    start = threading.Barrier(len(inputs))
    results: list = [None] * len(inputs)

    def work(i):
        start.wait()
        try:
            results[i] = fn(inputs[i])
        except Exception as e:  # noqa: BLE001 - compared below
            results[i] = e

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    return results


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    net = Net().eval()
    example = torch.rand(2, 3, 6, 6)
    traced = tracebridge.trace_module(net, {"forward": example, "encode": example})
    path = tmp_path_factory.mktemp("threads") / "net.tb"
    traced.save(path)
    return path


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_eight_threads_get_one_threads_results(saved, runtime):
    module = tracebridge.load(saved, runtime=runtime)  # first calls compile: concurrently
    inputs = [torch.rand(2 + i % 3, 3, 6 + i % 2, 6) for i in range(THREADS)]
    calls = [module if i % 2 else module.encode for i in range(THREADS)]
    got = _run_together(lambda i: calls[i](inputs[i]), list(range(THREADS)))
    alone = tracebridge.load(saved, runtime=runtime)
    for i in range(THREADS):
        want = (alone if i % 2 else alone.encode)(inputs[i])
        if isinstance(want, tuple):
            assert torch.equal(got[i][0], want[0])
            assert got[i][1] == want[1]
        else:
            assert torch.equal(got[i], want)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_many_rounds_under_contention(saved, runtime):
    module = tracebridge.load(saved, runtime=runtime)
    x = torch.rand(3, 3, 6, 6)
    want = module(x)[0]

    def hammer(_):
        return all(torch.equal(module(x)[0], want) for _ in range(20))

    assert all(r is True for r in _run_together(hammer, list(range(THREADS))))


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_guards_disabled_is_per_thread(saved, runtime):
    module = tracebridge.load(saved, runtime=runtime)
    one = torch.full((2, 3, 6, 6), 1000.0)  # breaks the guard on the data
    inside = threading.Event()
    checked = threading.Event()
    outcome: dict = {}

    def skipping():
        with tracebridge.guards_disabled():
            inside.set()
            checked.wait(30)
            outcome["skipping"] = module(one)

    def checking():
        inside.wait(30)
        try:
            module(one)
            outcome["checking"] = "no error"
        except GuardError as e:
            outcome["checking"] = e
        finally:
            checked.set()

    threads = [threading.Thread(target=skipping), threading.Thread(target=checking)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert isinstance(outcome["checking"], GuardError)
    assert isinstance(outcome["skipping"], tuple)  # guards off in that thread only
    with pytest.raises(GuardError):
        module(one)  # and off only inside the block


def test_first_calls_compile_once(saved, monkeypatch):
    """Threads racing on a method's first call share one generated function."""
    import builtins

    compiled = []
    real = builtins.compile

    def counting(source, filename, *args, **kwargs):
        if str(filename).startswith("<tracebridge"):
            compiled.append(filename)
        return real(source, filename, *args, **kwargs)

    monkeypatch.setattr(builtins, "compile", counting)
    module = tracebridge.load(saved)
    x = torch.rand(2, 3, 6, 6)
    results = _run_together(lambda _: module(x)[0], list(range(THREADS)))
    assert all(torch.equal(r, results[0]) for r in results)
    assert len(compiled) == 1
