"""Sizes formatted into messages that are read back (issue 20, item 1).

A log call, a warning or ``print`` only shows its text where what receives it keeps
nothing: logging's own handlers writing to a real file (or the test runner's), no handler
at all, warnings' stock ``showwarning``. A handler that keeps records, a stream the code
reads back, a replaced ``showwarning`` keep the text, and the code may read it later: the
size is then guarded where the text is made, so other sizes are refused, never served
with the example's answer.
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
import warnings

import pytest
import torch

import tracebridge
from tracebridge.errors import GuardError

from .graph_helpers import guarded_at_other_sizes, loaded


class KeepingHandler(logging.Handler):
    """A handler of the user's that keeps each message (a log viewer, a test double)."""

    def __init__(self):
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


KEEPING = KeepingHandler()
BUFFER = io.StringIO()
SEEN: list[str] = []


@pytest.fixture
def loggers():
    """Loggers of this file, each with its own handler, put back after the test."""
    kept = logging.getLogger("tracebridge.tests.kept")
    buffered = logging.getLogger("tracebridge.tests.buffered")
    shown = logging.getLogger("tracebridge.tests.shown")
    quiet = logging.getLogger("tracebridge.tests.quiet")
    saved = [(lg, lg.handlers[:], lg.propagate, lg.level) for lg in (kept, buffered, shown, quiet)]
    kept.handlers[:] = [KEEPING]
    buffered.handlers[:] = [logging.StreamHandler(BUFFER)]
    shown.handlers[:] = [logging.StreamHandler(sys.__stderr__)]
    quiet.handlers[:] = [logging.NullHandler()]
    for lg in (kept, buffered, shown, quiet):
        lg.propagate = False
        lg.setLevel(logging.INFO)
    yield
    for lg, handlers, propagate, level in saved:
        lg.handlers[:] = handlers
        lg.propagate = propagate
        lg.setLevel(level)


def _kept_by_a_handler(x):
    logging.getLogger("tracebridge.tests.kept").warning(f"rows {x.shape[0]}")
    return x * (5.0 if KEEPING.messages[-1] == "rows 12" else 1.0)


def _formatted_late_for_a_handler(x):
    logging.getLogger("tracebridge.tests.kept").warning("rows %s", x.shape[0])
    return x * (5.0 if KEEPING.messages[-1] == "rows 12" else 1.0)


def _formatted_late_with_percent_d(x):
    # logging's C code reads the number for "%d" without asking it
    logging.getLogger("tracebridge.tests.kept").warning("rows %d", x.shape[0])
    return x * (5.0 if KEEPING.messages[-1] == "rows 12" else 1.0)


def _formatted_with_percent_d_then_logged(x):
    logging.getLogger("tracebridge.tests.kept").warning("rows %d" % x.shape[0])  # noqa: UP031
    return x * (5.0 if KEEPING.messages[-1] == "rows 12" else 1.0)


def _raises_with_percent_d(x):
    raise ValueError("rows %d" % x.shape[0])  # noqa: UP031


def _percent_d_caught_by_the_caller(x):
    try:
        _raises_with_percent_d(x)
    except ValueError as err:
        return x * (5.0 if str(err) == "rows 12" else 1.0)


def _percent_d_caught_here(x):
    try:
        raise ValueError("rows %d" % x.shape[0])  # noqa: UP031
    except ValueError as err:
        return x * (5.0 if str(err) == "rows 12" else 1.0)


class KeepingAdapter(logging.LoggerAdapter):
    """An adapter of the user's: its process() sees (and keeps) every message."""

    kept: list[str] = []

    def process(self, msg, kwargs):
        KeepingAdapter.kept.append(msg)
        return msg, kwargs


ADAPTER = KeepingAdapter(logging.getLogger("tracebridge.tests.quiet"), {})


def _kept_by_an_adapter(x):
    ADAPTER.warning(f"rows {x.shape[0]}")
    return x * (5.0 if KeepingAdapter.kept[-1] == "rows 12" else 1.0)


LOG_BUFFERED = logging.getLogger("tracebridge.tests.buffered")


def _written_to_a_buffer(x):
    LOG_BUFFERED.warning("rows %s", x.shape[0])
    return x * (5.0 if BUFFER.getvalue().endswith("rows 12\n") else 1.0)


def _written_to_a_buffer_as_text(x):
    LOG_BUFFERED.info(f"rows {x.shape[0]}")
    return x * (5.0 if BUFFER.getvalue().endswith("rows 12\n") else 1.0)


def _kept_by_a_replaced_showwarning(x):
    old = warnings.showwarning
    warnings.showwarning = lambda message, *rest, **options: SEEN.append(str(message))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn(f"rows {x.shape[0]}", stacklevel=1)
    finally:
        warnings.showwarning = old
    return x * (5.0 if SEEN[-1] == "rows 12" else 1.0)


