"""The check at other sizes of every dimension (check/dims.py) and at a second call
(check/repeated.py): traces that were silently wrong outside the batch dimension, or after
a call changed the module's Python attributes, are refused at trace time; right traces are
still accepted."""

from __future__ import annotations

import math
import types

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.check import dims

from .test_divergence import CallCounter


def sinusoid(x):
    """A sinusoidal position encoding built on every call from the input's sizes."""
    length, width = x.shape[1], x.shape[2]
    pos = torch.arange(length, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, width, 2, dtype=torch.float32) * (-math.log(1e4) / width))
    pe = torch.zeros(length, width)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)
    return x + pe


def _log_step():
    return -math.log(1e4)


def sinusoid_opaque(x):
    """The same, with the float on the left made by a call: the source does not show a
    float there, so the size is baked unguarded (only the check finds it)."""
    length, width = x.shape[1], x.shape[2]
    pos = torch.arange(length, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, width, 2, dtype=torch.float32) * (_log_step() / width))
    pe = torch.zeros(length, width)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)
    return x + pe


def sinusoid_size_first(x):
    """The same, written with the size on the left: traced, general."""
    length, width = x.shape[1], x.shape[2]
    pos = torch.arange(length, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, width, 2, dtype=torch.float32) * (width**-1 * -math.log(1e4)))
    pe = torch.zeros(length, width)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)
    return x + pe


def test_a_float_literal_left_of_a_size_is_guarded_naming_the_line():
    """``-math.log(1e4) / width``: float's C code computes it; the source shows the float,
    so the width is guarded where it is made (trace/unseen_reads.py), the length stays
    general."""
    traced = tracebridge.trace(sinusoid, torch.randn(2, 5, 8), check_trace=False)
    for shape in [(1, 7, 8), (3, 2, 8)]:
        x = torch.randn(*shape)
        torch.testing.assert_close(traced(x), sinusoid(x))
    with pytest.raises(tracebridge.GuardError, match="-math.log"):
        traced(torch.randn(1, 5, 12))


def test_a_float_of_a_non_batch_size_is_refused_naming_the_line():
    with pytest.raises(tracebridge.TracingCheckError) as info:
        tracebridge.trace(sinusoid_opaque, torch.randn(2, 5, 8))
    message = str(info.value)
    assert "dimension 2 of input 0 grown from 8 to 16" in message  # odd widths fail in eager
    assert "node mul at " + __file__ in message
    assert "_log_step() / width" in message
    assert "Put the size first" in message


def test_without_the_check_the_baked_number_is_wrong_as_documented():
    traced = tracebridge.trace(sinusoid_opaque, torch.randn(2, 5, 8), check_trace=False)
    x = torch.randn(1, 5, 12)
    assert not torch.allclose(traced(x), sinusoid_opaque(x))  # docs/divergence.md


def test_the_size_first_spelling_traces_and_holds_at_other_sizes(tmp_path):
    traced = tracebridge.trace(sinusoid_size_first, torch.randn(2, 5, 8))
    traced.save(tmp_path / "pe.tb")
    loaded = tracebridge.load(tmp_path / "pe.tb")
    for shape in [(1, 7, 8), (3, 2, 6), (1, 5, 12)]:
        x = torch.randn(*shape)
        torch.testing.assert_close(traced(x), sinusoid_size_first(x))
        torch.testing.assert_close(loaded(x), sinusoid_size_first(x))


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x * (0.5 * x.shape[-1]),
        lambda x: x * (2.0 - x.shape[-1]),
        lambda x: x / (1.5 + x.size(1)),
    ],
    ids=["float_times", "float_minus", "float_plus"],
)
def test_other_float_operators_on_sizes_are_guarded(fn):
    """A float literal left of a size: guarded where the size is made; the batch size,
    which the float never meets, stays general."""
    traced = tracebridge.trace(fn, torch.randn(3, 4))
    x = torch.randn(6, 4)
    torch.testing.assert_close(traced(x), fn(x))
    with pytest.raises(tracebridge.GuardError):
        traced(torch.randn(3, 5))


