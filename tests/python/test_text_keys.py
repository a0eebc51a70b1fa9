"""Memos keyed on text made from sizes (issue 20, item 1): traced through like a memo
keyed on the numbers, general in size; a dict of text keys that holds entries nobody's
code here made (tuned by hand) decides, and is guarded; a memo of the call's data is
refused as it is for number keys."""

from __future__ import annotations

import string

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge import GuardError, TraceError

from .graph_helpers import loaded

pytestmark = pytest.mark.usefixtures("quiet_warnings")


class MaskByText(nn.Module):
    """A mask memo keyed on an f-string of two sizes, spelled three ways."""

    def __init__(self, spelling: str):
        super().__init__()
        self.spelling = spelling
        self.masks: dict = {}

    def mask(self, B, N):
        if self.spelling == "in":
            key = f"{B}x{N}"
            if key not in self.masks:
                self.masks[key] = torch.ones(B, N).tril()
            return self.masks[key]
        if self.spelling == "get":
            key = "%sx%s" % (B, N)  # noqa: UP031
            found = self.masks.get(key)
            if found is None:
                found = torch.ones(B, N).tril()
                self.masks[key] = found
            return found
        if f"{B}-{N}" not in self.masks:  # the key made again at each use
            self.masks[f"{B}-{N}"] = torch.ones(B, N).tril()
        return self.masks[f"{B}-{N}"]

    def forward(self, x):
        B, N = x.shape
        return x * self.mask(B, N)


@pytest.mark.parametrize("spelling", ["in", "get", "made_again"])
def test_a_memo_keyed_on_text_of_sizes_is_general(spelling, tmp_path):
    model = MaskByText(spelling)
    traced = tracebridge.trace(model, torch.randn(3, 4))
    assert traced.guards == []
    assert model.masks == {}  # what the recordings and the check stored is taken out
    again = loaded(traced, tmp_path)
    for shape in [(3, 4), (6, 2), (2, 7)]:
        x = torch.randn(*shape)
        expected = x * torch.ones(*shape).tril()
        assert torch.equal(traced(x), expected) and torch.equal(again(x), expected)
        assert torch.equal(model(x), expected)


def test_a_memo_keyed_on_text_warm_before_the_trace_is_guarded():
    """As a memo keyed on a tuple of sizes: entries held before the trace may be tuned by
    hand, and the text cannot be guarded off them one by one."""
    model = MaskByText("in")
    model(torch.randn(5, 5))
    traced = tracebridge.trace(model, torch.randn(3, 4))
    assert list(model.masks) == ["5x5"]
    x = torch.randn(3, 4)
    assert torch.equal(traced(x), model(x))
    with pytest.raises(GuardError, match=r'key = f"\{B\}x\{N\}"'):
        traced(torch.randn(6, 2))


class TunedByText(nn.Module):
    """A table of text keys filled before tracing (tuned values): its lookup decides."""

    def __init__(self):
        super().__init__()
        self.scales = {"12x3": 5.0}

    def forward(self, x):
        key = f"{x.shape[0]}x{x.shape[1]}"
        if key not in self.scales:
            self.scales[key] = 1.0
        return x * self.scales[key]


def test_a_text_keyed_table_with_kept_entries_is_guarded(tmp_path):
    model = TunedByText()
    traced = tracebridge.trace(model, torch.ones(2, 3))
    assert model.scales == {"12x3": 5.0}
    x = torch.ones(2, 3)
    assert torch.equal(traced(x), model(x))
    for call in (traced, loaded(traced, tmp_path)):
        with pytest.raises(GuardError, match=r'key = f"\{x.shape\[0\]\}x\{x.shape\[1\]\}"'):
            call(torch.ones(12, 3))


class DataByText(nn.Module):
    """A memo keyed on text that keeps what the first call's data gave (ActNorm-like)."""

    def __init__(self):
        super().__init__()
        self.scales: dict = {}

    def forward(self, x):
        key = f"n{x.shape[0]}"
        if key not in self.scales:
            self.scales[key] = x.abs().mean()
        return x / self.scales[key]


