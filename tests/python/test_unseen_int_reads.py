"""Traced numbers read by CPython's C code without asking them (trace/unseen_reads.py).

A traced size or ``.item()`` is an ``int`` (``float``) subclass: a list indexed by it, a
slice of a string, ``lst.pop(n)``, ``bytes(n)``, ``struct.pack("i", n)``, ``"%.1f" % v``
read its value in C and call none of its methods. Each such use was the example's choice
on every call, silently. Each is now guarded (the call raises GuardError where the value
differs) or stays general; sizes that only go into tensor ops stay general."""

from __future__ import annotations

import functools
import io
import itertools
import math
import operator
import re
import struct
import warnings

import numpy as np
import pytest
import torch

import tracebridge
from tracebridge.errors import GuardError

from .graph_helpers import guarded_at_other_sizes

TABLE = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0]
WORDS = "abcdefgh"


class Lengthy:
    """A user class whose ``__len__`` answers a traced size."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


class Table:
    """A user class whose ``__getitem__`` indexes a list (C code) with what it is given."""

    def __init__(self):
        self.items = list(TABLE)

    def __getitem__(self, i):
        return self.items[i]


USER_TABLE = Table()


def _pick(table, i):
    return table[i]


def list_index(x):
    return x * TABLE[x.shape[0]]


def tuple_index_arith(x):
    return x * tuple(TABLE)[x.shape[0] - 1]


def index_from_local(x):
    n = x.shape[0]
    return x * TABLE[n]


def index_by_unpacked_size(x):
    n, _ = x.shape
    return x * TABLE[n]


def index_by_item(x):
    return x * TABLE[int(x.sum().item()) % 8]


def index_by_long_item(x):
    return x * TABLE[x.long().sum().item()]


def list_slice(x):
    return x * sum(TABLE[: x.shape[0]])


def string_slice(x):
    return x * len(WORDS[1 : x.shape[0]])


def list_pop(x):
    values = list(TABLE)
    return x * values.pop(x.shape[0])


def list_insert(x):
    values = [1.0, 2.0, 3.0]
    values.insert(x.shape[0] - 2, 9.0)
    return x * values[1]


def list_delete(x):
    values = list(TABLE)
    del values[x.shape[0]]
    return x * values[3]


def list_store(x):
    values = list(TABLE)
    values[x.shape[0]] = 0.0
    return x * values[4]


def range_as_sequence(x):
    return x * range(10, 20)[x.shape[0]]


def bytes_of_size(x):
    return x * len(bytes(x.shape[0]))


def bytearray_of_size(x):
    return x * len(bytearray(x.shape[0]))


def string_repeat(x):
    return x * len("ab" * x.shape[0])


def list_repeat(x):
    return x * len([0] * x.shape[0])


def divmod_of_size(x):
    q, r = divmod(x.shape[0], 3)
    return x * q + r


def struct_round_trip(x):
    return x * struct.unpack("<i", struct.pack("<i", x.shape[0]))[0]


def user_len(x):
    return x * len(Lengthy(x.shape[0]))


def operator_index(x):
    return x * operator.index(x.shape[0])


def operator_getitem(x):
    return x * operator.getitem(TABLE, x.shape[0])


def chr_of_size(x):
    return x * ord(chr(65 + x.shape[0]))


def hex_of_size(x):
    return x * len(hex(x.shape[0] * 5))


def islice_of_size(x):
    return x * sum(itertools.islice(TABLE, x.shape[0]))


def enumerate_from_size(x):
    return x * next(iter(enumerate("ab", x.shape[0])))[0]


def centred_text(x):
    return x * len("a".center(x.shape[0] * 2))


def max_then_index(x):
    return x * TABLE[max(x.shape[0], 1)]


def index_through_helper(x):
    return x * _pick(TABLE, x.shape[0])


def user_getitem(x):
    return x * USER_TABLE[x.shape[0]]


def shape_indexed_by_item(x):
    return x * x.shape[int(x[0, 0].item())]


def numpy_index(x):
    return x * float(np.arange(8.0)[x.shape[0]])


def index_after_augmented_assignment(x):
    n = x.shape[0]
    n += 1
    return x * TABLE[n]


def loop_values_index(x):
    n = x.shape[0]
    total = 0.0
    for i in range(n, n + 2):
        total += TABLE[i]
    return x * total


def comprehension_values_index(x):
    n = x.shape[0]
    return x * sum([TABLE[i] for i in range(n - 1, n + 1)])


class KeepsTheSize(torch.nn.Module):
    def forward(self, x):
        self.n = x.shape[0]
        return x * TABLE[self.n]


def attribute_index(x):
    return KeepsTheSize()(x)


def percent_float_decides(x):
    text = "%.1f" % x.sum().item()  # noqa: UP031 - the pattern under test
    return x * (1.0 if text == "3.0" else 2.0)


def percent_float_key(x):
    return x * {"3.0": 1.0}.get("%.1f" % x.sum().item(), 2.0)  # noqa: UP031 - the pattern under test


def format_float_decides(x):
    text = "{:.1f}".format(x.sum().item())  # noqa: UP032 - the pattern under test
    return x * (1.0 if text == "3.0" else 2.0)


def fstring_float_decides(x):
    text = f"{x.sum().item():.1f}"
    return x * (1.0 if text == "3.0" else 2.0)


def percent_int_item_decides(x):
    text = "%d" % x.long().sum().item()  # noqa: UP031 - the pattern under test
    return x * (1.0 if text == "3" else 2.0)


SCALE = 0.25


def float_times_size(x):
    return x * (0.5 * x.shape[0])


def float_literal_expression_over_size(x):
    return x * (-math.log(10000.0) / x.shape[0])


def float_global_times_size(x):
    return x * (SCALE * x.shape[0])


def numpy_scalar_times_size(x):
    return x * float(np.float64(2.0) * x.shape[0])


def float_left_of_comparison(x):
    return x * 2 if 3.5 < x.shape[0] else x  # noqa: SIM300 - the pattern under test


class FirstLayers(torch.nn.Module):
    """An early exit: as many layers as rows (PyTorch slices a Python list in
    ``ModuleList.__getitem__``)."""

    def __init__(self, container=torch.nn.ModuleList):
        super().__init__()
        torch.manual_seed(0)
        self.layers = container([torch.nn.Linear(1, 1) for _ in range(8)])

    def forward(self, x):
        for layer in self.layers[: x.shape[0]]:
            x = layer(x)
        return x


FIRST_LAYERS = FirstLayers()
FIRST_OF_SEQUENCE = FirstLayers(lambda layers: torch.nn.Sequential(*layers))


def module_list_slice(x):
    return FIRST_LAYERS(x.view(-1, 1))


def sequential_slice(x):
    return FIRST_OF_SEQUENCE.layers[: x.shape[0]](x.view(-1, 1))


def whole_shape_to_numpy(x):
    return x * float(np.zeros(x.shape).size)


def sliced_shape_to_numpy(x):
    return x * float(np.ones(x.shape[:1]).sum())


def shape_kept_for_numpy(x):
    shape = x.shape
    return x * float(np.zeros(shape).size)


# (program, example, other): on the other input the Python code takes another choice.
ONES3, ONES5 = torch.ones(3), torch.ones(5)
CHOICES = [
    (list_index, ONES3, ONES5),
    (tuple_index_arith, ONES3, ONES5),
    (index_from_local, ONES3, ONES5),
    (index_by_unpacked_size, torch.ones(3, 2), torch.ones(5, 2)),
    (index_by_item, ONES3, ONES5),
    (index_by_long_item, ONES3, ONES5),
    (list_slice, ONES3, ONES5),
    (string_slice, ONES3, ONES5),
    (list_pop, ONES3, ONES5),
    (list_insert, ONES3, ONES5),
    (list_delete, ONES3, ONES5),
    (list_store, ONES3, torch.ones(4)),
    (range_as_sequence, ONES3, ONES5),
    (bytes_of_size, ONES3, ONES5),
    (bytearray_of_size, ONES3, ONES5),
    (string_repeat, ONES3, ONES5),
    (list_repeat, ONES3, ONES5),
    (struct_round_trip, ONES3, ONES5),
    (user_len, ONES3, ONES5),
    (operator_index, ONES3, ONES5),
    (operator_getitem, ONES3, ONES5),
    (chr_of_size, ONES3, ONES5),
    (hex_of_size, ONES3, ONES5),
    (islice_of_size, ONES3, ONES5),
    (enumerate_from_size, ONES3, ONES5),
    (centred_text, ONES3, ONES5),
    (max_then_index, ONES3, ONES5),
    (index_through_helper, ONES3, ONES5),
    (user_getitem, ONES3, ONES5),
    (shape_indexed_by_item, torch.zeros(2, 3), torch.ones(2, 3)),
    (numpy_index, ONES3, ONES5),
    (index_after_augmented_assignment, ONES3, ONES5),
    (loop_values_index, ONES3, ONES5),
    (comprehension_values_index, ONES3, ONES5),
    (attribute_index, ONES3, ONES5),
    (percent_float_decides, ONES3, ONES5),
    (percent_float_key, ONES3, ONES5),
    (format_float_decides, ONES3, ONES5),
    (fstring_float_decides, ONES3, ONES5),
    (percent_int_item_decides, ONES3, ONES5),
    (float_times_size, ONES3, ONES5),
    (float_literal_expression_over_size, ONES3, ONES5),
    (float_global_times_size, ONES3, ONES5),
    (numpy_scalar_times_size, ONES3, ONES5),
    (float_left_of_comparison, ONES5, ONES3),
    (module_list_slice, ONES3, ONES5),
    (sequential_slice, ONES3, ONES5),
    (whole_shape_to_numpy, ONES3, ONES5),
    (sliced_shape_to_numpy, ONES3, ONES5),
    (shape_kept_for_numpy, ONES3, ONES5),
]


def _both(traced):
    buf = io.BytesIO()
    traced.save(buf)
    return [traced, tracebridge.load(buf.getvalue())]


@pytest.mark.parametrize("check_trace", [False, True], ids=["unchecked", "checked"])
@pytest.mark.parametrize(("fn", "example", "other"), CHOICES, ids=[c[0].__name__ for c in CHOICES])
def test_a_value_read_by_c_code_is_never_the_examples_silently(fn, example, other, check_trace):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            traced = tracebridge.trace(fn, (example,), check_trace=check_trace)
        except tracebridge.TracingCheckError:
            return  # refused at trace time: safe
    want_example, want_other = fn(example), fn(other)
    assert not torch.equal(want_example, want_other) or want_example.shape != want_other.shape
    for runner in _both(traced) if not check_trace else [traced]:
        torch.testing.assert_close(runner(example), want_example)
        try:
            got = runner(other)
        except GuardError:
            continue
        torch.testing.assert_close(got, want_other)


def test_the_guard_names_the_line_that_reads_the_value():
    traced = tracebridge.trace(list_index, (ONES3,), check_trace=False)
    with pytest.raises(GuardError, match="test_unseen_int_reads.py"):
        traced(ONES5)


def user_len_general(x):
    return torch.zeros(len(Lengthy(x.shape[0]))) + x


def test_a_user_len_of_a_size_stays_general():
    traced = tracebridge.trace(user_len_general, (ONES3,))
    for n in (2, 5, 7):
        torch.testing.assert_close(traced(torch.ones(n)), user_len_general(torch.ones(n)))


def sizes_into_tensor_ops(x, y):
    n = x.shape[0]
    h = y * 2
    return torch.zeros(n, 1) + x, x.view(n, -1), h[:, : n - 1], y[: x.shape[0]], y[:n, 0]


def test_sizes_that_go_into_tensor_ops_stay_general():
    x, y = torch.ones(3, 2), torch.arange(40.0).view(8, 5)
    traced = tracebridge.trace(sizes_into_tensor_ops, (x, y))
    assert not traced.guards
    for n in (2, 4, 6):
        got = traced(torch.ones(n, 2), y)
        for a, b in zip(got, sizes_into_tensor_ops(torch.ones(n, 2), y)):
            torch.testing.assert_close(a, b)


def index_kept_in_a_message(x):
    assert x.shape[0] < 100, "too long: %d" % x.shape[0]  # noqa: UP031 - the pattern under test
    return x * 2


def test_a_size_formatted_for_a_message_stays_general():
    traced = tracebridge.trace(index_kept_in_a_message, (ONES3,))
    torch.testing.assert_close(traced(ONES5), ONES5 * 2)


def _make_table():
    return list(TABLE)


def table_bound_after_the_size(x):
    n = x.shape[0]
    table = _make_table()
    return x * table[n]


def tensor_bound_after_the_size(x):
    n = x.shape[0]
    h = x * 2
    return h[: n - 1]


def test_a_container_bound_after_the_size_is_judged_when_the_code_returns():
    traced = tracebridge.trace(table_bound_after_the_size, (ONES3,), check_trace=False)
    torch.testing.assert_close(traced(ONES3), table_bound_after_the_size(ONES3))
    with pytest.raises(GuardError):
        traced(ONES5)
    traced = tracebridge.trace(tensor_bound_after_the_size, (ONES3,))
    assert not traced.guards
    torch.testing.assert_close(traced(ONES5), tensor_bound_after_the_size(ONES5))


def floats_asked_first(x):
    # a traced float right of a float, an int left of a size, a tensor left of a size:
    # the traced number answers first, its arithmetic is recorded
    return (
        x * (1.0 / math.sqrt(x.shape[0])),
        x * (3 / x.shape[0]),
        x / x.shape[0],
        x * (1.0 / x.sum().item()),
    )


def test_numbers_that_answer_first_stay_general():
    traced = tracebridge.trace(floats_asked_first, (ONES3,))
    assert not traced.guards
    for n in (2, 5, 7):
        x = torch.rand(n) + 0.5
        for a, b in zip(traced(x), floats_asked_first(x)):
            torch.testing.assert_close(a, b)


def test_a_float_left_of_a_comparison_records_the_comparison():
    traced = tracebridge.trace(float_left_of_comparison, (ONES5,), check_trace=False)
    line = float_left_of_comparison.__code__.co_firstlineno + 1
    assert traced.guards == [f"forward: x.shape[0] > 3.5 == True (at {__file__}:{line})"]
    for n in (4, 6, 9):  # every size above 3.5: one path, no fixed size
        torch.testing.assert_close(traced(torch.ones(n)), float_left_of_comparison(torch.ones(n)))


def sizes_through_asking_functions(x):
    # math.prod, functools.reduce and operator's arithmetic ask the number: general
    return (
        x * math.prod(x.shape),
        x * functools.reduce(operator.mul, x.shape),
        x * operator.add(x.shape[0], 1),
    )


def test_functions_that_ask_the_number_keep_it_general():
    traced = tracebridge.trace(sizes_through_asking_functions, (torch.ones(3, 2),))
    assert not traced.guards
    for shape in ((2, 5), (4, 1), (6, 3)):
        x = torch.rand(*shape)
        for a, b in zip(traced(x), sizes_through_asking_functions(x)):
            torch.testing.assert_close(a, b)


def test_a_module_list_indexed_by_a_size_is_guarded_by_its_own_code():
    # an int index: ModuleList asks operator.index (trace/patches.py), which guards it
    def pick(x):
        return FIRST_LAYERS.layers[x.shape[0]](x.view(-1, 1))

    traced = tracebridge.trace(pick, (ONES3,), check_trace=False)
    torch.testing.assert_close(traced(ONES3), pick(ONES3))
    with pytest.raises(GuardError):
        traced(ONES5)


# --- C classes and functions kept on an instance (found by review, session 18) -------------


def _into_an_array(x):
    import array

    return x * (5.0 if array.array("q", [x.shape[0]])[0] == 12 else 1.0)


def _into_a_decimal(x):
    import decimal

    return x * (5.0 if decimal.Decimal(x.shape[0]) == 12 else 1.0)


def _into_a_timedelta(x):
    import datetime

    return x * (5.0 if datetime.timedelta(seconds=x.shape[0]).seconds == 12 else 1.0)


def _into_a_bounded_deque(x):
    import collections

    return x * (5.0 if len(collections.deque(range(20), maxlen=x.shape[0])) == 12 else 1.0)


class _KeepsAFunction(torch.nn.Module):
    """A function kept on the instance (not a method): called with the size alone."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return x * self.fn(x.shape[0])


