"""Sizes formatted as text (issue 20, item 1): a message stays general, a decision guards.

timm's patch embedding formats the traced image height into the message of an assertion;
the trace must stay valid for every height the assertion accepts. Text that decides a
branch (compared, hashed, a dict key, ``in``, ``if``, parsed back) still records a guard,
at the line that decides.
"""

from __future__ import annotations

import io
import logging
import os
import sys
import warnings

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge import GuardError

from .graph_helpers import guarded_at_other_sizes

HERE = os.path.basename(__file__)


# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


def _assert(condition: bool, message: str) -> None:
    """timm.layers' fallback ``_assert``: a plain assert with a message."""
    assert condition, message


class PatchEmbed(nn.Module):
    """timm's PatchEmbed with dynamic sizes: divisibility asserted with formatted sizes."""

    def __init__(self, patch=4):
        super().__init__()
        self.patch_size = (patch, patch)
        self.proj = nn.Conv2d(3, 8, patch, patch)

    def forward(self, x):
        B, C, H, W = x.shape
        _assert(
            H % self.patch_size[0] == 0,
            f"Input height ({H}) should be divisible by patch size ({self.patch_size[0]}).",
        )
        _assert(W % self.patch_size[1] == 0, "Input width (%s) bad" % W)  # noqa: UP031
        torch._assert(W % self.patch_size[1] == 0, "width {} bad".format(W))  # noqa: UP032
        return self.proj(x).flatten(2).transpose(1, 2)


def test_patch_embedding_message_keeps_the_trace_general_at_three_sizes(tmp_path):
    m = PatchEmbed()
    traced = tracebridge.trace(m, torch.randn(1, 3, 16, 16))
    path = tmp_path / "pe.tb"
    traced.save(path)
    loaded = tracebridge.load(path)
    for h, w in [(8, 8), (16, 32), (24, 12)]:
        x = torch.randn(2, 3, h, w)
        assert torch.allclose(traced(x), m(x), atol=1e-6)
        assert torch.equal(loaded(x), traced(x))
    # The guard recorded is the divisibility, not the example's size.
    assert traced.guards and all("% 4) == 0" in g for g in traced.guards)
    with pytest.raises(GuardError, match=r"x.shape\[2\] % 4\) == 0"):
        traced(torch.randn(1, 3, 10, 8))


class TextDecides(nn.Module):
    def forward(self, x):
        key = f"{x.shape[1]}"
        if key == "4":  # the text decides the branch
            return x * 2
        return x + 1


class TextKeys(nn.Module):
    """A dict cache keyed on text made from sizes, and ``in`` on it."""

    def __init__(self):
        super().__init__()
        self.table = {"4": 2.0, "6": 3.0}

    def forward(self, x):
        return x * self.table[str(x.shape[1])]


class TextJoined(nn.Module):
    """Text joined from sizes and used as a key: Python builds it, the trace guards it."""

    def forward(self, x):
        key = f"{x.shape[0]}x{x.shape[1]}"
        return x * 2 if key in {"2x4", "3x3"} else x - 1


class TextParsed(nn.Module):
    def forward(self, x):
        return x.new_zeros(int(str(x.shape[1])))


@pytest.mark.parametrize(
    "module, example, other, line",
    [
        (TextDecides(), (2, 4), (2, 5), 'if key == "4"'),
        (TextKeys(), (2, 4), (2, 6), "self.table[str(x.shape[1])]"),
        (TextJoined(), (2, 4), (2, 5), 'key = f"{x.shape[0]}x{x.shape[1]}"'),
        (TextParsed(), (2, 4), (2, 5), "int(str(x.shape[1]))"),
    ],
)
def test_text_that_decides_guards_at_the_deciding_line(module, example, other, line, tmp_path):
    traced = tracebridge.trace(module, torch.randn(*example))
    x = torch.randn(*example)
    assert torch.equal(traced(x), module(x))
    loaded = tracebridge.load(traced.save(tmp_path / "m.tb") or tmp_path / "m.tb")
    for fn in (traced, loaded):
        with pytest.raises(GuardError) as info:
            fn(torch.randn(*other))
        assert HERE in str(info.value) and line in str(info.value)


