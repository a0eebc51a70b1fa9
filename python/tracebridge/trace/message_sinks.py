"""Where a log call, a warning or ``print`` sends its text, looked up when the text is made.

Note: a message is a message only where nothing keeps it.
  trace/text.py leaves a size formatted into a message general: the text only shows. That
  holds only while what receives the text shows it and drops it. ``logging`` hands a record
  to every handler from the logger up its parents (``propagate``), or to ``lastResort``;
  a handler of the user's may keep ``record.getMessage()``, a ``StreamHandler`` may write
  to an ``io.StringIO`` the code reads back, a formatter or a filter of the user's sees the
  text. ``warnings`` shows through ``showwarning`` / ``_showwarnmsg_impl``, which the code
  may replace with its own (or record with ``catch_warnings(record=True)``), writing to
  ``sys.stderr``, which may be a buffer. So these functions read the configuration as it
  is when the text is made, without running the user's code: the text only shows where
  every handler it reaches is logging's own (``StreamHandler``, the file handlers,
  ``NullHandler``, with logging's formatter and filters) writing to a real file, or the
  test runner's (pytest's capture: read by its report and the test's own assertions, never
  by the traced code during a call), where warnings' functions are the stock ones, and
  where a warning a filter ignores never gets that far. Anything else keeps the text, and
  the size is guarded where the text is made.
"""

from __future__ import annotations

import contextlib
import gc
import io
import logging
import re
import sys
import threading
import types
import warnings

from ..errors import TracerWarning
from ..source import OWN_DIR

try:  # the parser of re's patterns (sre_parse before Python 3.11)
    from re import _parser as _regex_parser
except ImportError:  # pragma: no cover - Python 3.10
    import sre_parse as _regex_parser

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "exception": logging.ERROR,
    "critical": logging.CRITICAL,
    "fatal": logging.CRITICAL,
}
# Streams that are real files (a terminal, a pipe, a file on disk: read back by no code of
# the trace's) are of these exact types; a subclass may keep what it is given.
_FILE_TYPES = (io.TextIOWrapper, io.BufferedWriter, io.BufferedRandom, io.FileIO)
# Modules whose streams and handlers show text to a person or a test runner's report.
_DISPLAY_MODULES = ("_pytest", "ipykernel")


def level_of_call(name: str) -> int:
    """The level a logger method named ``name`` logs at (``warning_once``: WARNING), or 0
    where the name does not say (``log(level, ...)``): every handler may then see it."""
    for word in name.lower().split("_"):
        if word in _LEVELS:
            return _LEVELS[word]
    return 0


def _owned_by_display(obj) -> bool:
    module = getattr(type(obj), "__module__", "") or ""
    return module.split(".")[0] in _DISPLAY_MODULES


def stream_out_of_reach(stream) -> bool:
    """Whether text written to ``stream`` cannot be read back by the code: a real file
    (its ``fileno`` answers), a test runner's or a notebook's capture, or an
    ``io.StringIO`` that was ``sys.stdout``/``sys.stderr`` when the recording began and
    that only frames outside the traced code hold (``with redirect_stdout(io.StringIO()):``
    around the trace: the caller's ``with`` keeps it)."""
    if stream is None or _owned_by_display(stream):
        return True
    if type(stream) is io.StringIO:
        return _there_when_recording_began(stream) and _held_out_of_reach(stream, sys._getframe(1))
    if type(stream) not in _FILE_TYPES:
        return False  # a user's stream object: it may be read back, or keep the text
    try:
        return isinstance(stream.fileno(), int)
    except (OSError, ValueError):
        return False


def _stock_handler_types() -> tuple:
    found = [logging.StreamHandler, logging.FileHandler, type(logging.lastResort)]
    handlers = sys.modules.get("logging.handlers")  # not imported: none of its handlers exist
    if handlers is not None:
        found += [
            handlers.RotatingFileHandler,
            handlers.TimedRotatingFileHandler,
            handlers.WatchedFileHandler,
        ]
    return tuple(found)


def _filters_stock(filterer) -> bool:
    """Whether every filter is logging's own (a name match): a filter of the user's (a
    callable, a subclass) reads the record, its message included."""
    return all(type(f) is logging.Filter for f in getattr(filterer, "filters", ()))


