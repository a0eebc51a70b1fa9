"""Progress on steps that can take seconds: a one-line bar on standard error.

Tracing with its check, saving and loading large artifacts, and the command line's
``validate``, ``inspect`` and ``graph`` open a bar with :func:`track`; the code that does
the work reports to the innermost open bar with :func:`advance` (bytes, steps) and
:func:`stage` (what it is doing now), and costs nothing when no bar is open.

When a bar shows (:func:`wanted`): the ``progress=`` argument wins (``True`` always,
``False`` never); else the environment variable ``TRACEBRIDGE_PROGRESS`` (``0`` never,
``1`` always); else only when standard error is a terminal. A bar draws nothing for its
first half second, so quick steps stay quiet, then redraws itself five times a second from
a thread: a step that takes long without reporting still shows its time ticking.

>>> with track("copying", total=4, unit="steps", progress=False) as bar:
...     advance(4)
>>> bar.done
4
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import TextIO

ENV = "TRACEBRIDGE_PROGRESS"
DELAY = 0.5  # seconds before a bar first draws: quick steps stay quiet
_WIDTH = 24
_local = threading.local()


def wanted(progress: bool | None = None, stream: TextIO | None = None) -> bool:
    """Whether to show a bar: ``progress`` if given, else ``TRACEBRIDGE_PROGRESS`` (``0`` or
    ``1``), else whether ``stream`` (standard error) is a terminal."""
    if progress is not None:
        return bool(progress)
    env = os.environ.get(ENV, "").strip().lower()
    if env in ("0", "false", "no", "off"):
        return False
    if env in ("1", "true", "yes", "on"):
        return True
    stream = stream if stream is not None else sys.stderr
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False


def _size(n: float, unit: str) -> str:
    if unit != "B":
        return f"{n:.0f}"
    for suffix in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or suffix == "GiB":
            return f"{n:.0f} {suffix}" if suffix == "B" else f"{n:.1f} {suffix}"
        n /= 1024
    return f"{n:.1f} GiB"


class Bar:
    """One progress line: what, the current stage, a bar (when the total is known), the
    count and the elapsed seconds. Counts are kept whether or not it draws."""

    def __init__(
        self,
        what: str,
        total: int | None = None,
        unit: str = "",
        stream: TextIO | None = None,
        show: bool = True,
        delay: float | None = None,
    ):
        self.what, self.total, self.unit = what, total, unit
        self.stream = stream if stream is not None else sys.stderr
        self.done = 0
        self.now = ""
        self.shown = False
        self._show = show
        self._delay = DELAY if delay is None else delay
        self._start = time.monotonic()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def open(self) -> Bar:
        if self._show:
            self._thread = threading.Thread(target=self._tick, name="tracebridge-progress")
            self._thread.daemon = True
            self._thread.start()
        return self

    def advance(self, n: int = 1) -> None:
        self.done += n

    def stage(self, text: str) -> None:
        self.now = text
        # A new stage shows at once (once the bar shows at all), not at the next tick.
        started = time.monotonic() - self._start >= self._delay
        if self._show and started and not self._stop.is_set():
            self._draw()

    def line(self) -> str:
        """The text of the bar as it would be drawn now."""
        parts = [self.what + (f": {self.now}" if self.now else "")]
        if self.total:
            frac = min(self.done / self.total, 1.0)
            filled = int(frac * _WIDTH)
            parts.append(f"[{'#' * filled}{'.' * (_WIDTH - filled)}] {frac * 100:3.0f}%")
            parts.append(f"{_size(self.done, self.unit)}/{_size(self.total, self.unit)}")
        elif self.done:
            parts.append(_size(self.done, self.unit))
        parts.append(f"{time.monotonic() - self._start:.1f} s")
        return "  ".join(parts)

    def _draw(self, end: str = "") -> None:
        with self._lock:
            text = self.line()
            try:
                self.stream.write("\r\x1b[2K" + text + end)
                self.stream.flush()
            except (OSError, ValueError):  # a closed stream ends the bar, not the work
                self._stop.set()
                return
            self.shown = True

    def _tick(self) -> None:
        if self._stop.wait(self._delay):
            return
        while not self._stop.is_set():
            self._draw()
            self._stop.wait(0.2)

    def close(self, failed: bool = False) -> None:
        """Stop redrawing; a bar that showed ends with its final line (and a newline)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.shown:
            if not failed and self.total:
                self.done = max(self.done, self.total)
            self.now = "failed" if failed else "done"
            self._draw("\n")


def _stack() -> list[Bar]:
    if not hasattr(_local, "bars"):
        _local.bars = []
    return _local.bars


@contextlib.contextmanager
def track(
    what: str,
    total: int | None = None,
    unit: str = "",
    *,
    progress: bool | None = None,
    stream: TextIO | None = None,
) -> Iterator[Bar]:
    """Open a bar for the block; :func:`advance` and :func:`stage` report to it. Inside an
    open bar (a save inside a trace), the outer bar stays the one shown."""
    stack = _stack()
    show = wanted(progress, stream) and not any(b._show for b in stack)
    bar = Bar(what, total, unit, stream, show).open()
    stack.append(bar)
    failed = True
    try:
        yield bar
        failed = False
    finally:
        stack.remove(bar)
        bar.close(failed)


def state_nbytes(traced) -> int:
    """The bytes of a traced object's stored state (what a save writes): the size R's
    ``jit_save`` decides on whether to show progress by."""
    # (the program under its private name: ``program`` breaks a loaded object's seal)
    state = getattr(traced, "_tb_program", None) or traced.program
    state = state.state.values()
    return sum(e.tensor.nbytes for e in state if not e.tensor.is_meta)


def advance(n: int = 1) -> None:
    """Add ``n`` to the innermost open bar of this thread (nothing when none is open)."""
    stack = getattr(_local, "bars", None)
    if stack:
        stack[-1].advance(n)


def stage(text: str) -> None:
    """Name what the innermost open bar of this thread is doing now."""
    stack = getattr(_local, "bars", None)
    if stack:
        stack[-1].stage(text)
