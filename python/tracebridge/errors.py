"""The error and warning types of tracebridge.

Every error says what went wrong, where (op, source line, file) and what to do.
They all derive from :class:`TraceError`, so ``except tracebridge.TraceError`` catches
anything tracebridge raises on purpose.
"""

from __future__ import annotations


class TraceError(RuntimeError):
    """Base class: something could not be traced, checked, run, saved or loaded."""


class UnsupportedOpError(TraceError):
    """The traced code called a function that the op set cannot record."""


class GuardError(TraceError):
    """A call broke an assumption that the trace made (a shape, a branch, a value).

    Attributes: ``guard`` (the broken guard's description), ``location`` (the user's
    source line where the assumption was made), ``seen`` (the value seen now).
    """

    def __init__(self, message: str, *, guard: str = "", location: str = "", seen=None):
        super().__init__(message)
        self.guard = guard
        self.location = location
        self.seen = seen


class GuardValueError(GuardError, ValueError):
    """A failed guard whose other side, in eager PyTorch, raises a ``ValueError`` (batch
    norm in training mode given one value per channel): a :class:`GuardError` that is
    also a ``ValueError``, as eager's error is."""


class TracingCheckError(TraceError):
    """check_trace found that the recording does not match the real code."""


class ArtifactError(TraceError):
    """A file is not a tracebridge artifact, is corrupt, or is of a newer format."""


class BindingError(TraceError, TypeError):
    """A call's arguments that Python would refuse to bind to the traced callable's
    parameters: one passed both by position and by keyword, a positional-only one passed
    by keyword. A ``TypeError``, as Python raises for the original callable, and a
    :class:`TraceError`, as every refusal of a traced call."""


class TracerWarning(UserWarning):
    """Something in the traced code may make the trace less general than the code.

    Each warning points at the user's file and line, and is issued once per line.
    """


class OpError(TraceError):
    """An op of a loaded graph failed while running (PyTorch or scalar arithmetic raised).

    ``original`` is the exception the op raised (also the ``__cause__``). A hostile or
    corrupt file can make any op fail (a size past memory, a division by zero, an index out
    of range); a caller of a loaded artifact catches ``TraceError`` for all of them.
    """

    def __init__(self, message: str, original: BaseException | None = None):
        super().__init__(message)
        self.original = original
