"""Memos keyed on traced sizes (issue 20, item 3; prober18's F5-F7).

A memo of what sizes, literals and state compute (a mask by length, a table by shape) is
traced through, general in size, whatever the dict is called, wherever it lives (the
module, a global, a function's attribute) and whatever its key (a size, a tuple of
sizes). A memo of what the filling call's data decided is refused at trace time: eager
reuses the first call's value, a trace could not. Tracing leaves every memo as it was.
"""

from __future__ import annotations

import os

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge import GuardError, TraceError

HERE = os.path.basename(__file__)

# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


def _same_on_other_sizes(model, traced, tmp_path, shapes):
    """The traced and the reloaded model give eager's results at every shape."""
    path = tmp_path / "m.tb"
    traced.save(path)
    loaded = tracebridge.load(path)
    for shape in shapes:
        x = torch.randn(*shape)
        want = model(x)
        torch.testing.assert_close(traced(x), want)
        torch.testing.assert_close(loaded(x), want)


# --- a memo of data is refused -----------------------------------------------------------


class ActNormPerLength(nn.Module):
    """A scale set from the data of the first call of each length (ActNorm's init)."""

    def __init__(self):
        super().__init__()
        self.scale_cache = {}

    def forward(self, x):
        n = x.shape[0]
        s = self.scale_cache.get(n)
        if s is None:
            s = x.abs().mean()
            self.scale_cache[n] = s
        return x / s


class DataMemoByTuple(nn.Module):
    def __init__(self):
        super().__init__()
        self.table = {}

    def forward(self, x):
        key = (x.shape[0], x.shape[1])
        if key not in self.table:
            self.table[key] = (x.amax(), x.shape[1])  # a tuple holding the data's maximum
        return x / self.table[key][0]


class NoiseBySize(nn.Module):
    def __init__(self):
        super().__init__()
        self.noise = {}

    def forward(self, x):
        n = x.shape[-1]
        try:
            eps = self.noise[n]
        except KeyError:
            eps = self.noise[n] = torch.randn(n)
        return x + eps


class SizedByMask(nn.Module):
    """Only a size is kept, but one that the input's values decide."""

    def __init__(self):
        super().__init__()
        self.counts = {}

    def forward(self, x):
        n = x.shape[0]
        if n not in self.counts:
            self.counts[n] = torch.ones(x[x > 0].shape[0])
        return x.sum() + self.counts[n].sum()


@pytest.mark.parametrize(
    ("cls", "what", "line"),
    [
        (ActNormPerLength, "the input's data", "self.scale_cache[n] = s"),
        (DataMemoByTuple, "the input's data", "self.table[key] = "),
        (NoiseBySize, "a random draw", "eps = self.noise[n] = "),
        (SizedByMask, "a size that the input's values decide", "self.counts[n] = "),
    ],
)
def test_a_memo_of_the_calls_data_is_refused(cls, what, line):
    model = cls()
    with pytest.raises(TraceError) as info:
        tracebridge.trace(model, torch.randn(3, 4))
    message = str(info.value)
    label = message.split()[2]
    assert message.startswith(f"the memo {label} keeps") and what in message
    assert "buffer" in message  # what to do
    filled_at = message.split("filled at ")[1].split(")")[0]
    path, _, number = filled_at.rpartition(":")
    assert os.path.basename(path) == HERE
    with open(__file__) as source:
        assert line in source.read().splitlines()[int(number) - 1]
    assert vars(model)[label.removeprefix("self.")] == {}  # nothing kept from the trace


def test_the_memo_is_refused_when_eager_filled_it_first():
    model = ActNormPerLength()
    model(torch.randn(3, 4))
    before = dict(model.scale_cache)
    with pytest.raises(TraceError, match="self.scale_cache"):
        tracebridge.trace(model, torch.randn(3, 4))
    assert model.scale_cache == before and all(type(k) is int for k in model.scale_cache)


# --- a memo of sizes and state stays general ---------------------------------------------


class MasksByShape(nn.Module):
    """A dict of masks keyed on a tuple of sizes, not named as a cache (F7)."""

    def __init__(self):
        super().__init__()
        self.masks = {}

    def forward(self, x):
        key = (x.shape[-2], x.shape[-1])
        if key not in self.masks:
            self.masks[key] = torch.ones(key).tril()
        return x + self.masks[key]


class RotaryByLength(nn.Module):
    """Tables from the length, the input's dtype and device, and a buffer."""

    def __init__(self):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / 100 ** (torch.arange(0, 4, 2).float() / 4))
        self._tables = {}

    def forward(self, x):
        n = x.shape[-2]
        tables = self._tables.get(n)
        if tables is None:
            t = x.new_ones(n).cumsum(0)[:, None] * self.inv_freq.to(x.dtype)
            emb = torch.cat((t, t), dim=-1)
            tables = (emb.cos(), emb.sin())
            self._tables[n] = tables
        cos, sin = tables
        return x * cos + x.flip(-1) * sin