def test_a_text_keyed_memo_of_the_calls_data_is_refused():
    with pytest.raises(TraceError, match=r"self\.scales.*the input's data"):
        tracebridge.trace(DataByText(), torch.randn(2, 3))


class MaskByShapeText(nn.Module):
    """Keyed on the sizes read in the f-string itself; one variant leaves a size out."""

    def __init__(self, whole: bool):
        super().__init__()
        self.whole = whole
        self.masks: dict = {}

    def forward(self, x):
        key = f"{x.shape[0]}x{x.shape[1]}" if self.whole else f"{x.shape[0]}"
        if key not in self.masks:
            self.masks[key] = torch.ones(x.shape[0], x.shape[1]).triu()
        return x * self.masks[key]


def test_a_memo_keyed_on_text_of_the_shape_is_general(tmp_path):
    model = MaskByShapeText(whole=True)
    traced = tracebridge.trace(model, torch.randn(3, 4))
    assert traced.guards == []
    again = loaded(traced, tmp_path)
    for shape in [(3, 4), (5, 2), (2, 6)]:
        x = torch.randn(*shape)
        expected = x * torch.ones(*shape).triu()
        assert torch.equal(traced(x), expected) and torch.equal(again(x), expected)


def test_a_memo_keyed_on_text_that_leaves_a_size_out_is_refused():
    # eager keeps the value the first call of "3" computed from its own width
    with pytest.raises(TraceError, match=r"self\.masks.*x\.shape\[1\], which its key does not"):
        tracebridge.trace(MaskByShapeText(whole=False), torch.randn(3, 4))


class CountedByText(nn.Module):
    """A memo keyed on text whose value reads how many keys it holds (a call counter)."""

    def __init__(self):
        super().__init__()
        self.seen: dict = {}

    def forward(self, x):
        key = f"{x.shape[0]}"
        if key not in self.seen:
            self.seen[key] = torch.tensor(float(len(self.seen) + 1))
        return x * self.seen[key]


def test_a_memo_keyed_on_text_whose_value_reads_its_length_is_refused():
    # as for a memo keyed on the number: eager's value depends on the calls before
    with pytest.raises(TraceError, match="called a second time"):
        tracebridge.trace(CountedByText(), torch.randn(2, 3))


# A size made into a key by any spelling: the text's sizes are guarded or unknown, never
# a reason to serve what the memo's key does not hold (prober19b F5).
_KEY_SPELLINGS = {
    "percent_tuple": lambda s, x, B: "b%d" % (B,),  # noqa: UP031
    "format_keyword": lambda s, x, B: "{b}".format(b=B),  # noqa: UP032
    "format_index": lambda s, x, B: "{0}".format(B),  # noqa: UP030, UP032
    "format_empty": lambda s, x, B: "b{}".format(B),  # noqa: UP032
    "format_spec": lambda s, x, B: "{:d}".format(B),  # noqa: UP032
    "fstring_repr": lambda s, x, B: f"{B!r}",
    "repr": lambda s, x, B: repr(B),
    "builtin_format": lambda s, x, B: format(B, "d"),
    "join_map": lambda s, x, B: "-".join(map(str, [B])),
    "template": lambda s, x, B: string.Template("b$B").substitute(B=B),
    "tuple_of_text": lambda s, x, B: (str(B),),
    "text_of_shape": lambda s, x, B: str(x.shape[:1]),
    "percent_mapping": lambda s, x, B: "%(b)s" % {"b": B},  # noqa: UP031
    "helper_method": lambda s, x, B: s.key(B),
}


class KeyedOnOneSize(nn.Module):
    """A memo keyed on text of the first size whose value reads the second."""

    def __init__(self, spelling: str):
        super().__init__()
        self.make_key = _KEY_SPELLINGS[spelling]
        self.memo: dict = {}

    def key(self, B):
        return f"b{B}"

    def forward(self, x):
        B, N = x.shape
        key = self.make_key(self, x, B)
        if key not in self.memo:
            self.memo[key] = torch.full((B, 1), float(N))
        return x * self.memo[key]