_SCALES = {12: 5.0, "12": 5.0}


@pytest.mark.parametrize(
    "fn",
    [
        _into_an_array,
        _into_a_decimal,
        _into_a_timedelta,
        _into_a_bounded_deque,
        _KeepsAFunction(lambda n: _SCALES.get(len(np.zeros(n)), 1.0)),
        _KeepsAFunction(lambda n: 5.0 if np.zeros(n).shape == (12,) else 1.0),
    ],
    ids=["array", "Decimal", "timedelta", "deque maxlen", "lambda len", "lambda shape"],
)
def test_a_size_given_to_c_classes_or_kept_lambdas_is_guarded(fn, tmp_path):
    guarded_at_other_sizes(fn, tmp_path)


def test_a_size_kept_by_a_partial_stays_general():
    def f(x):
        full = functools.partial(torch.full, (x.shape[0], 3))
        return x * full(2.0)

    traced = tracebridge.trace(f, torch.ones(2, 3))
    assert traced.guards == []
    assert torch.equal(traced(torch.ones(7, 3)), f(torch.ones(7, 3)))


def _a_width_of_text(x):
    return x * (5.0 if len("%-*s" % (x.shape[0], "a")) == 12 else 1.0)  # noqa: UP031


def _rounded_to_a_size(x):
    return x * (5.0 if round(3.14159265358979, x.shape[0]) == 3.14159265359 else 1.0)