def test_text_reads_as_the_value_and_goes_into_messages(capsys):
    def f(x):
        n = x.shape[0]
        print(str(n), repr(n), format(n, "03d"), f"{n}", "{}".format(n), "%d" % n)  # noqa: UP031, UP032
        return x.sum(0)

    traced = tracebridge.trace(f, torch.randn(5, 2))
    assert capsys.readouterr().out.splitlines()[0] == "5 5 005 5 5 5"
    assert traced.guards == []
    x = torch.randn(7, 2)
    assert torch.equal(traced(x), x.sum(0))


def test_text_kept_in_a_container_is_guarded_where_it_is_made():
    """Text stored in a tuple, a list or a dict may be read by any code later, C code
    included (``"".join``, ``re``, ``json``): it cannot remember there."""
    seen = {}

    def f(x):
        n = x.shape[0]
        seen["text"] = (str(n), f"{n}")
        return x.sum(0)

    traced = tracebridge.trace(f, torch.randn(5, 2))
    assert seen["text"] == ("5", "5")
    assert traced.guards and all("x.shape[0] == 5" in g for g in traced.guards)


class CheckedHeight(nn.Module):
    """torchvision's ViT: the image height checked against the configured size, with a
    message formatted from the traced height."""

    def forward(self, x):
        _n, _c, h, _w = x.shape
        torch._assert(h == 32, f"Wrong image height! Expected {32} but got {h}!")
        return x * 2


def test_a_library_message_in_a_guard_says_it_was_made_when_traced():
    """The message shows the trace's sizes ("got 32" while the call has 64): the guard
    says whose they are, beside what it assumed, rather than read as the call's sizes."""
    traced = tracebridge.trace(CheckedHeight(), (torch.randn(1, 3, 32, 32),))
    with pytest.raises(GuardError) as caught:
        traced(torch.randn(1, 3, 64, 32))
    text = str(caught.value)
    assert "x.shape[2] == 32" in text
    assert (
        "(the library's message when traced: Wrong image height! Expected 32 but got 32!)" in text
    )


# --- text kept in a local variable -----------------------------------------------------------


class MessageInAVariable(nn.Module):
    """The message built first, kept in locals, then asserted or raised: Swin-style windowed
    attention checks (``msg = f"..."; _assert(H % w == 0, msg)``)."""

    def forward(self, x):
        B, C, H, W = x.shape
        msg = f"height ({H}) must be divisible by the window (4)"
        detail: str = "width {} bad".format(W)  # noqa: UP032
        detail += f" (batch {B})"
        unused = f"{H}x{W}"  # noqa: F841 -- never read: it decides nothing
        copied = msg
        _assert(H % 4 == 0, copied)
        if W % 4 != 0:
            raise ValueError(detail)
        return x.mean((2, 3))


def test_text_kept_in_a_local_that_only_reaches_messages_needs_no_guard(tmp_path):
    m = MessageInAVariable()
    traced = tracebridge.trace(m, torch.randn(1, 3, 8, 8))
    loaded = tracebridge.load(traced.save(tmp_path / "m.tb") or tmp_path / "m.tb")
    for shape in [(2, 3, 4, 12), (1, 3, 16, 8), (3, 3, 20, 4)]:
        x = torch.randn(*shape)
        assert torch.equal(traced(x), m(x)) and torch.equal(loaded(x), m(x))
    assert all("shape[0]" not in g and "== 8" not in g for g in traced.guards)


class TextLocalCompared(nn.Module):
    def forward(self, x):
        key = f"n={x.shape[0]}"
        return x * 2 if key == "n=2" else x + 1


class TextLocalStored(nn.Module):
    def forward(self, x):
        note = f"seen {x.shape[0]} rows"
        self.note = note  # kept on the module: anything may read it later
        return x * 2