@pytest.mark.parametrize("spelling", sorted(_KEY_SPELLINGS))
def test_a_text_key_of_one_size_never_serves_a_value_of_another(spelling):
    # eager keeps the first call's value (4) for the key of B=3; a trace must refuse, or
    # raise on the call at another width, never serve 6
    try:
        traced = tracebridge.trace(KeyedOnOneSize(spelling), torch.ones(3, 4))
    except TraceError as exc:
        assert "self.memo" in str(exc) and "x.shape[1]" in str(exc)
        return
    eager = KeyedOnOneSize(spelling)
    for shape in [(3, 4), (3, 6)]:
        x = torch.ones(*shape)
        try:
            served = traced(x)
        except GuardError:
            continue
        assert torch.equal(served, eager(x)), f"{spelling} at {shape}"


class GuardedTextKey(nn.Module):
    """A memo keyed on text made by str.format of both sizes: the sizes are guarded, the
    value reads only them."""

    def __init__(self):
        super().__init__()
        self.masks: dict = {}

    def forward(self, x):
        B, N = x.shape
        key = "{}x{}".format(B, N)  # noqa: UP032
        if key not in self.masks:
            self.masks[key] = torch.ones(B, N).tril()
        return x * self.masks[key]


def test_a_guarded_text_key_whose_value_reads_only_its_sizes_is_traced():
    traced = tracebridge.trace(GuardedTextKey(), torch.randn(3, 4))
    x = torch.randn(3, 4)
    assert torch.equal(traced(x), x * torch.ones(3, 4).tril())
    with pytest.raises(GuardError):
        traced(torch.randn(3, 5))


class MaskMaker:
    """A plain object (not a module) that keeps the memo."""

    def __init__(self):
        self.memo: dict = {}

    def get(self, B, N):
        key = "b{}".format(B)  # noqa: UP032
        if key not in self.memo:
            self.memo[key] = torch.full((B, 1), float(N))
        return self.memo[key]


class HoldsMaskMaker(nn.Module):
    def __init__(self):
        super().__init__()
        self.maker = MaskMaker()

    def forward(self, x):
        B, N = x.shape
        return x * self.maker.get(B, N)


def test_a_memo_kept_by_a_plain_helper_object_is_refused_and_left_empty():
    model = HoldsMaskMaker()
    with pytest.raises(TraceError, match=r"self\.memo.*x\.shape\[1\], which its key does not"):
        tracebridge.trace(model, torch.ones(3, 4))
    assert model.maker.memo == {}


def test_a_refused_module_memo_is_left_as_the_user_had_it():
    model = KeyedOnOneSize("format_empty")
    with pytest.raises(TraceError, match=r"self\.memo"):
        tracebridge.trace(model, torch.ones(3, 4))
    assert model.memo == {}


def fill_memo(memo, B, N):
    key = "b{}".format(B)  # noqa: UP032
    if key not in memo:
        memo[key] = torch.full((B, 1), float(N))
    return memo[key]


class GivesItsMemo(nn.Module):
    """A module whose memo a module-level function fills."""

    def __init__(self):
        super().__init__()
        self.memo: dict = {}

    def forward(self, x):
        B, N = x.shape
        return x * fill_memo(self.memo, B, N)


def test_a_module_memo_filled_by_a_function_it_is_given_to_is_refused():
    with pytest.raises(TraceError, match=r"memo keeps.*x\.shape\[1\], which its key does not"):
        tracebridge.trace(GivesItsMemo(), torch.ones(3, 4))


class KeepsStats(nn.Module):
    """A dict written on every call (no memo: nothing asks whether a key is there)."""

    def __init__(self):
        super().__init__()
        self.stats: dict = {}

    def forward(self, x):
        self.stats["width"] = torch.full((1,), float(x.shape[1]))
        return x * 2


def test_a_dict_written_on_every_call_is_no_memo():
    traced = tracebridge.trace(KeepsStats(), torch.ones(3, 4))
    x = torch.ones(2, 6)
    assert torch.equal(traced(x), x * 2)