def _a_method_of_built_text(x):
    return x * (5.0 if ("a" * 20).replace("a", "b", x.shape[0]).count("b") == 12 else 1.0)


def _split_of_joined_text(x):
    return x * (5.0 if len("-".join(["a"] * 20).split("-", x.shape[0])) == 13 else 1.0)


# fmt: off
def _a_local_bound_on_the_same_line(x):
    n = x.shape[0]; items = list(range(20)); items.insert(n, -1)  # noqa: E702
    return x * (5.0 if items[12] == -1 else 1.0)
# fmt: on


@pytest.mark.parametrize(
    "fn",
    [
        _a_width_of_text,
        _rounded_to_a_size,
        _a_method_of_built_text,
        _split_of_joined_text,
        _a_local_bound_on_the_same_line,
    ],
)
def test_sizes_read_in_c_by_widths_ndigits_and_methods_of_built_objects_are_guarded(fn):
    traced = tracebridge.trace(fn, torch.ones(2, 3))
    assert torch.equal(traced(torch.ones(2, 3)), fn(torch.ones(2, 3)))
    with pytest.raises(GuardError, match=r"x.shape\[0\] == 2"):
        traced(torch.ones(12, 3))


_STEPS = [1.0] * 12 + [5.0] * 10


class _IndexesBuiltSequences(torch.nn.Module):
    def __init__(self, how):
        super().__init__()
        self.how, self.scales = how, list(_STEPS)

    def forward(self, x):
        n = x.shape[0]
        if self.how == "reversed twice":
            return x * self.scales[::-1][::-1][n]
        if self.how == "getattr":
            return x * getattr(self, "scales")[n]  # noqa: B009 - the pattern under test
        if self.how == "copy":
            return x * _STEPS.copy()[n]
        return x * (self.scales + [])[n]


