"""Tracing leaves the Python state the model holds as it was (issue 20 item 4, prober19
F7): a deque, a Counter, a defaultdict, an attribute of a plain object the model holds
(one and two levels out), a class attribute of the module's class, a numpy array -- after
trace (every check option) and compile; the globals and closure variables of the traced
code as the recording, the user's one call, left them (check/kept_globals.py), named in a
warning. Where a call's results read such state, the trace is refused, not silently wrong
(check/repeated.py)."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.backends import compile as tb_compile

pytestmark = pytest.mark.usefixtures("quiet_warnings")

CALLS = 0
SEEN: list = []


def _make_bump():
    count = [0]

    def bump():
        count[0] += 1
        return count[0]

    return bump, count


BUMP, BUMPED = _make_bump()


class Inner:
    def __init__(self):
        self.count = 0


class Config:
    def __init__(self):
        self.count = 0
        self.inner = Inner()
        self.history = []


class Stateful(nn.Module):
    class_count = 0

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.recent = collections.deque(maxlen=3)
        self.hist = collections.Counter()
        self.by_size = collections.defaultdict(int)
        self.seen = set()
        self.cfg = Config()
        self.arr = np.zeros(2)

    def forward(self, x):
        global CALLS
        CALLS += 1
        SEEN.append(1)
        BUMP()
        self.recent.append(1)
        self.hist["k"] += 1
        self.by_size["calls"] += 1
        self.seen.add(len(self.seen))
        self.cfg.count += 1
        self.cfg.inner.count += 1
        self.cfg.history.append(1)
        type(self).class_count += 1
        self.arr += 1
        return self.lin(x)


def _state(model: Stateful) -> dict:
    return {
        "global": CALLS,
        "global list": len(SEEN),
        "closure": BUMPED[0],
        "deque": list(model.recent),
        "Counter": dict(model.hist),
        "defaultdict": dict(model.by_size),
        "set": set(model.seen),
        "object": model.cfg.count,
        "nested object": model.cfg.inner.count,
        "object's list": list(model.cfg.history),
        "class attribute": Stateful.class_count,
        "numpy array": model.arr.tolist(),
    }


ONE_CALL = {"global": 1, "global list": 1, "closure": 1}  # the recording, the user's call


def _reset():
    global CALLS
    CALLS = 0
    SEEN.clear()
    BUMPED[0] = 0
    Stateful.class_count = 0


OPTIONS = [
    {},
    {"check_trace": False},
    {"check_inputs": [(torch.ones(3, 2),), (torch.ones(5, 2),)]},
    {"respect_mode": True},
]


@pytest.mark.parametrize("options", OPTIONS, ids=["default", "nocheck", "check", "both"])
def test_trace_leaves_python_state_as_it_was(options):
    _reset()
    model = Stateful()
    before = _state(model)
    cfg, recent, arr = model.cfg, model.recent, model.arr
    traced = tracebridge.trace(model, torch.ones(1, 2), **options)
    assert _state(model) == {**before, **ONE_CALL}
    # the same objects, changed back in place
    assert model.cfg is cfg and model.recent is recent and model.arr is arr
    assert torch.allclose(traced(torch.ones(4, 2)), model.lin(torch.ones(4, 2)))


def test_the_globals_the_recording_changed_are_named():
    _reset()
    named = "changed 'CALLS', 'SEEN', 'a closure variable'"
    with pytest.warns(tracebridge.TracerWarning, match=named):
        tracebridge.trace(Stateful(), torch.ones(1, 2))


def test_compile_leaves_python_state_as_it_was():
    _reset()
    model = Stateful().eval()  # (compile returns a training model as it is)
    before = _state(model)
    tb_compile(model, (torch.ones(1, 2),), backend="reference")
    assert _state(model) == {**before, **ONE_CALL}


def test_an_eager_call_after_tracing_starts_from_the_users_state():
    _reset()
    model = Stateful()
    tracebridge.trace(model, torch.ones(1, 2))
    model(torch.ones(1, 2))
    assert model.cfg.count == 1 and Stateful.class_count == 1 and model.hist["k"] == 1
    assert model.arr.tolist() == [1.0, 1.0] and CALLS == 2 and BUMPED[0] == 2


class ReadsCounter(nn.Module):
    def __init__(self):
        super().__init__()
        self.hist = collections.Counter()

    def forward(self, x):
        self.hist["calls"] += 1
        return x * self.hist["calls"]


class ReadsDeque(nn.Module):
    def __init__(self):
        super().__init__()
        self.recent = collections.deque()

    def forward(self, x):
        self.recent.append(1)
        return x * len(self.recent)


class ReadsObject(nn.Module):
    def __init__(self):
        super().__init__()
        self.cfg = Config()

    def forward(self, x):
        self.cfg.inner.count += 1
        return x * self.cfg.inner.count


class ReadsClassAttribute(nn.Module):
    count = 0

    def forward(self, x):
        type(self).count += 1
        return x * type(self).count


class ReadsArray(nn.Module):
    def __init__(self):
        super().__init__()
        self.arr = np.zeros(1)

    def forward(self, x):
        self.arr += 1
        return x * float(self.arr[0])


@pytest.mark.parametrize(
    "cls", [ReadsCounter, ReadsDeque, ReadsObject, ReadsClassAttribute, ReadsArray]
)
def test_state_a_call_changes_and_its_results_read_is_refused(cls):
    """Put back after every run, such state would look constant to the check: the
    repeated-call check sees the change and refuses (eager gives 1, 2, 3...)."""
    ReadsClassAttribute.count = 0
    model = cls()
    with pytest.raises(tracebridge.TracingCheckError, match="Python attribute"):
        tracebridge.trace(model, torch.ones(2))
    ReadsClassAttribute.count = 0
    assert torch.equal(cls()(torch.ones(2)), torch.ones(2))  # the state as it was


class FrozenCount:
    """An object whose class refuses attribute writes: its __dict__ is written back."""

    __slots__ = ("__dict__",)

    def __setattr__(self, name, value):
        if name == "count" and "count" in vars(self):
            vars(self)[name] = value
            return
        raise AttributeError(name)


def test_an_object_that_refuses_setattr_is_still_put_back():
    class UsesFrozen(nn.Module):
        def __init__(self):
            super().__init__()
            self.frozen = FrozenCount()
            vars(self.frozen)["count"] = 0

        def forward(self, x):
            self.frozen.count += 1
            return x + 1

    model = UsesFrozen()
    tracebridge.trace(model, torch.ones(2))
    assert model.frozen.count == 0