def test_a_size_pinned_by_a_guard_is_not_a_failure():
    def fixed_width(x):
        if x.shape[1] != 4:
            raise ValueError("width must be 4")
        return x * (1.0 / 4)

    traced = tracebridge.trace(fixed_width, torch.randn(3, 4))
    x = torch.randn(6, 4)
    torch.testing.assert_close(traced(x), fixed_width(x))


def test_inputs_sharing_a_length_grow_together():
    """Tokens and their mask share dimension 1: grown together, as the code needs."""

    def masked_mean(x, mask):
        return (x * mask[..., None]).sum(1) * (_log_step() / x.shape[1])

    x, mask = torch.randn(2, 5, 3), torch.ones(2, 5)
    groups = dims._groups([x, mask])
    assert [(0, 1), (1, 1)] in groups
    with pytest.raises(tracebridge.TracingCheckError, match="dimension 1 of input 0"):
        tracebridge.trace(masked_mean, (x, mask))


@pytest.mark.filterwarnings("ignore::tracebridge.TracerWarning")  # shapes kept from the trace
def test_right_traces_still_pass_and_the_check_runs_few_times():
    """A layer general in every dimension passes; the check tries each dimension at most
    twice (grown by one, then doubled), and at most MAX_GROUPS dimensions."""
    # Kept on an object's attribute: tracing puts back a list the code appends to.
    spy = types.SimpleNamespace(calls=[])
    layer = nn.Linear(8, 4)

    def fn(x):
        spy.calls.append(tuple(x.shape))
        return layer(x).softmax(-1) * x.shape[1] ** -0.5

    tracebridge.trace(fn, torch.randn(2, 3, 8))
    grown = {s for s in spy.calls if s not in {(2, 3, 8), (3, 3, 8)}}
    assert (2, 4, 8) in grown  # dimension 1 grown by one
    assert (2, 3, 9) in grown and (2, 3, 16) in grown  # width: one more fails, doubled runs
    assert len(dims._groups([torch.randn(*([2] * 12))])) == dims.MAX_GROUPS


class ActNorm(nn.Module):
    """Glow's data-dependent initialisation: the first call sets the scale."""

    def __init__(self):
        super().__init__()
        self.initialized = False
        self.scale = None

    def forward(self, x):
        if not self.initialized:
            self.scale = 1 / (x.detach().std(0) + 1e-6)
            self.initialized = True
        return x * self.scale


def test_a_counter_that_a_call_changes_is_refused_naming_it():
    module = CallCounter()
    with pytest.raises(tracebridge.TracingCheckError) as info:
        tracebridge.trace(module, torch.randn(3))
    assert "called a second time" in str(info.value)
    assert "(calls)" in str(info.value)
    assert "register_buffer" in str(info.value)
    assert module.calls == 0  # the model is left as it was


def test_a_lazy_initialisation_is_refused_naming_the_flag():
    module = ActNorm()
    with pytest.raises(tracebridge.TracingCheckError, match=r"\(initialized, scale\)"):
        tracebridge.trace(module, torch.randn(4, 3))
    assert module.initialized is False and module.scale is None


