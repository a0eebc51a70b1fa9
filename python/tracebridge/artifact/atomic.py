"""Saving a file so that a reader only ever finds the old file or the new one, whole.

Note: the temporary file. It is made by ``tempfile.mkstemp`` in the target's folder: a
random name created with ``O_CREAT | O_EXCL | O_NOFOLLOW``, so two saves (threads or
processes) never share it and a link planted in the folder is never followed. The data is
flushed and ``fsync``-ed before ``os.replace`` renames it over the target (atomic on POSIX
and Windows within one file system), then the folder is synced so the rename survives a
power cut. A save that fails removes its temporary file; one killed outright leaves it
behind (``.NAME.*.tmp``), never a damaged target. The target itself is replaced, not written
through: if it is a symbolic link, the link is replaced by the file.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from typing import BinaryIO

from ..errors import ArtifactError


def _umask() -> int:
    # os.umask() can only be read by setting it, which races with other threads.
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    return 0o022


def _mode_for(path: str) -> int:
    try:
        st = os.stat(path, follow_symlinks=False)
        if stat.S_ISREG(st.st_mode):
            return stat.S_IMODE(st.st_mode)
    except OSError:
        pass
    return 0o666 & ~_umask()


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """Open a fresh temporary file beside ``path`` for writing; on a clean exit it is
    synced and renamed to ``path``; on an error it is removed and ``path`` is untouched.

    >>> import os, tempfile
    >>> target = os.path.join(tempfile.mkdtemp(), "a.bin")
    >>> with atomic_file(target) as f:
    ...     _ = f.write(b"data")
    >>> open(target, "rb").read()
    b'data'
    """
    target = os.path.abspath(os.fspath(path))
    folder, base = os.path.split(target)
    if os.path.isdir(target):
        raise ArtifactError(f"{target}: is a directory; give a file name to save to")
    if not os.path.isdir(folder):
        raise ArtifactError(f"{target}: the folder {folder} does not exist; create it first")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise ArtifactError(
            f"{target}: cannot create a file in {folder} ({exc.strerror})"
        ) from None
    done = False
    try:
        with os.fdopen(fd, "w+b") as handle:
            yield handle
            handle.flush()
            if hasattr(os, "fchmod"):  # mkstemp makes 0600; give the usual mode (not Windows)
                os.fchmod(handle.fileno(), _mode_for(target))
            os.fsync(handle.fileno())
        os.replace(tmp, target)
        done = True
    except OSError as exc:
        raise ArtifactError(f"{target}: saving failed ({exc.strerror or exc})") from None
    finally:
        if not done:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    with contextlib.suppress(OSError):  # durability of the rename; not possible everywhere
        dir_fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