def handler_keeps_nothing(handler) -> bool:
    """Whether ``handler`` shows a record and drops it (see the module Note)."""
    if _owned_by_display(handler) or type(handler) is logging.NullHandler:
        return True
    if type(handler) not in _stock_handler_types() or not _filters_stock(handler):
        return False
    formatter = handler.formatter
    if formatter is not None and type(formatter) is not logging.Formatter:
        return False
    stream = handler.__dict__.get("stream", _NO_STREAM)
    if stream is _NO_STREAM:
        stream = sys.stderr  # lastResort writes to the current sys.stderr
    if stream is None:
        return isinstance(handler, logging.FileHandler)  # opened on its first record
    return stream_out_of_reach(stream)


_NO_STREAM = object()


def logger_keeps_nothing(logger: logging.Logger, level: int) -> bool:
    """Whether a record of ``level`` (0: not known) logged on ``logger`` reaches only
    handlers that keep nothing, walking ``propagate`` up to the root (or to
    ``lastResort`` where no handler is found), as ``Logger.callHandlers`` does."""
    if level and (logger.manager.disable >= level or not logger.isEnabledFor(level)):
        return True  # never made into a record
    if logger.disabled:
        return True
    if type(logger) not in (logging.Logger, logging.RootLogger):
        return False  # a logger class of the user's (setLoggerClass) may keep the text
    found = False
    current = logger
    while current is not None:
        if not _filters_stock(current):
            return False
        for handler in current.handlers:
            found = True
            if (not level or level >= handler.level) and not handler_keeps_nothing(handler):
                return False
        if not current.propagate:
            break
        current = current.parent
    last = logging.lastResort
    if not found and last is not None and (not level or level >= last.level):
        return handler_keeps_nothing(last)
    return True


def logger_named(name: str | None) -> logging.Logger:
    """The logger ``logging.getLogger(name)`` gives, or, where none of that name was made
    yet, the nearest one above it (a new logger has no handler and propagates to it)."""
    if not name:
        return logging.getLogger()
    known = logging.Logger.manager.loggerDict
    while name:
        found = known.get(name)
        if isinstance(found, logging.Logger):
            return found
        name = name.rpartition(".")[0]
    return logging.getLogger()


def loggers_keep_nothing(loggers, level: int) -> bool:
    """:func:`logger_keeps_nothing` for each of ``loggers``; None: every logger there is
    (a logger the source makes in the line: ``logging.getLogger(name).info(...)``)."""
    if loggers is None:
        known = logging.Logger.manager.loggerDict.values()
        loggers = [logging.getLogger()] + [lg for lg in known if isinstance(lg, logging.Logger)]
    return all(logger_keeps_nothing(lg, level) for lg in loggers)


# --- warnings ---------------------------------------------------------------------------


def _warnings_own(function, name: str) -> bool:
    code = getattr(function, "__code__", None)
    return code is not None and code.co_filename == warnings.__file__ and code.co_name == name


def warning_ignored(category) -> bool:
    """Whether the filters ignore a warning of ``category`` (None: not known) wherever it
    is warned: the first filter that may apply says "ignore" and depends on neither the
    text, the module nor the line."""
    for action, message, kind, module, line in warnings.filters:
        if category is None:
            if kind is not Warning:
                return False  # it may or may not apply
        elif not issubclass(category, kind):
            continue
        if message is not None or module is not None or line:
            return False
        return action == "ignore"
    return False  # no filter: the default action shows it


def warning_may_raise(
    category, module_name: str | None = None, head: str = "", line: int | None = None
) -> tuple | None:
    """The filter that may turn a warning of ``category`` (None: not known) warned from
    the module ``module_name`` at ``line`` (None: not known), whose text begins with
    ``head`` whatever the traced numbers are, into an exception
    (``simplefilter("error")``, ``filterwarnings("error", message=...)``): a handler can
    then read the text, and a filter's pattern chooses by it. None where none may.
    Filters after an unconditional one that applies are never reached; one for another
    module, another line, or whose pattern no text that begins with ``head`` matches never
    applies (pytest's ``error::...:some.module``, ``error:never this text``)."""
    for entry in warnings.filters:
        action, message, kind, module, at = entry
        if category is not None and not issubclass(category, kind):
            continue
        if module is not None and module_name is not None and not module.match(module_name):
            continue
        if at and line is not None and at != line:
            continue
        if message is not None and not pattern_may_match(message, head):
            continue
        if action == "error":
            return entry
        unconditional = message is None and module is None and not at
        if unconditional and (category is not None or kind is Warning):
            return None
    return None


