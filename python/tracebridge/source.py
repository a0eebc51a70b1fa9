"""Where the user's code is: source locations, the user-frame search, foreign locations.

A leaf module (it imports nothing from tracebridge): the tracer asks it for the line that
made each node, the runtime for the text of a line in a message, and the R front end tells
it which R line is running.
"""

from __future__ import annotations

import contextlib
import linecache
import os
import sys
import threading
import warnings

import numpy as np
import torch

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
# The whole tracebridge package: its frames are never "the user's line".
OWN_DIR = os.path.dirname(__file__) + os.sep
# Frames in these files are never the user's either: PyTorch, contextlib, numpy, and
# reticulate's Python shims (an R function traced from R calls in through them).
_INTERNAL_DIRS = (_TORCH_DIR, OWN_DIR, contextlib.__file__, os.path.dirname(np.__file__))
_INTERNAL_PARTS = (os.sep + "rpytools" + os.sep,)
TORCH_DIR = _TORCH_DIR

_foreign = threading.local()


def is_internal(filename: str) -> bool:
    """Whether a frame in ``filename`` belongs to PyTorch, tracebridge (the code it
    generates too: a loaded program called by traced code) or glue code."""
    return (
        filename.startswith(_INTERNAL_DIRS)
        or filename.startswith(("<frozen", "<tracebridge:"))
        or any(part in filename for part in _INTERNAL_PARTS)
    )


def set_foreign_location(location: str | None) -> None:
    """For front ends in other languages: the ``file:line`` of their code that is running
    now (R reports it before each op while tracing), used where no Python frame is the
    user's. ``None`` or ``""`` clears it."""
    _foreign.location = location or None


def user_frame(frame):
    """``frame``, or the first frame it was called from that is outside PyTorch and
    tracebridge (:func:`is_internal`); None where there is none."""
    while frame is not None and is_internal(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def user_location() -> str | None:
    """The user's ``file:line`` making the current call: the innermost Python frame
    outside PyTorch and tracebridge, else the line a foreign front end (R) reported."""
    frame = user_frame(sys._getframe(1))
    if frame is not None:
        return f"{frame.f_code.co_filename}:{frame.f_lineno}"
    return getattr(_foreign, "location", None)


def warn_at_user_line(message: str, category: type[Warning]) -> None:
    """Warn with ``message`` at the user's line making the current call (the call of
    ``trace()``: :func:`user_location`), or at the caller's where there is none."""
    where = user_location()
    if where is None:
        warnings.warn(message, category, stacklevel=3)
        return
    filename, _, line = where.rpartition(":")
    warnings.warn_explicit(message, category, filename, int(line))


def raised_at(exc: BaseException) -> str | None:
    """The ``file:line`` of the innermost frame outside PyTorch and tracebridge in the
    traceback of ``exc``: where the user's (or a library's) code raised it, else None."""
    loc = None
    tb = exc.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not is_internal(filename):
            loc = f"{filename}:{tb.tb_lineno}"
        tb = tb.tb_next
    return loc


def called_from_user_code() -> bool:
    """Whether the code that made the current call is the user's (not PyTorch's)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(OWN_DIR):
        frame = frame.f_back
    if frame is None:
        return False
    filename = frame.f_code.co_filename
    return not filename.startswith(_INTERNAL_DIRS) and not any(
        part in filename for part in _INTERNAL_PARTS
    )


SOURCE_LIMIT = 300  # characters of a line stored in an artifact for messages


def source_line(loc: str | None) -> str:
    """The text of the user's source line at ``loc`` (``file:line``), or ''."""
    if not loc:
        return ""
    filename, _, line = loc.rpartition(":")
    try:
        return linecache.getline(filename, int(line)).strip()
    except ValueError:
        return ""
