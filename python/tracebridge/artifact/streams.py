"""Artifacts in memory and in file-like objects: ``save(obj, buffer)``, ``load(bytes)``,
``load(file_like)`` and pickling go through here.

Note: why a temporary file. An artifact is read by memory-mapping it (the state tensors are
views of the file, see archive.py) and written with a seekable writer that patches sizes
and checksums in place. Bytes and streams are therefore spooled into a temporary file and
go through the very same ``read`` / ``write`` as a path does: the same checks, the same
limits, nothing a file on disk would not get. After reading, the temporary file is unlinked
at once; its pages live on in the mapping (POSIX) until the loaded tensors are freed.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tempfile
from typing import IO, Any

from ..errors import ArtifactError
from ..ir import Program
from .archive import read, write
from .weights import WeightsArg

Source = str | os.PathLike | bytes | bytearray | memoryview | IO[bytes]
_CHUNK = 16 * 1024 * 1024


def is_path(target: Any) -> bool:
    """Whether ``target`` names a file (a string or ``os.PathLike``) rather than holding one."""
    return isinstance(target, (str, os.PathLike))


def write_to(program: Program, target: Any, language: str | None = None) -> None:
    """Write ``program`` to ``target``: a path (atomically, by ``archive.write``) or a binary
    file-like object with ``write`` (at its current position)."""
    if is_path(target):
        write(program, target, language)
        return
    if not callable(getattr(target, "write", None)):
        raise ArtifactError(
            f"save() writes to a path or a binary file-like object with .write(), not "
            f"{type(target).__name__}; pass a file name or e.g. io.BytesIO()"
        )
    with tempfile.TemporaryDirectory(prefix="tracebridge-") as folder:
        path = os.path.join(folder, "artifact.tb")
        try:
            write(program, path, language)
        except ArtifactError as exc:  # name the caller's object, not our temporary file
            raise type(exc)(str(exc).replace(path, f"<{type(target).__name__}>")) from None
        with open(path, "rb") as handle:
            try:
                shutil.copyfileobj(handle, target, _CHUNK)
            except TypeError as exc:
                raise ArtifactError(
                    f"save(): {type(target).__name__} does not take bytes ({exc}); open the "
                    "file in binary mode ('wb')"
                ) from None


def read_from(
    source: Source,
    weights: WeightsArg | None = None,
    verify: bool | None = None,
    map_location=None,
) -> Program:
    """Read an artifact from a path, from bytes (``bytes``, ``bytearray``, ``memoryview``)
    or from a binary file-like object with ``read`` (from its current position to its end),
    with every check of ``archive.read``."""
    if is_path(source):
        return read(source, weights=weights, verify=verify, map_location=map_location)
    if isinstance(source, (bytes, bytearray, memoryview)):
        label = f"<{memoryview(source).nbytes} bytes>"
        return _read_spooled(lambda f: f.write(source), label, weights, verify, map_location)
    if callable(getattr(source, "read", None)):
        label = f"<{type(source).__name__}>"
        return _read_spooled(
            lambda f: _copy_stream(source, f), label, weights, verify, map_location
        )
    raise ArtifactError(
        f"load() reads a path, bytes or a binary file-like object with .read(), not "
        f"{type(source).__name__}"
    )


def _copy_stream(source: IO[bytes], target: IO[bytes]) -> None:
    while True:
        chunk = source.read(_CHUNK)
        if not chunk:
            return
        if isinstance(chunk, str):
            raise ArtifactError(
                f"load(): {type(source).__name__} gives text, not bytes; open the file in "
                "binary mode ('rb')"
            )
        target.write(chunk)


def _read_spooled(fill, label: str, weights, verify, map_location) -> Program:
    fd, path = tempfile.mkstemp(prefix="tracebridge-", suffix=".tb")
    try:
        with os.fdopen(fd, "wb") as handle:
            fill(handle)
        try:
            return read(path, weights=weights, verify=verify, map_location=map_location)
        except ArtifactError as exc:
            raise ArtifactError(str(exc).replace(path, label)) from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)  # the mapping keeps the data while the tensors live


def size_of(source: Source) -> int | None:
    """The size in bytes of a file or of bytes (None for a stream): a progress bar's total."""
    if is_path(source):
        try:
            return os.path.getsize(source)
        except OSError:
            return None
    if isinstance(source, (bytes, bytearray, memoryview)):
        return memoryview(source).nbytes
    return None


def to_bytes(program: Program, language: str | None = None) -> bytes:
    """The whole artifact of ``program`` as bytes (what pickling stores)."""
    buffer = io.BytesIO()
    write_to(program, buffer, language)
    return buffer.getvalue()