def _legacy_constructor(x):
    sizes = torch.LongTensor([x.shape[0], x.shape[1]])
    return x * (5.0 if sizes[0] == 12 else 1.0)


def _templated(x):
    import string

    text = string.Template("$n").substitute(n=x.shape[0])
    return x * (5.0 if text == "12" else 1.0)


@pytest.mark.parametrize(
    "fn",
    [
        _IndexesBuiltSequences("reversed twice"),
        _IndexesBuiltSequences("getattr"),
        _IndexesBuiltSequences("copy"),
        _IndexesBuiltSequences("sum"),
        _legacy_constructor,
        _templated,
    ],
    ids=["reversed twice", "getattr", "copy", "sum", "LongTensor", "Template"],
)
def test_sizes_read_in_c_through_built_sequences_legacy_tensors_and_the_stdlib(fn):
    traced = tracebridge.trace(fn, torch.ones(2, 3))
    assert torch.equal(traced(torch.ones(2, 3)), fn(torch.ones(2, 3)))
    with pytest.raises(GuardError, match=r"x.shape\[0\] == 2"):
        traced(torch.ones(12, 3))


_TEXT = "a" * 12 + "b" * 10


class _Holder:
    """An object whose attributes hold a list, a str and a dict of lists."""

    def __init__(self):
        self.names, self.text, self.cfg = list(_STEPS), _TEXT, {"s": list(_STEPS)}