def _warning_made_an_error(x):
    # prober19 F5: under an "error" filter the warning is an exception a handler reads
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            warnings.warn(f"rows {x.shape[0]}", stacklevel=1)
        except UserWarning as raised:
            return x * (5.0 if "12" in str(raised) else 1.0)
    return x


def _error_filter_picks_by_the_text(x):
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="rows 12")  # only this text raises
        try:
            warnings.warn(f"rows {x.shape[0]}", stacklevel=1)
            factor = 1.0
        except UserWarning:
            factor = 5.0
    return x * factor


@pytest.mark.parametrize(
    "fn",
    [
        _warning_made_an_error,
        _error_filter_picks_by_the_text,
        _kept_by_a_handler,
        _formatted_late_for_a_handler,
        _formatted_late_with_percent_d,
        _formatted_with_percent_d_then_logged,
        _percent_d_caught_by_the_caller,
        _percent_d_caught_here,
        _kept_by_an_adapter,
        _written_to_a_buffer,
        _written_to_a_buffer_as_text,
        _kept_by_a_replaced_showwarning,
    ],
)
def test_a_message_kept_where_it_goes_is_guarded(fn, loggers, tmp_path):
    guarded_at_other_sizes(fn, tmp_path)
    x = torch.ones(12, 3)
    assert torch.equal(fn(x), x * 5.0)  # eager reads the kept text back


LOG_SHOWN = logging.getLogger("tracebridge.tests.shown")
LOG_QUIET = logging.getLogger("tracebridge.tests.quiet")
LOG_NO_HANDLER = logging.getLogger("tracebridge.tests.none")


def _shown_on_stderr(x):
    LOG_SHOWN.warning(f"rows {x.shape[0]}")
    LOG_SHOWN.warning("rows %s of %d", x.shape[0], x.shape[1])
    LOG_SHOWN.info("rows %d" % x.shape[0])  # noqa: UP031
    LOG_QUIET.warning(f"rows {x.shape[0]}")
    LOG_NO_HANDLER.debug(f"rows {x.shape[0]}")  # below the level: never formatted further
    return x * 2


def _warned_and_shown(x):
    warnings.warn(f"rows {x.shape[0]}", stacklevel=1)
    torch._assert(x.shape[0] > 0, f"rows {x.shape[0]}")
    return x * 2