class TextLocalsRead(nn.Module):
    def forward(self, x):
        note = f"seen {x.shape[0]} rows"  # noqa: F841 -- read through locals() below
        return x * len(locals()["note"])


class TextLocalReturnedByHelper(nn.Module):
    @staticmethod
    def describe(x):
        text = f"{x.shape[0]}"
        return text

    def forward(self, x):
        return x * 2 if self.describe(x) == "2" else x + 1


@pytest.mark.parametrize(
    "module, line",
    [
        (TextLocalCompared(), 'key = f"n={x.shape[0]}"'),
        (TextLocalStored(), 'note = f"seen {x.shape[0]} rows"'),
        (TextLocalsRead(), 'note = f"seen {x.shape[0]} rows"'),
        # one field: the text itself remembers, so the guard is where it decides
        (TextLocalReturnedByHelper(), 'if self.describe(x) == "2"'),
    ],
)
def test_text_kept_in_a_local_read_for_anything_else_is_guarded(module, line):
    traced = tracebridge.trace(module, torch.randn(2, 3))
    x = torch.randn(2, 3)
    assert torch.equal(traced(x), module(x))
    with pytest.raises(GuardError) as info:
        traced(torch.randn(5, 3))
    assert HERE in str(info.value) and line in str(info.value)


# --- text that is read back after all (found by review): guarded ------------------------------


def _in_a_class_body(x):
    H = x.shape[1]

    class Key:
        msg = f"h{H}"

    return x + 1 if Key.msg == "h3" else x - 1


def _check_cache(key):  # named like a check, but decides
    return key == "h3"


def _through_a_function_named_like_a_check(x):
    key = f"h{x.shape[1]}"
    return x + 1 if _check_cache(key) else x - 1


def _raised_and_caught(x):
    msg = f"h{x.shape[1]}"
    try:
        raise ValueError(msg)
    except ValueError as exc:
        return x + 1 if str(exc) == "h3" else x - 1


def _read_through_the_frame(x):
    msg = f"h{x.shape[1]}"
    if False:
        print(msg)
    return x + 1 if sys._getframe().f_locals["msg"] == "h3" else x - 1


def _warned_and_recorded(x):
    msg = f"h{x.shape[1]}"
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        warnings.warn(msg, stacklevel=1)
    return x + 1 if str(seen[0].message) == "h3" else x - 1


def _an_exception_kept_as_an_object(x):
    err = ValueError(f"h{x.shape[1]}")
    return x + 1 if str(err) == "h3" else x - 1


@pytest.mark.parametrize(
    "fn",
    [
        _in_a_class_body,
        _through_a_function_named_like_a_check,
        _raised_and_caught,
        _read_through_the_frame,
        _warned_and_recorded,
        _an_exception_kept_as_an_object,
    ],
)
def test_text_read_back_after_all_is_guarded(fn):
    traced = tracebridge.trace(fn, torch.zeros(2, 3))
    assert torch.equal(traced(torch.zeros(2, 3)), fn(torch.zeros(2, 3)))
    with pytest.raises(GuardError):
        traced(torch.zeros(2, 4))


# --- text that C code reads, or that a caller reads back (found by review): guarded ----------

TABLE = {"k12": 5.0, "12x3": 5.0}


def _kept_then_joined_again(x):
    s = str(x.shape[0])
    return x * TABLE.get(f"k{s}", 1.0)


def _kept_then_formatted_again(x):
    s = str(x.shape[0])
    return x * TABLE.get("k{}".format(s), 1.0)  # noqa: UP032


def catalog_scale(key):  # "log" is in its name, but it is no message
    return TABLE.get(key, 1.0)


def _given_to_a_call_named_like_a_log(x):
    return x * catalog_scale(f"{x.shape[0]}x{x.shape[1]}")


def _raises_a_size(x):
    n = x.shape[0]
    if n > 0:
        raise ValueError(f"size {n}")