class NormedWeight(nn.Module):
    """A memo of a normalised weight, per width: state, not data."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(8))
        self.normed = {}

    def forward(self, x):
        n = x.shape[-1]
        if n not in self.normed:
            self.normed[n] = self.weight[:n] / self.weight[:n].norm()
        return x * self.normed[n]


@pytest.mark.parametrize(
    ("cls", "memo"),
    [(MasksByShape, "masks"), (RotaryByLength, "_tables"), (NormedWeight, "normed")],
)
def test_a_memo_of_sizes_and_state_keeps_the_trace_general(cls, memo, tmp_path):
    torch.manual_seed(0)
    model = cls()
    traced = tracebridge.trace(model, torch.randn(2, 5, 4))
    assert not [g for g in traced.guards if "shape" in g]
    assert vars(model)[memo] == {}  # left as it was
    shapes = [(2, 5, 4), (3, 7, 4), (1, 2, 4)] if cls is RotaryByLength else [(3, 6, 4)]
    if cls is not RotaryByLength:
        shapes += [(2, 5, 3), (1, 3, 2)]
    _same_on_other_sizes(model, traced, tmp_path, shapes)


# --- memos outside the module: globals and a function's attributes (F6) -------------------

_memo: dict = {}


def arange_memo(x):
    n = x.shape[-1]
    m = _memo.get(n)
    if m is None:
        m = torch.arange(n) * 1.0
        _memo[n] = m
    return x + m


def store_on_itself(x):
    key = (x.shape[0], x.shape[1])
    cache = store_on_itself.__dict__.setdefault("store", {})
    if key not in cache:
        cache[key] = torch.full(key, 2.0)
    return x + cache[key]


@pytest.mark.parametrize("prefilled", [False, True])
@pytest.mark.parametrize("fn", [arange_memo, store_on_itself])
def test_a_memo_outside_the_module_is_traced_and_left_as_it_was(fn, prefilled, tmp_path):
    table = _memo if fn is arange_memo else store_on_itself.__dict__.setdefault("store", {})
    table.clear()
    if prefilled:
        fn(torch.randn(3, 4))
    before = list(table.items())
    traced = tracebridge.trace(fn, torch.randn(3, 4))
    assert traced.guards == []
    assert list(table.items()) == before  # the same keys, the same value objects
    assert all(type(k) in (int, tuple) for k in table)
    for n in (4, 6, 1):
        x = torch.randn(3, n)
        table.clear()
        want = fn(x)
        torch.testing.assert_close(traced(x), want)
    _same_on_other_sizes(fn, traced, tmp_path, [(2, 5), (3, 4)])


# --- what is not a memo still decides ------------------------------------------------------


class CountsCalls(nn.Module):
    """A counter by length: ``.get(n, 0)`` starts from what the dict holds."""

    def __init__(self):
        super().__init__()
        self.calls = {}

    def forward(self, x):
        n = x.shape[0]
        self.calls[n] = self.calls.get(n, 0) + 1
        return x * 2


def test_a_counter_keyed_on_a_size_is_no_memo():
    model = CountsCalls()
    traced = tracebridge.trace(model, torch.randn(3, 2))
    assert any("x.shape[0] == 3" in g for g in traced.guards)
    assert model.calls == {}  # the module's dicts are put back as well
    with pytest.raises(GuardError, match=HERE):
        traced(torch.randn(4, 2))


class RangeByLargestIndex(nn.Module):
    """A memo keyed on a value of the input: what it keeps only the key decides."""

    def __init__(self):
        super().__init__()
        self._cache = {}

    def forward(self, x, index):
        n = index.max().item()
        if n not in self._cache:
            self._cache[n] = torch.arange(n).float()
        return x[:, :1] + self._cache[n][:4]


def test_a_memo_of_what_its_key_decides_is_traced_through():
    model = RangeByLargestIndex()
    traced = tracebridge.trace(model, (torch.randn(3, 4), torch.tensor([5, 6])))
    assert traced.guards == []
    for index in ([5, 7], [9, 4], [4, 4]):
        args = (torch.randn(3, 4), torch.tensor(index))
        torch.testing.assert_close(traced(*args), model(*args))


class CountsInPlace(nn.Module):
    """A count by length kept with ``+=``: each call changes the entry, no memo."""

    def __init__(self):
        super().__init__()
        self.seen = {}

    def forward(self, x):
        n = x.shape[0]
        if n in self.seen:
            self.seen[n] += 1
        else:
            self.seen[n] = 1
        return x * 2


def test_a_count_kept_with_plus_equals_is_no_memo():
    model = CountsInPlace()
    traced = tracebridge.trace(model, torch.randn(3, 2))
    assert any("x.shape[0] == 3" in g for g in traced.guards)
    assert model.seen == {}


# --- entries that were not made by the code around the lookup ----------------------------


class TunedScales(nn.Module):
    """A dict named as a cache, holding a tuned value by length: no code fills it."""

    def __init__(self, tuned):
        super().__init__()
        self.scale_cache = dict(tuned)

    def forward(self, x):
        n = x.shape[0]
        s = self.scale_cache.get(n)
        if s is None:
            s = 1.0  # the default for other lengths
        return x * s


def test_a_dict_of_tuned_values_decides():
    model = TunedScales({12: 5.0})
    traced = tracebridge.trace(model, torch.ones(3, 4))
    torch.testing.assert_close(traced(torch.ones(3, 4)), model(torch.ones(3, 4)))
    with pytest.raises(GuardError, match="self.scale_cache.get"):
        traced(torch.ones(12, 4))  # eager: 5 * x; the trace may not answer 1 * x


def test_an_empty_dict_that_nothing_fills_stays_general():
    model = TunedScales({})
    traced = tracebridge.trace(model, torch.ones(3, 4))
    assert traced.guards == []
    for n in (3, 12, 1):
        torch.testing.assert_close(traced(torch.ones(n, 4)), model(torch.ones(n, 4)))


class SeededMasks(MasksByShape):
    """A memo whose code makes ``tril`` masks, seeded by hand with another value."""

    def __init__(self, seeds):
        super().__init__()
        self.masks.update(seeds)


def test_a_memo_seeded_with_another_value_for_the_example_is_refused():
    seeded = SeededMasks({(5, 4): torch.zeros(5, 4)})
    with pytest.raises(TraceError, match=r"self.masks held, for the example's key \(5, 4\)"):
        tracebridge.trace(seeded, torch.randn(2, 5, 4))
    assert list(seeded.masks) == [(5, 4)]
    warm = SeededMasks({})
    warm(torch.randn(2, 5, 4))  # filled by its own code: what a miss computes
    traced = tracebridge.trace(warm, torch.randn(2, 5, 4))
    assert traced.guards == []
    x = torch.randn(1, 3, 2)
    torch.testing.assert_close(traced(x), warm(x))


_positions_cache: dict = {}


def _fill_positions(n):
    _positions_cache[n] = torch.arange(n).float()


def positions_filled_by_a_helper(x):
    n = x.shape[-1]
    if n not in _positions_cache:
        _fill_positions(n)
    return x + _positions_cache[n]


def test_a_cache_filled_by_a_helper_misses_when_empty_and_decides_when_warm():
    _positions_cache.clear()
    traced = tracebridge.trace(positions_filled_by_a_helper, torch.randn(3, 4))
    assert traced.guards == [] and _positions_cache == {}
    for n in (4, 6, 2):
        x = torch.randn(3, n)
        torch.testing.assert_close(traced(x), positions_filled_by_a_helper(x))
    _positions_cache.clear()
    positions_filled_by_a_helper(torch.randn(2, 5))  # warm: who made the entry is unseen
    traced = tracebridge.trace(positions_filled_by_a_helper, torch.randn(3, 4))
    assert list(_positions_cache) == [5]
    x = torch.randn(2, 4)
    torch.testing.assert_close(traced(x), positions_filled_by_a_helper(x))
    with pytest.raises(GuardError):
        traced(torch.randn(2, 5))


class TunedAtTwelve(nn.Module):
    """A memo the code fills for most lengths, holding a value set by hand for one."""

    def __init__(self, spelling: str):
        super().__init__()
        self.table = {12: torch.tensor(5.0)}
        self.spelling = spelling

    def forward(self, x):
        n = x.shape[0]
        if self.spelling == "not in":
            if n not in self.table:
                self.table[n] = torch.tensor(1.0)
            return x * self.table[n]
        if self.spelling == "get":
            v = self.table.get(n)
            if v is None:
                v = torch.tensor(1.0)
                self.table[n] = v
            return x * v
        try:
            v = self.table[n]
        except KeyError:
            v = self.table[n] = torch.tensor(1.0)
        return x * v


@pytest.mark.parametrize("spelling", ["not in", "get", "KeyError"])
def test_a_memo_holding_a_value_set_by_hand_serves_the_other_sizes_only(spelling, tmp_path):
    model = TunedAtTwelve(spelling)
    traced = tracebridge.trace(model, torch.ones(2, 3))
    for n in (2, 5):
        assert torch.equal(traced(torch.ones(n, 3)), TunedAtTwelve(spelling)(torch.ones(n, 3)))
    with pytest.raises(GuardError, match="12"):
        traced(torch.ones(12, 3))
    assert set(model.table) == {12}  # the trace left the memo as it found it


# --- a memo whose value reads more than its key (prober18b's F12) ----------------------------


class WidthNotInKey(nn.Module):
    """Keyed on the length, but the value reads the width too: eager keeps the first
    width's value for a length, a trace would compute each call's own."""

    def __init__(self):
        super().__init__()
        self.memo = {}

    def forward(self, x):
        n, c = x.shape
        if n not in self.memo:
            self.memo[n] = torch.full((), float(c))
        return x * self.memo[n]


class LikeTheInput(nn.Module):
    """Keyed on the length, the value takes all the input's sizes (``zeros_like``)."""

    def __init__(self):
        super().__init__()
        self.memo = {}

    def forward(self, x):
        n = x.shape[0]
        if n not in self.memo:
            self.memo[n] = torch.ones_like(x).cumsum(1)
        return x * self.memo[n]