@pytest.mark.parametrize("fn", [_shown_on_stderr, _warned_and_shown])
def test_a_message_shown_where_nothing_keeps_it_stays_general(fn, loggers, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        traced = tracebridge.trace(fn, torch.ones(2, 3))
        assert not [g for g in traced.guards if "== 2" in g]
        again = loaded(traced, tmp_path)
        for rows in (5, 12, 7):
            x = torch.randn(rows, 3)
            assert torch.equal(traced(x), fn(x)) and torch.equal(again(x), fn(x))


# --- text a function of the user's makes for C code that calls it (map, sorted) ----------------


def fmt(n) -> str:
    return str(n)


def fmt_field(n) -> str:
    return f"{n}"


TABLE = {"12": 5.0}


def _joined_from_a_map(x):
    return x * (5.0 if "".join(map(fmt, [x.shape[0]])) == "12" else 1.0)


def _joined_from_a_map_of_fields(x):
    return x * TABLE.get("".join(map(fmt_field, [x.shape[0]])), 1.0)


def _listed_from_a_map(x):
    return x * (5.0 if list(map(fmt, [x.shape[0]]))[0] == "12" else 1.0)


def _sorted_by_text(x):
    return x * (5.0 if sorted([x.shape[0], 3], key=fmt)[0] == 12 else 1.0)


@pytest.mark.parametrize(
    "fn", [_joined_from_a_map, _joined_from_a_map_of_fields, _listed_from_a_map, _sorted_by_text]
)
def test_text_returned_to_c_code_that_decides_is_guarded(fn, tmp_path):
    guarded_at_other_sizes(fn, tmp_path)
    x = torch.ones(12, 3)
    assert torch.equal(fn(x), x * 5.0)


def _logged_from_a_map(x):
    LOG_SHOWN.info("shape " + "x".join(map(fmt, x.shape)))
    return x * 2


def test_text_a_map_joins_for_a_message_stays_general(loggers, tmp_path):
    traced = tracebridge.trace(_logged_from_a_map, torch.ones(2, 3))
    assert traced.guards == []
    again = loaded(traced, tmp_path)
    for shape in [(5, 3), (12, 4), (1, 7)]:
        x = torch.randn(*shape)
        assert torch.equal(traced(x), x * 2) and torch.equal(again(x), x * 2)


def _reads_its_own_warning(x):
    # prober19b F6: the trace's own warning about this text (the size is guarded) was
    # given inside the code's "error" filter, raised at the warn() line, and caught by the
    # code's except as if it were the code's own warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            warnings.warn(f"rows {x.shape[0]}", stacklevel=1)
            factor = 0.0
        except UserWarning as raised:
            factor = float(len(str(raised)))
    return x * factor


@pytest.mark.parametrize("check_trace", [True, False])
def test_the_traces_own_warnings_are_given_after_the_code_ran(check_trace):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        traced = tracebridge.trace(
            _reads_its_own_warning, torch.ones(3, 3), check_trace=check_trace
        )
    x = torch.ones(3, 3)
    assert torch.equal(traced(x), _reads_its_own_warning(x))  # 6.0: "rows 3"
    warned_at = f"{__file__}:{_reads_its_own_warning.__code__.co_firstlineno + 7}"
    said = f"formatted into the text of the warning at {warned_at}, which the filter "
    assert any(said + "warnings.simplefilter('error') may" in str(w.message) for w in caught)
    with pytest.raises(tracebridge.GuardError):
        traced(torch.ones(12, 3))


def _warned_beside_another_modules_error_filter(x):
    with warnings.catch_warnings():
        warnings.filterwarnings("error", module="some_other_library")  # never this module
        warnings.warn(f"rows {x.shape[0]}", stacklevel=1)
    return x * 2


def test_an_error_filter_for_another_module_leaves_the_message_general(tmp_path):
    """prober19b F9: pytest's ``error::UserWarning:some.module`` filters made every size
    in a warning's text a guard; a filter for another module never applies."""
    traced = tracebridge.trace(_warned_beside_another_modules_error_filter, torch.ones(2, 3))
    again = loaded(traced, tmp_path)
    for rows in (5, 12):
        x = torch.randn(rows, 3)
        assert torch.equal(traced(x), x * 2) and torch.equal(again(x), x * 2)


def _silences_the_trace_where_it_asks(x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tracebridge.TracerWarning)
        table = torch.tensor([1.0, 2.0, 3.0])  # a constant of the trace: warned of
    return x * table


def test_a_warning_ignored_where_it_is_made_stays_ignored():
    """Held until the code returns, a warning is still judged by the filters in force
    where it is made: a ``catch_warnings`` that ignores it there (tracebridge's own, or
    the code's) keeps it quiet."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tracebridge.trace(_silences_the_trace_where_it_asks, torch.ones(3))
    assert not [w for w in caught if issubclass(w.category, tracebridge.TracerWarning)]


def _warned_then_picked_by_the_filter(x):
    try:
        warnings.warn(f"rows {x.shape[0]}", stacklevel=1)
        factor = 1.0
    except UserWarning:
        factor = 5.0
    return x * factor


@pytest.mark.parametrize(
    "where",
    [
        {"message": "never matches this"},
        {"message": "columns"},  # the text begins "rows ": this pattern cannot match it
        {"message": "rows", "module": "some_other_library"},
        {"message": "rows", "lineno": 1},  # another line than the warning's
    ],
)
def test_an_error_filter_that_cannot_match_leaves_the_message_general(where, tmp_path):
    """prober19b F9: an "error" filter set around the trace whose pattern cannot match the
    warning's text (it disagrees with the text's literal beginning), or whose module or
    line is another, made the size a guard, refused as "not stable" by the check."""
    with warnings.catch_warnings():
        warnings.filterwarnings("error", **where)
        traced = tracebridge.trace(_warned_then_picked_by_the_filter, torch.ones(4, 3))
        assert not traced.guards
        again = loaded(traced, tmp_path)
        for rows in (5, 12):
            x = torch.randn(rows, 3)
            want = _warned_then_picked_by_the_filter(x)
            assert torch.equal(want, x) and torch.equal(traced(x), want)
            assert torch.equal(again(x), want)


@pytest.mark.parametrize(
    "where",
    [
        {"message": "rows 12"},
        {"message": "ROWS 1.$"},  # warnings ignore case
        {"message": "rows 12", "module": __name__.replace(".", r"\.")},  # this module
    ],
)
def test_an_error_filter_that_may_match_guards_the_size_and_names_itself(where, tmp_path):
    """An "error" filter set around the trace whose pattern may match the text at another
    size: traced with a guard (the check's second recording meets the same filters, so
    it is not refused as "not stable"), and the trace's warning names the filter."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("error", **where)
        traced = tracebridge.trace(_warned_then_picked_by_the_filter, torch.ones(4, 3))
        x = torch.ones(12, 3)
        assert torch.equal(_warned_then_picked_by_the_filter(x), x * 5.0)
        with pytest.raises(GuardError, match=r"x.shape\[0\] == 4") as info:
            traced(x)
        assert 'warnings.warn(f"rows {x.shape[0]}"' in str(info.value)
        y = torch.randn(4, 3)
        assert torch.equal(traced(y), _warned_then_picked_by_the_filter(y))
    said = [str(w.message) for w in caught if issubclass(w.category, tracebridge.TracerWarning)]
    pattern = where["message"]
    assert any(
        f"the filter warnings.filterwarnings('error', message={pattern!r}" in s for s in said
    )