def _message_caught_by_the_caller(x):
    try:
        _raises_a_size(x)
    except ValueError as err:
        return x * (5.0 if str(err) == "size 12" else 1.0)
    return x


def _warning_recorded_here(x):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        warnings.warn(f"size {x.shape[0]}", stacklevel=1)
    return x * (5.0 if str(seen[0].message) == "size 12" else 1.0)


def _matched_by_re(x):
    import re

    return x * (5.0 if re.fullmatch("12", str(x.shape[0])) else 1.0)


def _parsed_with_a_base(x):
    return x * float(int(str(x.shape[0]), 10))


def _joined_from_a_list(x):
    return x * TABLE.get("".join(["k", str(x.shape[0])]), 1.0)


def _compared_by_the_literal_s_method(x):
    return x * (5.0 if "12".__eq__(str(x.shape[0])) else 1.0)


@pytest.mark.parametrize(
    "fn",
    [
        _kept_then_joined_again,
        _kept_then_formatted_again,
        _given_to_a_call_named_like_a_log,
        _message_caught_by_the_caller,
        _warning_recorded_here,
        _matched_by_re,
        _parsed_with_a_base,
        _joined_from_a_list,
        _compared_by_the_literal_s_method,
    ],
)
def test_text_read_out_of_sight_is_guarded(fn, tmp_path):
    guarded_at_other_sizes(fn, tmp_path)