class WidthThroughAFlatten(nn.Module):
    """The value reads a size of a tensor made from the input: the input's width."""

    def __init__(self):
        super().__init__()
        self.memo = {}

    def forward(self, x):
        h = x.flatten(0)
        n = x.shape[0]
        if n not in self.memo:
            self.memo[n] = torch.full((), float(h.shape[0]))
        return x * self.memo[n]


@pytest.mark.parametrize(
    ("cls", "what"),
    [
        (WidthNotInKey, "the size x.shape[1]"),
        (LikeTheInput, "the sizes of x"),
        (WidthThroughAFlatten, "the sizes of x"),
    ],
)
def test_a_memo_whose_value_reads_a_size_outside_its_key_is_refused(cls, what):
    model = cls()
    with pytest.raises(TraceError) as info:
        tracebridge.trace(model, torch.ones(12, 3), check_trace=False)
    message = str(info.value)
    assert "the memo self.memo" in message and what in message and "key" in message
    filled_at = message.split("filled at ")[1].split(")")[0]
    with open(__file__) as source:
        line = source.read().splitlines()[int(filled_at.rpartition(":")[2]) - 1]
    assert "self.memo[n] = " in line
    assert model.memo == {}


class CallCounterInValue(nn.Module):
    """The value reads a Python counter the call moves."""

    def __init__(self):
        super().__init__()
        self.memo = {}
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        n = x.shape[0]
        if n not in self.memo:
            self.memo[n] = torch.full((), float(self.calls))
        return x * self.memo[n]