# prober19b F11: output silenced around the trace call
LOG_UNCONFIGURED = logging.getLogger("tracebridge.tests.unconfigured")
LOG_UNCONFIGURED.propagate = False  # no handler anywhere: logging's lastResort, sys.stderr
READ_BACK = io.StringIO()


def _printed(x):
    print(f"batch {x.shape[0]}")
    return x[: x.shape[0] - 1]


def _logged_to_last_resort(x):
    LOG_UNCONFIGURED.warning(f"batch {x.shape[0]}")
    return x[: x.shape[0] - 1]


def _printed_and_read_back(x):
    print(f"batch {x.shape[0]}")
    return x * (5.0 if READ_BACK.getvalue().endswith("batch 12\n") else 1.0)


@pytest.mark.parametrize(
    ("fn", "redirect"),
    [(_printed, contextlib.redirect_stdout), (_logged_to_last_resort, contextlib.redirect_stderr)],
)
def test_output_silenced_around_the_trace_leaves_the_size_general(fn, redirect, tmp_path):
    """A buffer that only the caller's ``with redirect_stdout(io.StringIO())`` holds is
    read back by no code of the trace's: a printed or logged size stays general."""
    handlers = LOG_UNCONFIGURED.handlers[:]  # pytest's capture may have put its own there
    LOG_UNCONFIGURED.handlers.clear()
    try:
        _silenced_around_the_trace(fn, redirect, tmp_path)
    finally:
        LOG_UNCONFIGURED.handlers[:] = handlers


def _silenced_around_the_trace(fn, redirect, tmp_path):
    with redirect(io.StringIO()) as silenced:
        traced = tracebridge.trace(fn, torch.randn(4, 2))
    assert "batch 4" in silenced.getvalue()  # the code's output went there
    assert not traced.guards
    again = loaded(traced, tmp_path)
    for rows in (6, 12):
        x = torch.randn(rows, 2)
        with redirect(io.StringIO()):
            want = fn(x)
            assert torch.equal(traced(x), want) and torch.equal(again(x), want)


def test_output_redirected_to_a_buffer_the_code_reads_is_guarded():
    with contextlib.redirect_stdout(READ_BACK):
        traced = tracebridge.trace(_printed_and_read_back, torch.ones(4, 2))
        with pytest.raises(GuardError, match=r"x.shape\[0\] == 4"):
            traced(torch.ones(12, 2))
        x = torch.ones(12, 2)
        assert torch.equal(_printed_and_read_back(x), x * 5.0)


def _replaces_stdout_and_reads_it(x):
    old = sys.stdout
    sys.stdout = io.StringIO()  # put there by the traced code: in its reach
    try:
        print(f"batch {x.shape[0]}")
        text = sys.stdout.getvalue()
    finally:
        sys.stdout = old
    return x * (5.0 if text == "batch 12\n" else 1.0)


def _redirects_inside_and_reads_it(x):
    with contextlib.redirect_stdout(io.StringIO()):
        print(f"batch {x.shape[0]}")
        text = sys.stdout.getvalue()
    return x * (5.0 if text == "batch 12\n" else 1.0)


@pytest.mark.parametrize("fn", [_replaces_stdout_and_reads_it, _redirects_inside_and_reads_it])
def test_a_buffer_the_traced_code_puts_in_place_is_in_its_reach(fn, tmp_path):
    guarded_at_other_sizes(fn, tmp_path)
    x = torch.ones(12, 3)
    assert torch.equal(fn(x), x * 5.0)


def _size_one_path_and_a_raised_warning(x):
    if x.shape[0] > 1:  # a size-1 specialisation records the code at one row again
        x = x * 2
    try:
        warnings.warn("rows of this kind are deprecated", stacklevel=1)
        factor = 1.0
    except UserWarning:
        factor = 5.0
    return x * factor


def test_every_recording_meets_the_filters_the_user_set():
    """The check's second recording, the size-1 probes and the no-autograd variant ran
    with every warning ignored: under the user's "error" filter they took the path where
    the warning does not raise, and a call at one row served it (eager 5, traced 1)."""
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        warnings.filterwarnings("error", message="rows of this kind")
        traced = tracebridge.trace(_size_one_path_and_a_raised_warning, torch.ones(4, 2))
        for rows in (1, 4, 6):
            x = torch.randn(rows, 2)
            want = _size_one_path_and_a_raised_warning(x)
            assert torch.equal(traced(x), want)
    assert not [w for w in shown if "rows of this kind" in str(w.message)]  # raised, not shown