def pattern_may_match(pattern, head: str) -> bool:
    """Whether ``pattern`` (a filter's compiled message pattern, matched at the start of
    the text, ignoring case) may match some text that begins with ``head``: False where
    the literal characters the pattern begins with disagree with ``head``."""
    try:
        parsed = _regex_parser.parse(pattern.pattern, pattern.flags)
    except Exception:  # noqa: BLE001 - a pattern this reading does not follow: it may match
        return True
    literal = _regex_parser.LITERAL
    fold = bool(pattern.flags & re.IGNORECASE)
    for index, (op, value) in enumerate(parsed):
        if op is not literal or index >= len(head):
            return True
        wanted, got = chr(value), head[index]
        if wanted == got or fold and wanted.lower() == got.lower():
            continue
        if fold and wanted.upper() == got.upper():
            continue
        return False
    return True


def describe_filter(entry: tuple) -> str:
    """A warnings filter as the call that makes it, for messages."""
    action, message, kind, module, line = entry
    parts = [repr(action)]
    if message is None and module is None and not line:
        category = "" if kind is Warning else f", {kind.__name__}"
        return f"warnings.simplefilter({action!r}{category})"
    if message is not None:
        parts.append(f"message={message.pattern!r}")
    if kind is not Warning:
        parts.append(f"category={kind.__name__}")
    if module is not None:
        parts.append(f"module={module.pattern!r}")
    if line:
        parts.append(f"lineno={line}")
    return f"warnings.filterwarnings({', '.join(parts)})"


def _show_nowhere(message) -> None:
    """``warnings._showwarnmsg_impl`` of :func:`shown_nowhere`: shows nothing, keeps nothing."""