class Remembers(nn.Module):
    """Appends to a list on every call and reads its length (the same list object)."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def forward(self, x):
        self.seen.append(x.shape[0])
        return x * len(self.seen)


def test_a_list_a_call_appends_to_is_refused_and_left_as_it_was():
    # The list was neither put back (tracing and its checks left 9 entries on the model)
    # nor seen changed by the second-call check (it compared the list by identity)
    module = Remembers()
    with pytest.raises(tracebridge.TracingCheckError, match=r"called a second time[\s\S]*\(seen\)"):
        tracebridge.trace(module, torch.randn(2, 3))
    assert module.seen == []


def test_a_dict_entry_a_call_changes_is_refused_naming_it():
    # put back after each run, but compared by identity: traced, wrong from the 2nd call
    class Counts(nn.Module):
        def __init__(self):
            super().__init__()
            self.state = {}

        def forward(self, x):
            self.state["n"] = self.state.get("n", 0) + 1
            return x * self.state["n"]

    module = Counts()
    with pytest.raises(tracebridge.TracingCheckError, match=r"\(state\)"):
        tracebridge.trace(module, torch.randn(2, 3))
    assert module.state == {}


def test_a_list_a_call_appends_to_without_reading_it_is_left_as_it_was():
    class Logs(nn.Module):
        def __init__(self):
            super().__init__()
            self.log = []

            self.shapes = set()

        def forward(self, x):
            self.log.append("called")
            self.shapes.add(len(self.log))
            return x + 1

    module = Logs()
    traced = tracebridge.trace(module, torch.randn(2, 3))
    assert module.log == [] and module.shapes == set()
    x = torch.randn(4, 3)
    torch.testing.assert_close(traced(x), module(x))


def test_numpys_generator_is_left_as_it_was():
    # tracing and its checks run the code several times: each drew from numpy's
    # generator, which was not put back
    np = pytest.importorskip("numpy")

    class Draws(nn.Module):
        def forward(self, x):
            self.last = np.random.rand()  # kept, never read into the result
            return x + 1

    np.random.seed(0)
    before = np.random.get_state()[1].copy()
    module = Draws()
    tracebridge.trace(module, torch.randn(2, 3))
    assert (np.random.get_state()[1] == before).all()
    assert not hasattr(module, "last")


def test_a_lazily_set_tensor_attribute_is_refused_naming_it():
    # no flag beside it: the tensor set by the first call was skipped by the check (a
    # tensor "is traced where it is used"), and the trace recomputed it on every call
    class LazyScale(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = None

        def forward(self, x):
            if self.scale is None:
                self.scale = 1 / (x.detach().std(0) + 1e-6)
            return x * self.scale

    module = LazyScale()
    with pytest.raises(tracebridge.TracingCheckError, match=r"\(scale\)"):
        tracebridge.trace(module, torch.randn(4, 3))
    assert module.scale is None


def test_a_tensor_attribute_set_on_every_call_and_not_read_is_accepted():
    class KeepsLast(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)
            self.last = None

        def forward(self, x):
            y = self.lin(x)
            self.last = y.detach()  # kept for inspection, never read into a result
            return y

    module = KeepsLast()
    traced = tracebridge.trace(module, torch.randn(2, 3))
    assert module.last is None
    x = torch.randn(5, 3)
    torch.testing.assert_close(traced(x), module(x))


def test_attributes_that_do_not_change_results_are_accepted():
    class KeepsShape(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)
            self.seen = 0
            self.last = None

        def forward(self, x):
            self.seen += 1  # counted, never read into the result
            self.last = tuple(x.shape)
            return self.lin(x)

    module = KeepsShape()
    traced = tracebridge.trace(module, torch.randn(2, 3))
    x = torch.randn(5, 3)
    torch.testing.assert_close(traced(x), module(x))


def test_buffer_state_written_in_place_is_repeated_and_accepted():
    class RunningSum(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("total", torch.zeros(3))

        def forward(self, x):
            self.total.add_(x.sum(0))
            return x + self.total

    eager, copy = RunningSum(), RunningSum()
    traced = tracebridge.trace(copy, torch.randn(2, 3))
    for _ in range(3):
        x = torch.randn(4, 3)
        torch.testing.assert_close(traced(x), eager(x))


def test_check_trace_false_skips_both_checks():
    tracebridge.trace(CallCounter(), torch.randn(3), check_trace=False)
    tracebridge.trace(sinusoid, torch.randn(2, 5, 8), check_trace=False)