HOLDER = _Holder()

# A size given to a C method (or an index) of a list or str reached through an attribute's
# value: found from the attribute's value, not only from displays. One read per function:
# every read of a local is judged, so each must guard alone.


def _copy_pop(x):
    return x * HOLDER.names.copy().pop(x.shape[0])


def _getattr_index(x):
    return x * float(getattr(HOLDER, "names").index(5.0, x.shape[0] - 1))  # noqa: B009


def _slice_index(x):
    return x * float(HOLDER.names[:].index(5.0, x.shape[0] - 1))


def _upper_find(x):
    return x * float(HOLDER.text.upper().find("B", x.shape[0] - 1))


def _times_two(x):
    return x * (HOLDER.names * 2)[x.shape[0]]


def _encoded(x):
    return x * float(HOLDER.text.encode()[x.shape[0]])


def _split_item(x):
    return x * float(len(HOLDER.text.lower().split("b")[0][x.shape[0] - 1 :]))


def _dict_get(x):
    return x * float(HOLDER.cfg.get("s").index(5.0, x.shape[0] - 1))


@pytest.mark.parametrize(
    "fn",
    [
        _copy_pop,
        _getattr_index,
        _slice_index,
        _upper_find,
        _times_two,
        _encoded,
        _split_item,
        _dict_get,
    ],
)
def test_sizes_given_to_c_methods_of_an_attributes_list_or_text_are_guarded(fn, tmp_path):
    guarded_at_other_sizes(fn, tmp_path, other=(15, 3), guard="x.shape[0]")
    # the example's answer would be wrong there: eager reads the size itself
    assert fn(torch.ones(15, 3))[0, 0] != fn(torch.ones(2, 3))[0, 0]