@contextlib.contextmanager
def shown_nowhere():
    """Around a run made only to compare with the first recording (the check's second
    recording, the size-1 probes): the code's warnings meet the filters the user set, as
    in the first recording and in eager calls -- an "error" filter raises them into the
    code's handlers, and decides whether a size in their text is guarded -- but none is
    shown again, and tracebridge's own are quiet (the first recording gave them)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TracerWarning)
        warnings._showwarnmsg_impl = _show_nowhere
        yield


def shown_warning_keeps_nothing(frame) -> bool:
    """Whether a warning being shown now (``warnings._showwarnmsg``) only goes to
    ``sys.stderr`` (a real file) or to logging's ``py.warnings`` handlers that keep
    nothing: warnings' own functions, or a record list held only by frames outside the
    traced code (``with catch_warnings(record=True) as log`` around the trace, the test
    runner's)."""
    if not _warnings_own(getattr(warnings, "_showwarnmsg", None), "_showwarnmsg"):
        return False
    show = warnings.showwarning
    if show is getattr(logging, "_showwarning", None):  # logging.captureWarnings(True)
        return _formatting_stock() and logger_keeps_nothing(
            logging.getLogger("py.warnings"), logging.WARNING
        )
    if not (show is warnings._showwarning_orig and _warnings_own(show, "showwarning")):
        return False
    impl = warnings._showwarnmsg_impl
    if impl is _show_nowhere:
        return True
    if _warnings_own(impl, "_showwarnmsg_impl"):
        return _formatting_stock() and stream_out_of_reach(sys.stderr)
    return _recorded_out_of_reach(impl, frame)


def _formatting_stock() -> bool:
    return warnings.formatwarning is warnings._formatwarning_orig and _warnings_own(
        warnings.formatwarning, "formatwarning"
    )


def _recorded_out_of_reach(impl, frame) -> bool:
    """``impl`` is ``log.append`` of ``catch_warnings(record=True)``: whether nothing the
    traced code can reach holds ``log`` (see :func:`_held_out_of_reach`)."""
    record = getattr(impl, "__self__", None)
    if not (isinstance(impl, types.BuiltinMethodType) and type(record) is list):
        return False
    return _held_out_of_reach(record, frame, impl)


def _held_out_of_reach(obj, frame, *also) -> bool:
    """Whether nothing the traced code can reach holds ``obj``: only ``also``, frames (or
    suspended generators) that are not the traced code's own frames running now,
    ``sys.stdout``/``sys.stderr`` (the stream that is there now), and contextlib's
    ``redirect_stdout``/``redirect_stderr`` that put it there, tracebridge's own objects
    (the progress line's stream), and another module's ``from sys import stdout`` made
    while it was there (a library imported while tracing)."""
    frames = traced_frames(frame)
    inside = set(map(id, frames))
    traced_globals = {id(f.f_globals) for f in frames}
    for holder in gc.get_referrers(obj):
        if any(holder is a for a in also) or holder is vars(sys):
            continue
        if isinstance(holder, contextlib._RedirectStream) or _own_object(holder):
            continue
        if _imported_stream(holder, obj) and id(holder) not in traced_globals:
            continue
        if isinstance(holder, types.FrameType) and id(holder) not in inside:
            continue
        if isinstance(holder, (types.GeneratorType, types.CoroutineType)):
            running = getattr(holder, "gi_running", None) or getattr(holder, "cr_running", None)
            if not running:
                continue
        return False
    return True


# sys.stdout and sys.stderr when each recording under way in this thread began: a buffer
# put there by the traced code itself (``sys.stdout = io.StringIO()``) is in its reach.
_RECORDINGS = threading.local()


@contextlib.contextmanager
def streams_at_start():
    """Around a recording: remember the streams the caller's code had set up."""
    stack = _RECORDINGS.__dict__.setdefault("streams", [])
    stack.append((id(sys.stdout), id(sys.stderr)))  # ids: no holder of them of ours
    try:
        yield
    finally:
        stack.pop()


def _there_when_recording_began(stream) -> bool:
    stack = getattr(_RECORDINGS, "streams", None)
    return bool(stack) and id(stream) in stack[-1]


def _own_object(holder) -> bool:
    module = getattr(type(holder), "__module__", "") or ""
    return module.split(".")[0] == "tracebridge"


def _imported_stream(holder, stream) -> bool:
    """Whether ``holder`` is a module's globals that hold ``stream`` only as ``stdout`` or
    ``stderr`` (``from sys import stdout`` at its import)."""
    if not (isinstance(holder, dict) and isinstance(holder.get("__name__"), str)):
        return False
    names = [name for name, value in holder.items() if value is stream]
    return bool(names) and all(name in ("stdout", "stderr") for name in names)


def traced_frames(frame) -> list:
    """The frames from ``frame`` (past tracebridge's own) down to the tracer's: the
    traced code's frames now."""
    found = []
    while frame is not None and frame.f_code.co_filename.startswith(OWN_DIR):
        frame = frame.f_back
    while frame is not None and not frame.f_code.co_filename.startswith(OWN_DIR):
        found.append(frame)
        frame = frame.f_back
    return found


# --- text made inside logging's or warnings' own code -------------------------------------


def formatted_for_showing(frame, message_files: tuple) -> bool:
    """Whether text made at ``frame``, a frame of logging's or warnings' own code, is made
    to be shown: ``Logger.callHandlers`` (a record's message, ``log.info("%s", n)``) or
    ``warnings._showwarnmsg`` called it, through logging's, warnings' or a test runner's
    frames only, and where it goes keeps nothing. Text that logging's code makes for a
    caller (``handler.format(record)`` in a user's handler) goes back to that caller."""
    current = frame
    while current is not None:
        code = current.f_code
        if code.co_filename.startswith(message_files):
            owner = current.f_locals.get("self")
            if code.co_name == "callHandlers" and isinstance(owner, logging.Logger):
                record = current.f_locals.get("record")
                level = getattr(record, "levelno", 0)
                return logger_keeps_nothing(owner, level if isinstance(level, int) else 0)
            if code.co_name == "_showwarnmsg" and code.co_filename == warnings.__file__:
                return shown_warning_keeps_nothing(current)
        elif not _in_display_module(code):
            return False
        current = current.f_back
    return False


def _in_display_module(code) -> bool:
    parts = code.co_filename.replace("\\", "/").split("/")
    return any(part in _DISPLAY_MODULES for part in parts[-3:-1])
