"""Tracing sets the objects that existed before it aside from the garbage collector
(trace/capture.py ``old_objects_set_aside``) and leaves the collector as it found it."""

import gc
import weakref

import torch

import tracebridge


class Counts(torch.nn.Module):
    """Notes, while it runs, how many objects the collector has set aside."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3, 2)
        self.seen: list[int] = []

    def forward(self, x):
        self.seen.append(gc.get_freeze_count())
        return self.linear(x).relu()


def test_old_objects_are_set_aside_while_tracing_and_given_back():
    model = Counts()
    assert gc.get_freeze_count() == 0
    traced = tracebridge.trace(model, torch.randn(4, 3))
    assert gc.get_freeze_count() == 0  # given back
    assert gc.isenabled()
    x = torch.randn(5, 3)
    torch.testing.assert_close(traced(x), model.linear(x).relu())


def test_set_aside_during_the_recording():
    seen = []

    def f(x):
        seen.append(gc.get_freeze_count())
        return x * 2

    tracebridge.trace(f, torch.randn(3))
    assert seen and all(count > 0 for count in seen)
    assert gc.get_freeze_count() == 0


def test_a_process_that_froze_objects_keeps_them_frozen():
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0
        tracebridge.trace(Counts(), torch.randn(4, 3))
        assert gc.get_freeze_count() > frozen // 2  # not given back by the trace
    finally:
        gc.unfreeze()


def test_a_disabled_collector_stays_disabled():
    gc.disable()
    try:
        tracebridge.trace(Counts(), torch.randn(4, 3))
        assert not gc.isenabled()
        assert gc.get_freeze_count() == 0
    finally:
        gc.enable()


def test_garbage_made_while_tracing_is_still_collected():
    freed = []

    class Node:
        pass

    def cycle():
        node = Node()
        node.self = node  # a cycle only the collector frees
        return weakref.ref(node)

    def f(x):
        ref = cycle()
        gc.collect()
        freed.append(ref() is None)
        return x + 1

    tracebridge.trace(f, torch.randn(2))
    assert freed and all(freed)