class MemoSizeInValue(nn.Module):
    """The value reads how many entries the memo holds: what calls came before."""

    def __init__(self):
        super().__init__()
        self.memo = {}

    def forward(self, x):
        n = x.shape[0]
        if n not in self.memo:
            self.memo[n] = torch.tensor(float(len(self.memo) + 1))
        return x * self.memo[n]


@pytest.mark.parametrize("cls", [CallCounterInValue, MemoSizeInValue])
def test_a_memo_whose_value_reads_the_calls_before_is_refused_by_the_check(cls):
    model = cls()
    with pytest.raises(TraceError, match=r"called a second time[\s\S]*\(memo[,)]") as info:
        tracebridge.trace(model, torch.ones(2, 3))
    assert "make the memo's value read only its key" in str(info.value)
    assert model.memo == {}
    if cls is CallCounterInValue:
        assert model.calls == 0


class KeyedOnLengthDeviceDtype(nn.Module):
    """A mask cache keyed on (n, device, dtype) whose value reads only the key."""

    def __init__(self):
        super().__init__()
        self.masks = {}

    def forward(self, x):
        n = x.shape[-2]
        key = (n, x.device, x.dtype)
        if key not in self.masks:
            self.masks[key] = torch.ones(n, n, device=x.device, dtype=x.dtype).tril().to(x)
        return self.masks[key] @ x


def test_a_memo_keyed_on_length_device_and_dtype_stays_general(tmp_path):
    model = KeyedOnLengthDeviceDtype()
    traced = tracebridge.trace(model, torch.randn(2, 5, 4))
    # the key's device and dtype are guarded, no size is
    assert not [g for g in traced.guards if "dtype" not in g and "device" not in g]
    _same_on_other_sizes(model, traced, tmp_path, [(2, 7, 4), (3, 2, 6)])


class WidthOfAProjection(nn.Module):
    """The value reads the width of a tensor the code made: the weights fix it."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(3, 4)
        self.tables = {}

    def forward(self, x):
        h = self.proj(x)
        n = x.shape[0]
        if n not in self.tables:
            self.tables[n] = torch.ones(n, h.shape[1]).cumsum(0)
        return h * self.tables[n]


def test_a_memo_reading_a_width_the_weights_fix_stays_general(tmp_path):
    torch.manual_seed(0)
    model = WidthOfAProjection()
    traced = tracebridge.trace(model, torch.randn(5, 3))
    assert traced.guards == []  # the width is the weight's
    _same_on_other_sizes(model, traced, tmp_path, [(2, 3), (7, 3), (5, 3)])