def test_code_without_a_readable_source_is_said_to_be_unchecked():
    """Code run by ``exec`` (or ``python -c``) has no source to follow: a size it hands
    to C code cannot be guarded there, and the trace says so once, naming the file."""
    namespace: dict = {}
    exec(  # noqa: S102 - the point of the test
        "TABLE = [1.0] * 20\nTABLE[12] = 5.0\ndef scale(x):\n    return x * TABLE[x.shape[0]]\n",
        namespace,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tracebridge.trace(namespace["scale"], torch.ones(2, 3))
    blind = [str(w.message) for w in caught if "cannot be checked" in str(w.message)]
    assert len(blind) == 1 and "<string>" in blind[0] and "define the traced code" in blind[0]


# prober19 F3 (rest): a slice object keeps the traced number; C reads it in .indices(k)
def slice_indices(x):
    return x * (5.0 if slice(x.shape[0]).indices(20)[1] == 12 else 1.0)


def slice_indices_of_a_local(x):
    bounds = slice(0, x.shape[0] - 1, 1)
    start, stop, _ = bounds.indices(6)
    return x * float(stop - start)


def slice_of_a_list(x):
    rows = slice(1, x.shape[0])
    return x * sum(TABLE[rows])


def slice_of_a_tensor(x):
    rows = slice(0, x.shape[0] - 1)
    return x[rows] * x.shape[0], x[slice(1, None)]


@pytest.mark.parametrize(
    ("fn", "guard", "reader"),
    [
        (slice_indices, "x.shape[0] == 2", "slice(x.shape[0]).indices(20)"),
        (slice_indices_of_a_local, "(x.shape[0] - 1) == 1", "bounds.indices(6)"),
        (slice_of_a_list, "x.shape[0] == 2", "sum(TABLE[rows])"),
    ],
)
def test_a_size_kept_by_a_slice_that_c_code_reads_is_guarded(fn, guard, reader, tmp_path):
    guarded_at_other_sizes(fn, tmp_path, example=(2,), other=(12,), guard=guard)
    traced = tracebridge.trace(fn, torch.ones(3))
    with pytest.raises(GuardError, match=re.escape(reader)):  # names the line that reads it
        traced(torch.ones(4))
    torch.testing.assert_close(traced(torch.ones(3)), fn(torch.ones(3)))


def test_a_size_kept_by_a_slice_of_a_tensor_stays_general():
    traced = tracebridge.trace(slice_of_a_tensor, torch.ones(3))
    assert not traced.guards
    for n in (2, 5, 12):
        for got, want in zip(
            traced(torch.arange(float(n))), slice_of_a_tensor(torch.arange(float(n)))
        ):
            torch.testing.assert_close(got, want)
