"""Tracing leaves the Python state the code writes as the user's one call left it
(check/kept_globals.py): the check, the size-1 specialisations and the other training mode
run the code again, and must not leave their own writes in globals or closure cells."""

from __future__ import annotations

import collections

import pytest
import torch
from torch import nn
from torch.fx.immutable_collections import immutable_dict, immutable_list

import tracebridge
from tracebridge.check.kept_globals import KeptGlobals

pytestmark = pytest.mark.usefixtures("quiet_warnings")

CALLS = 0
SEEN: list = []
BY_SIZE: dict = {}
RECENT: collections.deque = collections.deque(maxlen=5)
TOTAL = torch.zeros(())
NOT_WRITTEN = 7


def _reset():
    global CALLS
    CALLS = 0
    SEEN.clear()
    BY_SIZE.clear()
    RECENT.clear()
    TOTAL.zero_()


def _count(n):
    """A helper the traced code calls: its global write is found through the call."""
    global CALLS
    CALLS += 1
    return n


def scale(x):
    _count(0)
    SEEN.append("scale")
    BY_SIZE[x.dtype] = BY_SIZE.get(x.dtype, 0) + 1
    RECENT.append("call")
    if x.shape[0] == 1:  # a size decision: a size-1 specialisation traces again
        return x * NOT_WRITTEN
    return x * 2


@pytest.mark.parametrize("check_trace", [True, False])
def test_a_traced_function_leaves_globals_as_one_call_does(check_trace):
    _reset()
    traced = tracebridge.trace(scale, torch.ones(3, 4), check_trace=check_trace)
    assert CALLS == 1
    assert SEEN == ["scale"] and {torch.float32: 1} == BY_SIZE and list(RECENT) == ["call"]
    assert torch.equal(traced(torch.ones(1, 4)), torch.full((1, 4), 7.0))


class Counting(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.5)  # another graph in the other mode: recorded too

    def forward(self, x):
        global CALLS
        CALLS += 1
        SEEN.append("forward")
        return self.drop(x) + 1


@pytest.mark.parametrize("respect_mode", [True, False])
def test_a_traced_module_leaves_globals_as_one_call_does(respect_mode):
    _reset()
    tracebridge.trace(Counting().eval(), torch.ones(3, 2), respect_mode=respect_mode)
    assert CALLS == 1 and SEEN == ["forward"]


def test_closure_variables_are_kept_too():
    calls = 0
    log = []

    def f(x):
        nonlocal calls
        calls += 1
        log.append("f")
        return x + 1

    tracebridge.trace(f, torch.ones(2, 3))
    assert calls == 1 and log == ["f"]


def test_a_trace_the_check_refuses_still_puts_globals_back():
    _reset()

    def two():
        return 2.0

    def baked(x):
        SEEN.append(1)
        return x * float(x.shape[1]) * 0.0 + two() * x.shape[1]  # a size baked in

    with pytest.raises(tracebridge.TracingCheckError):
        tracebridge.trace(baked, torch.ones(2, 3))
    assert SEEN == [1]


def test_tensor_and_container_contents_come_back_in_place():
    _reset()

    def tally(x):
        TOTAL.add_(x)
        SEEN.append(x)
        return x

    kept = KeptGlobals(tally)
    seen, total = SEEN, TOTAL
    tally(2.0)
    tally(3.0)
    kept.restore()
    assert SEEN is seen and SEEN == [] and TOTAL is total and TOTAL.item() == 0.0


def test_what_is_not_restored_is_as_documented():
    """An object two levels out (an attribute of an object the code names) is not
    followed (documented)."""

    class Inner:
        seen = 0

    class Config:
        def __init__(self):
            self.inner = Inner()
            self.inner.seen = 0

    config = Config()

    def f(x):
        config.inner.seen += 1
        return x

    kept = KeptGlobals(f)
    f(1)
    kept.restore()
    assert config.inner.seen == 1


class Counted:
    calls = 0


class Holder:
    pass


HELD = Holder()
HELD.n = 0
HELD.log = []


def counting(x):
    Counted.calls += 1
    HELD.n += 1
    HELD.log.append("call")
    counting.runs = getattr(counting, "runs", 0) + 1
    return x * 2


def _counts():
    return Counted.calls, HELD.n, list(HELD.log), getattr(counting, "runs", 0)


@pytest.mark.parametrize("check_trace", [True, False])
def test_class_object_and_function_attributes_are_left_as_one_call_does(check_trace):
    """prober19b F8: a class attribute, a plain object's attribute (and its list) and a
    function attribute reached through a global kept the check's writes too (0 -> 2)."""
    Counted.calls, HELD.n, HELD.log[:] = 0, 0, []
    vars(counting).pop("runs", None)
    traced = tracebridge.trace(counting, torch.ones(3, 4), check_trace=check_trace)
    assert _counts() == (1, 1, ["call"], 1)
    assert torch.equal(traced(torch.ones(5, 4)), torch.full((5, 4), 2.0))
    assert _counts() == (1, 1, ["call"], 1)  # a call of the trace runs tensor operations only


def test_a_closures_object_is_put_back_too():
    holder = Holder()
    holder.n = 0

    def f(x):
        holder.n += 1
        return x

    kept = KeptGlobals(f)
    f(1), f(2)
    kept.restore()
    assert holder.n == 0


