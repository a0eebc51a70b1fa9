"""Traced numbers carried to C code by names, attributes and containers
(trace/carried_reads.py).

A size kept in an attribute and read in another method (``self.table[self.n]``), stored in
a dict, list or tuple and read elsewhere, passed through ``*args``/``**kwargs``, or a user
``__len__`` answering a traced size to ``if obj:``: C code read the example's value on
every call, silently. Each is now guarded at the line that reads it (GuardError where the
value differs) or stays right; sizes carried only into tensor ops stay general."""

from __future__ import annotations

import itertools
import operator
import struct
import warnings
from dataclasses import dataclass

import numpy as np
import pytest
import torch

import tracebridge
from tracebridge.errors import GuardError

TABLE = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0]


class SizeInOneMethodIndexInAnother(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.table = list(TABLE)

    def measure(self, x):
        self.n = x.shape[0]

    def scale(self, x):
        return x * self.table[self.n]

    def forward(self, x):
        self.measure(x)
        return self.scale(x)


class SliceByAttribute(torch.nn.Module):
    def forward(self, x):
        self.n = x.shape[0]
        return self.finish(x)

    def finish(self, x):
        return x * sum(TABLE[: self.n])


class State:
    pass


def _read_state(x, state):
    return x * TABLE[state.n]


def attribute_of_another_object(x):
    state = State()
    state.n = x.shape[0]
    return _read_state(x, state)


@dataclass
class Config:
    n: int


def dataclass_field(x):
    return _read_config(x, Config(x.shape[0]))


def _read_config(x, config):
    return x * TABLE[config.n]


class Slotted:
    __slots__ = ("n",)


def slots_attribute(x):
    holder = Slotted()
    holder.n = x.shape[0]
    return x * TABLE[holder.n]


def _read_dict(x, cfg):
    return x * TABLE[cfg["n"]]


def dict_item(x):
    return _read_dict(x, {"n": x.shape[0]})


def list_item(x):
    sizes = [x.shape[0], 2]
    return x * TABLE[sizes[0]]


def appended_item(x):
    sizes = []
    sizes.append(x.shape[0])
    return x * TABLE[sizes[-1]]


def _dims(x):
    return (x.shape[0], x.shape[0] + 1)


def returned_tuple_item(x):
    dims = _dims(x)
    return x * TABLE[dims[0]]


def _star(x, *args):
    return x * TABLE[args[0]]


def through_star_args(x):
    return _star(x, x.shape[0])


def _unpacked_star(x, *args):
    (n,) = args
    return x * TABLE[n]


def through_star_args_unpacked(x):
    return _unpacked_star(x, x.shape[0])


def _keywords(x, **kwargs):
    return x * TABLE[kwargs["n"]]


def through_star_kwargs(x):
    return _keywords(x, n=x.shape[0])


def _keyword_get(x, **kwargs):
    return x * TABLE[kwargs.get("n", 0)]


def through_star_kwargs_get(x):
    return _keyword_get(x, n=x.shape[0])


def _forward_all(x, *args, **kwargs):
    return _keywords(x, *args, **kwargs)


def star_kwargs_passed_on(x):
    return _forward_all(x, n=x.shape[0])


KEPT = {}


def _read_global(x):
    return x * TABLE[KEPT["n"]]


def module_level_dict(x):
    KEPT["n"] = x.shape[0]
    return _read_global(x)


class PicksByItem:
    def pick(self):
        return TABLE[self.k]


def item_in_attribute(x):
    picker = PicksByItem()
    picker.k = int(x.sum().item())
    return x * picker.pick()


def min_of_attribute(x):
    state = State()
    state.n = x.shape[0]
    return x * TABLE[min(state.n, 7)]


def int_of_attribute(x):
    state = State()
    state.n = x.shape[0]
    return x * TABLE[int(state.n)]


def islice_by_attribute(x):
    state = State()
    state.n = x.shape[0]
    return x * sum(itertools.islice(TABLE, state.n))


def struct_of_dict_item(x):
    cfg = {"n": x.shape[0]}
    return x * struct.unpack("<i", struct.pack("<i", cfg["n"]))[0]


def numpy_by_attribute(x):
    state = State()
    state.n = x.shape[0]
    return x * float(np.arange(9.0)[state.n])


def string_slice_by_item(x):
    sizes = {"n": x.shape[0]}
    return x * len("abcdefgh"[: sizes["n"]])


def enumerate_truncated_by_attribute(x):
    state = State()
    state.n = x.shape[0]
    total = 0.0
    for i, v in enumerate(TABLE[: state.n]):
        total += i * v
    return x * total


def list_pop_by_item(x):
    sizes = (x.shape[0],)
    values = list(TABLE)
    return x * values.pop(sizes[0])


def splat_into_struct(x):
    sizes = (x.shape[0], 1)
    return x * sum(struct.unpack("<2i", struct.pack("<2i", *sizes)))


def percent_format_of_attribute(x):
    state = State()
    state.v = x.sum().item()
    text = "%.1f" % state.v  # noqa: UP031 - the pattern under test
    return x * (1.0 if text == "3.0" else 2.0)


def _halved(x, state):
    return x * (0.5 * state.n)


def float_times_attribute(x):
    state = State()
    state.n = x.shape[0]
    return _halved(x, state)


def _above(x, state):
    return x * 2 if 3.5 < state.n else x  # noqa: SIM300 - the pattern under test


def float_compared_with_attribute(x):
    state = State()
    state.n = x.shape[0]
    return _above(x, state)


class ScaleByState(torch.autograd.Function):
    """A custom autograd Function whose forward indexes a list with a size kept in an
    object: the tracer runs the forward itself, watched too."""

    @staticmethod
    def forward(ctx, x, state):
        return x * TABLE[state.n]

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def custom_function_forward(x):
    state = State()
    state.n = x.shape[0]
    return ScaleByState.apply(x, state)


class Batch:
    """A user sequence whose ``__len__`` answers a traced size."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def if_user_len(x):
    if Batch(x.shape[0] - 3):
        return x * 2
    return x * 3


def not_user_len(x):
    batch = Batch(x.shape[0] - 3)
    return x * (2.0 if not batch else 3.0)


def bool_of_user_len(x):
    return x * (2.0 if bool(Batch(x.shape[0] - 3)) else 3.0)


def while_user_len(x):
    batch = Batch(x.shape[0] - 3)
    total = x
    while batch:
        total = total + 1
        batch.n = 0
    return total


class Position:
    def __init__(self, n):
        self.n = n

    def __index__(self):
        return self.n


def user_index(x):
    return x * TABLE[Position(x.shape[0])]


def user_index_through_operator_index(x):
    return x * TABLE[operator.index(Position(x.shape[0]))]


LAYERS = torch.nn.ModuleList([torch.nn.Linear(1, 1) for _ in range(9)])


def module_list_by_user_index(x):
    return LAYERS[Position(x.shape[0])](x.view(-1, 1)).view(-1)


# (program, example size, other sizes): at some other size the Python code takes another
# choice; at each, the trace answers right or raises GuardError.
CHOICES = [
    (SizeInOneMethodIndexInAnother, 3, (5, 4)),
    (SliceByAttribute, 3, (5, 2)),
    (attribute_of_another_object, 3, (5,)),
    (dataclass_field, 3, (5,)),
    (slots_attribute, 3, (5,)),
    (dict_item, 3, (5,)),
    (list_item, 3, (5,)),
    (appended_item, 3, (5,)),
    (returned_tuple_item, 3, (5,)),
    (through_star_args, 3, (5,)),
    (through_star_args_unpacked, 3, (5,)),
    (through_star_kwargs, 3, (5,)),
    (through_star_kwargs_get, 3, (5,)),
    (star_kwargs_passed_on, 3, (5,)),
    (module_level_dict, 3, (5,)),
    (item_in_attribute, 3, (5,)),
    (min_of_attribute, 3, (5, 8)),
    (int_of_attribute, 3, (5,)),
    (islice_by_attribute, 3, (5,)),
    (struct_of_dict_item, 3, (5,)),
    (numpy_by_attribute, 3, (5,)),
    (string_slice_by_item, 3, (5,)),
    (enumerate_truncated_by_attribute, 3, (5,)),
    (list_pop_by_item, 3, (5,)),
    (splat_into_struct, 3, (5,)),
    (percent_format_of_attribute, 3, (5,)),
    (if_user_len, 4, (3, 5)),
    (not_user_len, 4, (3, 5)),
    (bool_of_user_len, 4, (3, 5)),
    (while_user_len, 4, (3, 5)),
    (if_user_len, 3, (4, 5)),
    (user_index, 3, (5,)),
    (user_index_through_operator_index, 3, (5,)),
    (module_list_by_user_index, 3, (5,)),
    (float_times_attribute, 3, (5,)),
    (custom_function_forward, 3, (5,)),
    (float_compared_with_attribute, 5, (3, 7)),
]


def _program(fn):
    return fn() if isinstance(fn, type) else fn


@pytest.mark.parametrize("check_trace", [False, True], ids=["unchecked", "checked"])
@pytest.mark.parametrize(
    ("fn", "size", "others"), CHOICES, ids=[f"{c[0].__name__}-{c[1]}" for c in CHOICES]
)
def test_a_carried_value_read_by_c_code_is_never_the_examples_silently(
    fn, size, others, check_trace
):
    program = _program(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            traced = tracebridge.trace(program, (torch.ones(size),), check_trace=check_trace)
        except tracebridge.TracingCheckError:
            return  # refused at trace time: safe
    torch.testing.assert_close(traced(torch.ones(size)), program(torch.ones(size)))
    differs = False
    for other in others:
        want = program(torch.ones(other))
        differs |= not torch.equal(want.flatten()[:1], program(torch.ones(size)).flatten()[:1])
        try:
            got = traced(torch.ones(other))
        except GuardError:
            continue
        torch.testing.assert_close(got, want)
    assert differs  # the case is one where the example's value would be wrong


def test_without_the_watch_these_were_silently_wrong(monkeypatch):
    """The cases above need the watch: without it, a trace returns the example's choice."""
    import contextlib
    import sys

    capture = sys.modules["tracebridge.trace.capture"]
    monkeypatch.setattr(capture.carried_reads, "watched", contextlib.nullcontext)
    wrong = 0
    for fn in (SizeInOneMethodIndexInAnother, dict_item, through_star_kwargs, if_user_len):
        program = _program(fn)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            traced = tracebridge.trace(program, (torch.ones(4),), check_trace=False)
        other = torch.ones(3)
        wrong += not torch.equal(traced(other), program(other))
    assert wrong == 4


def test_the_guard_names_the_line_that_reads_the_carried_value():
    traced = tracebridge.trace(SizeInOneMethodIndexInAnother(), (torch.ones(3),), check_trace=False)
    line = SizeInOneMethodIndexInAnother.scale.__code__.co_firstlineno + 1
    with pytest.raises(GuardError, match=rf"test_unseen_carried_reads.py:{line}"):
        traced(torch.ones(5))


class SizesKeptForTensorOps(torch.nn.Module):
    """Sizes kept in attributes, dicts, ``*args`` and ``**kwargs``, used only by tensor ops."""

    def measure(self, x):
        self.rows, self.cols = x.shape
        self.sizes = {"cols": x.shape[1]}

    def forward(self, x, y):
        self.measure(x)
        return self.shape_ops(x, y, self.rows, width=self.sizes["cols"])

    def shape_ops(self, x, y, *args, **kwargs):
        rows, width = args[0], kwargs["width"]
        flat = x.reshape(self.rows * self.cols)
        padded = torch.nn.functional.pad(x, (0, self.cols))
        return (
            flat.view(rows, width),
            y[: self.rows, : kwargs.get("width")],
            torch.zeros(self.sizes["cols"]) + x,
            padded[:, : self.cols * 2],
            x.new_ones(args[0], 1) * self.cols,
        )


def test_sizes_carried_only_into_tensor_ops_stay_general():
    model = SizesKeptForTensorOps()
    x, y = torch.ones(3, 2), torch.arange(80.0).view(8, 10)
    traced = tracebridge.trace(model, (x, y))
    assert not traced.guards
    for rows, cols in ((2, 4), (5, 3), (7, 7)):
        x = torch.rand(rows, cols)
        for a, b in zip(traced(x, y), model(x, y)):
            torch.testing.assert_close(a, b)


class LengthOnlyCounted:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def user_len_called_by_the_traced_len(x):
    return torch.zeros(len(LengthOnlyCounted(x.shape[0]))) + x


def test_a_user_len_through_len_stays_general():
    traced = tracebridge.trace(user_len_called_by_the_traced_len, (torch.ones(3),))
    assert traced.guards == [  # len() checks __len__ >= 0, as CPython's does
        f"forward: x.shape[0] >= 0 == True (at {__file__}:"
        f"{user_len_called_by_the_traced_len.__code__.co_firstlineno + 1})"
    ]
    for n in (1, 4, 6):
        x = torch.rand(n)
        torch.testing.assert_close(traced(x), user_len_called_by_the_traced_len(x))


def test_a_truth_test_of_a_user_len_keeps_the_other_true_sizes():
    traced = tracebridge.trace(if_user_len, (torch.ones(5),), check_trace=False)
    line = Batch.__len__.__code__.co_firstlineno + 1
    assert traced.guards == [f"forward: (x.shape[0] - 3) > 0 == True (at {__file__}:{line})"]
    for n in (4, 6, 9):  # every size where the sequence is not empty: one path
        torch.testing.assert_close(traced(torch.ones(n)), if_user_len(torch.ones(n)))


def test_the_watch_leaves_a_trace_function_set_before_it_in_place():
    import sys

    events = []

    def outer(frame, event, arg):
        events.append(event)
        return None

    previous = sys.gettrace()
    sys.settrace(outer)
    try:
        traced = tracebridge.trace(dict_item, (torch.ones(3),), check_trace=False)
        assert sys.gettrace() is outer
    finally:
        sys.settrace(previous)
    assert events  # the earlier trace function still saw the calls
    with pytest.raises(GuardError):
        traced(torch.ones(5))


def comprehension_over_carried_sizes(x):
    state = State()
    state.sizes = [x.shape[0], 1]
    return x * sum([TABLE[k] for k in state.sizes])


def generator_over_carried_sizes(x):
    state = State()
    state.sizes = (x.shape[0], 1)
    return x * sum(TABLE[k] for k in state.sizes)


def lambda_reading_an_attribute(x):
    state = State()
    state.n = x.shape[0]
    pick = lambda holder: TABLE[holder.n]  # noqa: E731 - the pattern under test
    return x * pick(state)


@pytest.mark.parametrize(
    "fn",
    [comprehension_over_carried_sizes, generator_over_carried_sizes, lambda_reading_an_attribute],
)
def test_reads_in_a_comprehension_or_lambda_are_judged_in_its_frame(fn):
    traced = tracebridge.trace(fn, (torch.ones(3),), check_trace=False)
    torch.testing.assert_close(traced(torch.ones(3)), fn(torch.ones(3)))
    with pytest.raises(GuardError):
        traced(torch.ones(5))


def shadowed_by_a_comprehension(x):
    state = State()
    state.n = x.shape[0]
    k = state.n  # noqa: F841 - the comprehension's own k is another name
    return torch.zeros(state.n) + x * sum([TABLE[k] for k in range(3)])


def test_a_comprehension_variable_is_not_the_enclosing_functions():
    traced = tracebridge.trace(shadowed_by_a_comprehension, (torch.ones(3),))
    assert not traced.guards
    for n in (2, 5, 7):
        x = torch.rand(n)
        torch.testing.assert_close(traced(x), shadowed_by_a_comprehension(x))


def user_len_called_as_a_method(x):
    return torch.zeros(Batch(x.shape[0]).__len__()) + x


def test_a_slot_called_from_python_gives_the_traced_number():
    traced = tracebridge.trace(user_len_called_as_a_method, (torch.ones(3),))
    assert not traced.guards
    for n in (2, 5):
        x = torch.rand(n)
        torch.testing.assert_close(traced(x), user_len_called_as_a_method(x))


def test_a_slot_read_by_the_tracers_operator_index_names_the_users_line():
    traced = tracebridge.trace(user_index_through_operator_index, (torch.ones(3),))
    line = user_index_through_operator_index.__code__.co_firstlineno + 1
    assert traced.guards == [f"forward: x.shape[0] == 3 (at {__file__}:{line})"]