def check_divisible(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


class MessagesOfManyKinds(nn.Module):
    """Messages that stay messages: a dropped call named as a check, torch._check with a
    lambda, a log call, text kept and only compared (it guards where it decides)."""

    def forward(self, x):
        B, C, H, W = x.shape
        check_divisible(H % 2 == 0, f"height {H} is odd")
        torch._check(W % 2 == 0, lambda: f"width {W} is odd")
        logging.getLogger("tracebridge.tests").debug(f"shape {B}x{C}x{H}x{W}")
        kind = str(C)
        return x * 2 if kind == "3" else x + 1


def test_messages_of_many_kinds_stay_general(tmp_path):
    m = MessagesOfManyKinds()
    traced = tracebridge.trace(m, torch.randn(1, 3, 4, 4))
    loaded = tracebridge.load(traced.save(tmp_path / "m.tb") or tmp_path / "m.tb")
    for shape in [(2, 3, 8, 6), (3, 3, 2, 10)]:
        x = torch.randn(*shape)
        assert torch.equal(traced(x), m(x)) and torch.equal(loaded(x), m(x))
    with pytest.raises(GuardError, match=r'if kind == "3"|kind == "3"'):
        traced(torch.randn(1, 4, 4, 4))


# --- text of one field given to a message: plain text, nothing guarded ----------------------


def _warned_once(x):
    warnings.warn(f"{x.shape[0]}", stacklevel=1)  # the registry hashes it on the first call
    return x * 2


def _asserted_with_its_repr(x):
    torch._assert(x.shape[0] > 0, repr(x.shape))  # an argument of a torch function
    return x * 2


def _asserted_with_its_str(x):
    torch._assert(x.shape[0] > 0, str(x.shape[0]))
    return x * 2


def _warned_twice(x):
    warnings.warn(str(x.shape[0]), stacklevel=1)
    warnings.warn(str(x.shape[0]), stacklevel=1)
    return x * 2


def _interned(x):
    import sys as _sys

    key = _sys.intern(str(x.shape[1]))  # C wants an exact str: guarded, then plain
    return x * {"3": 2.0}.get(key, 1.0)


@pytest.mark.parametrize(
    "fn", [_warned_once, _asserted_with_its_repr, _asserted_with_its_str, _warned_twice]
)
def test_text_of_one_field_in_a_message_stays_general(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        traced = tracebridge.trace(fn, torch.ones(2, 3))
    assert not [g for g in traced.guards if "== 2" in g]  # torch._assert's own x.shape[0] > 0
    assert torch.equal(traced(torch.ones(5, 3)), torch.full((5, 3), 2.0))


def test_text_given_to_c_that_wants_a_plain_str_is_guarded_and_plain():
    traced = tracebridge.trace(_interned, torch.ones(2, 3))
    assert torch.equal(traced(torch.ones(4, 3)), _interned(torch.ones(4, 3)))
    with pytest.raises(GuardError, match=r"x.shape\[1\] == 3"):
        traced(torch.ones(2, 5))


def _printed_into_a_buffer_read_back(x):
    buffer = io.StringIO()
    print(f"{x.shape[0]}", file=buffer)
    return x * (5.0 if buffer.getvalue() == "12\n" else 1.0)


def test_text_printed_into_a_buffer_that_is_read_back_is_guarded():
    traced = tracebridge.trace(_printed_into_a_buffer_read_back, torch.ones(2, 3))
    with pytest.raises(GuardError, match=r"x.shape\[0\] == 2"):
        traced(torch.ones(12, 3))


# --- a call named like a message is looked up: a user's recorder keeps the text ----------------


class Recorder:
    def __init__(self):
        self.lines = []

    def log(self, message):  # named as a log call, but it keeps the text
        self.lines.append(message)


class Shouter:
    def warn(self, message):  # named as a warning, and only shows the text
        print(f"!! {message}", file=sys.stderr)


RECORDER, SHOUTER = Recorder(), Shouter()


def _kept_by_a_recorder(x):
    RECORDER.log(f"rows={x.shape[0]}")
    return x * (5.0 if RECORDER.lines[-1] == "rows=12" else 1.0)


def _kept_by_a_recorder_as_one_field(x):
    RECORDER.log(str(x.shape[0]))
    return x * (5.0 if RECORDER.lines[-1] == "12" else 1.0)


def _shown_by_a_user_function(x):
    SHOUTER.warn(f"rows={x.shape[0]}")
    logging.getLogger("tracebridge.tests").info("shape " + "x".join(str(s) for s in x.shape))
    return x * 2


def test_a_user_call_named_like_a_log_that_keeps_the_text_is_guarded():
    for fn in (_kept_by_a_recorder, _kept_by_a_recorder_as_one_field):
        traced = tracebridge.trace(fn, torch.ones(2, 3))
        with pytest.raises(GuardError, match=r"x.shape\[0\] == 2"):
            traced(torch.ones(12, 3))


def test_a_user_call_that_only_shows_the_text_and_joined_sizes_stay_general():
    traced = tracebridge.trace(_shown_by_a_user_function, torch.ones(2, 3))
    assert traced.guards == []
    assert torch.equal(traced(torch.ones(12, 5)), torch.full((12, 5), 2.0))


class Tracker:
    """A recorder whose log() hands the text to its own info(), which keeps it."""

    def __init__(self):
        self.history = []

    def log(self, message):
        self.info(message)

    def info(self, message):
        self.history.append(message)


TRACKER = Tracker()


def _kept_two_calls_down(x):
    TRACKER.log(f"rows={x.shape[0]}")
    return x * (5.0 if TRACKER.history[-1] == "rows=12" else 1.0)


def test_text_kept_by_a_method_the_message_call_calls_is_guarded():
    traced = tracebridge.trace(_kept_two_calls_down, torch.ones(2, 3))
    with pytest.raises(GuardError, match=r"x.shape\[0\] == 2"):
        traced(torch.ones(12, 3))


class PatchCheck(nn.Module):
    def forward(self, x):
        B, C, H, W = x.shape
        torch._assert(H % 4 == 0, f"Input height ({H}) should be divisible by 4.")
        logging.getLogger("tracebridge.tests").debug(f"width {W}")
        return x.flatten(2).mean(-1)


class UnderContexts(nn.Module):
    """Context managers that read no message around the check: a kernel choice, a lock,
    warnings' filters put back, a handler for errors the assertion cannot raise."""

    def __init__(self):
        super().__init__()
        self.inner = PatchCheck()
        self.lock = __import__("threading").Lock()

    def forward(self, x):
        kernel = torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH)
        with kernel, self.lock, warnings.catch_warnings():
            try:
                return self.inner(x)
            except KeyError as err:
                raise RuntimeError("no such key") from err


def test_a_message_under_contexts_that_read_nothing_stays_general():
    model = UnderContexts()
    traced = tracebridge.trace(model, torch.randn(1, 3, 8, 8))
    x = torch.randn(2, 3, 16, 12)
    assert torch.equal(traced(x), model(x))


# --- a message handed on to torch's checks (prober24b F1) --------------------------------


def _compilable_check(condition, message) -> None:
    """transformers' ``torch_compilable_check`` outside torch.compile: the message, made
    eagerly, is given to torch's check in a lambda, read only where the check fails."""
    torch._check_tensor_all_with(ValueError, condition, lambda: message)


def _compilable_check_as_transformers(cond, msg, error_type=ValueError) -> None:
    """transformers 5's ``torch_compilable_check`` as it is written: torch imported in the
    function, the message wrapped in a nested function unless it is one."""
    if os.getenv("TRANSFORMERS_DISABLE_TORCH_CHECK", "0") == "1":
        return
    import torch

    if not callable(msg):

        def msg_callable():
            return msg
    else:
        msg_callable = msg
    if callable(cond):
        cond = cond()
    if isinstance(cond, torch.Tensor):
        torch._check_tensor_all_with(error_type, cond, msg_callable)
    else:
        torch._check_with(error_type, cond, msg_callable)


def _checked_with_a_comparison(condition, message) -> None:
    torch._check_tensor_all_with(ValueError, condition, lambda: message)
    if message.startswith("tokens: 4"):  # the text decides after all
        raise RuntimeError("four tokens")


class ImageTokens(nn.Module):
    """A vision-language model's check that its image features fill its image tokens:
    a tensor count and a size product formatted into the check's message."""

    def __init__(self, check=_compilable_check) -> None:
        super().__init__()
        self.check = check

    def forward(self, ids, features):
        n = (ids == 3).sum()
        self.check(
            n * features.shape[-1] == features.numel(),
            f"Image features and image tokens do not match, tokens: {n}, "
            f"features: {features.shape[0] * features.shape[1]}",
        )
        torch._check(features.shape[1] == 4, lambda: f"{features.shape[1]} features a row")
        return features.sum(1) * n


def _image_inputs(batch: int) -> tuple:
    ids = torch.randint(4, 50, (batch, 10), generator=torch.Generator().manual_seed(batch))
    ids[:, :4] = 3
    return ids, torch.randn(batch, 4, 8, generator=torch.Generator().manual_seed(batch))


@pytest.mark.parametrize("check", [_compilable_check, _compilable_check_as_transformers])
def test_a_count_formatted_into_a_torch_check_message_stays_general(check, tmp_path):
    module = ImageTokens(check)
    traced = tracebridge.trace(module, _image_inputs(2))
    path = tmp_path / "tokens.tb"
    traced.save(path)
    loaded = tracebridge.load(path)
    for batch in (1, 2, 3, 4):
        inputs = _image_inputs(batch)
        assert torch.equal(traced(*inputs), module(*inputs))
        assert torch.equal(loaded(*inputs), module(*inputs))
    bad_ids, features = _image_inputs(3)
    bad_ids[0, 0] = 9  # 11 image tokens for 12 rows of features: the check itself fails
    with pytest.raises(ValueError, match="tokens: 11, features: 12"):
        module(bad_ids, features)
    with pytest.raises(GuardError, match="is True, but now it is False"):
        traced(bad_ids, features)  # the check's condition is the guard, not the count


def test_a_message_a_check_helper_also_reads_is_guarded():
    module = ImageTokens(_checked_with_a_comparison)
    traced = tracebridge.trace(module, _image_inputs(2))
    assert torch.equal(traced(*_image_inputs(2)), module(*_image_inputs(2)))
    with pytest.raises(GuardError):
        traced(*_image_inputs(3))