def counter_read_by_the_code(x):
    Counted.calls += 1
    return x * Counted.calls


def list_read_by_the_code(x):
    HELD.log.append(1)
    return x * len(HELD.log)


@pytest.mark.parametrize(
    ("fn", "name", "line"),
    [
        (counter_read_by_the_code, "'Counted.calls'", 1),
        (list_read_by_the_code, "'HELD.log'", 1),
    ],
)
def test_a_refusal_names_the_state_each_call_changes_and_its_line(fn, name, line):
    """prober19b F8: refused only as "the trace is not stable ... at node 0"."""
    Counted.calls, HELD.log[:] = 0, []
    with pytest.raises(tracebridge.TracingCheckError) as info:
        tracebridge.trace(fn, torch.ones(2, 2))
    where = f"{__file__}:{fn.__code__.co_firstlineno + line}"
    assert f"the recording changed {name} (at {where}), which the code keeps" in str(info.value)
    assert "Keep that state in a tensor the model holds" in str(info.value)
    want = (1, []) if fn is counter_read_by_the_code else (0, [1])
    assert (Counted.calls, HELD.log) == want


def test_a_global_only_a_later_run_creates_is_removed_again():
    def maybe_create(x):
        global CREATED_LATER
        if x.shape[0] != 3:  # not the example's size: only the check's runs take this
            CREATED_LATER = x.shape[0]
        return x * 2

    globals().pop("CREATED_LATER", None)
    tracebridge.trace(maybe_create, torch.ones(3))
    assert "CREATED_LATER" not in globals()


with torch.inference_mode():
    MADE_IN_INFERENCE = torch.full((3,), 2.0)
EXPANDED = torch.ones(1, 3).expand(4, 3)
FROZEN_SCALES = immutable_dict({"a": 2.0})  # refuses every write
FROZEN_SIZES = immutable_list([1, 2])


def _reads_an_inference_tensor(x):
    return x * MADE_IN_INFERENCE


def _reads_an_expanded_view(x):
    return x * EXPANDED[: x.shape[0]]


def _reads_frozen_containers(x):
    return x * FROZEN_SCALES["a"] + FROZEN_SIZES[1]


@pytest.mark.parametrize(
    "func", [_reads_an_inference_tensor, _reads_an_expanded_view, _reads_frozen_containers]
)
def test_globals_that_cannot_be_written_are_only_read(func):
    # Found by review 9: every kept tensor and container was written back, changed or not;
    # copy_ into an inference tensor or an expanded view raised, so did clear() on
    # torch.fx's immutable_dict, and the trace failed.
    before = EXPANDED.clone()
    traced = tracebridge.trace(func, torch.ones(4, 3))
    assert torch.equal(traced(torch.ones(2, 3)), func(torch.ones(2, 3)))
    assert torch.equal(EXPANDED, before) and torch.equal(MADE_IN_INFERENCE, torch.full((3,), 2.0))


def test_a_tensor_only_read_keeps_its_version():
    counter = torch.zeros(2)
    version = counter._version

    def reads(x):
        return x + counter

    tracebridge.trace(reads, torch.ones(2))
    assert counter._version == version  # nothing written back: caches keyed on it stay


class _Instantier(collections.OrderedDict):
    """transformers' ``ACT2FN``: an entry is a class, and reading it makes an instance."""

    def __getitem__(self, key):
        return super().__getitem__(key)()


ACTIVATIONS = _Instantier(relu=nn.ReLU)


class _WithActivation(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = ACTIVATIONS["relu"]

    def forward(self, x):
        return self.act(x)


def test_a_dict_subclass_keeps_its_raw_entries():
    # Found by review 9: its copy read the entries through __getitem__ (instances), and
    # restore put them back: after tracing a Hugging Face model, ACT2FN held instances
    # and building the next model failed.
    tracebridge.trace(_WithActivation(), torch.randn(2, 3))
    assert dict.__getitem__(ACTIVATIONS, "relu") is nn.ReLU
    assert isinstance(_WithActivation().act, nn.ReLU)


def test_a_global_tensor_written_without_a_version_comes_back():
    total = torch.zeros(1)
    shadow = total.numpy()  # its memory, out of torch's sight: writes move no version

    def adds(x):
        shadow[0] += 1
        assert total.shape == (1,)  # the code names the tensor: it is kept
        return x + 1

    tracebridge.trace(adds, torch.ones(2))
    assert total.item() == 1  # the user's one call


SIZES: list = []


def keeps_its_size(x):
    SIZES.append(x.shape[0])
    return x * 2


def test_a_size_kept_after_the_trace_is_a_plain_number():
    """A size the code kept in a global (the recording's, as one call leaves it) used
    after the trace: compared, it added a guard to the finished program, which its first
    call took in, so a call at another size was refused."""
    SIZES.clear()
    traced = tracebridge.trace(keeps_its_size, torch.ones(3))
    assert SIZES == [3] and SIZES[0] + 1 == 4 and int(SIZES[0]) == 3
    assert type(SIZES[0] + 1) is int and not traced.guards
    assert torch.equal(traced(torch.ones(5)), torch.full((5,), 2.0))
