"""The ZIP container of an artifact, read and written by its own strict rules.

Note: why not ``zipfile``. An artifact comes from anywhere, and two readers (Python here,
base R in ``R/artifact-read.R``) must never see two different files in one archive. General
ZIP readers are lenient in ways that let one file mean two things: a duplicated member name
(``zipfile`` takes the last, R's reader the first), junk before the first member or after
the end record, a compressed member that expands to gigabytes before any check runs. So
the container is a small, closed subset of ZIP that both readers check the same way
(``shared_ir/SPEC.md`` section 1):

* exactly the members the spec names (``program.json``, and ``tensors.safetensors`` and
  ``compiled.pt2``), each once, no directories, links or other members;
* stored (method 0), never compressed, no encryption flag, no data descriptor, CRC-32 and
  sizes in both headers, and the local header agreeing with the central directory;
* the members, the central directory and the end record tile the file: the first member at
  offset 0, no gap, no comment, nothing after the end record;
* ZIP64 records when a size or an offset does not fit 32 bits.

The writer streams: a member's header goes out with its final size (known in advance), the
data follows in chunks, and the CRC-32 is patched in afterwards. A member's data can be
aligned to 64 bytes with a padding extra field (id 0xD935, the one Android's ``zipalign``
uses), so the tensor bytes can be memory-mapped where they lie.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import BinaryIO

from ..errors import ArtifactError

PROGRAM_MEMBER = "program.json"
TENSORS_MEMBER = "tensors.safetensors"
COMPILED_MEMBER = "compiled.pt2"  # optional: an AOTInductor package (artifact/compiled.py)
MEMBERS = (PROGRAM_MEMBER, TENSORS_MEMBER, COMPILED_MEMBER)

_LOCAL = 0x04034B50
_CENTRAL = 0x02014B50
_END = 0x06054B50
_END64 = 0x06064B50
_LOCATOR64 = 0x07064B50
_ZIP64_EXTRA = 0x0001
_ALIGN_EXTRA = 0xD935
_MAX32 = 0xFFFFFFFF
_DOS_DATE = (0 << 9) | (1 << 5) | 1  # 1980-01-01: a fixed date keeps saves reproducible
_UNIX_FILE = 0o100644 << 16
_MADE_BY = (3 << 8) | 45  # Unix, ZIP 4.5
_FLAG_ENCRYPTED = 0x0001
_FLAG_DESCRIPTOR = 0x0008
_FLAG_STRONG = 0x0040
_FLAG_MASKED = 0x2000
_METHODS = {0: "stored", 8: "deflate", 9: "deflate64", 12: "bzip2", 14: "lzma", 93: "zstd"}
_MAX_ENTRIES = 16  # more than the spec's two: name them in the error, then stop reading


@dataclass
class Member:
    """One member as the central directory describes it (checked against its local
    header): where its data lies in the file, its size and its CRC-32."""

    name: str
    header_offset: int
    data_offset: int
    size: int
    crc: int


# --- writing ------------------------------------------------------------------------------


class Writer:
    """Writes a container to a binary file opened for writing at offset 0.

    Call ``begin(name, size, align)`` then write exactly ``size`` bytes with ``write``,
    then ``end(crc)``; ``close()`` writes the central directory. ``zip64`` forces ZIP64
    records (used by tests; large files get them whatever it says).
    """

    def __init__(self, handle: BinaryIO, zip64: bool = False):
        self._f = handle
        self._force64 = zip64
        self._entries: list[tuple[Member, bool]] = []
        self._open: Member | None = None
        self._written = 0

    def begin(self, name: str, size: int, align: int = 1) -> int:
        """Write the local header of member ``name``; returns the data's file offset."""
        offset = self._f.tell()
        zip64 = self._force64 or size >= _MAX32 or offset + size >= _MAX32
        raw = name.encode("ascii")
        extra = struct.pack("<HHQQ", _ZIP64_EXTRA, 16, size, size) if zip64 else b""
        if align > 1:
            base = offset + 30 + len(raw) + len(extra) + 6
            extra += struct.pack("<HHH", _ALIGN_EXTRA, 2 + (-base) % align, align)
            extra += b"\0" * ((-base) % align)
        stored = _MAX32 if zip64 else size
        header = struct.pack(
            "<IHHHHHIIIHH",
            _LOCAL,
            45 if zip64 else 20,
            0,
            0,
            0,
            _DOS_DATE,
            0,
            stored,
            stored,
            len(raw),
            len(extra),
        )
        self._f.write(header + raw + extra)
        data = offset + len(header) + len(raw) + len(extra)
        self._open = Member(name, offset, data, size, 0)
        self._entries.append((self._open, zip64))
        self._written = 0
        return data

    def write(self, data) -> None:
        self._f.write(data)
        self._written += memoryview(data).nbytes

    def skip(self, n: int) -> None:
        """Leave ``n`` bytes of the open member as a hole: they read as zeros, and take no
        disk space where the file system keeps sparse files."""
        self._f.seek(n, 1)
        self._f.truncate(self._f.tell())
        self._written += n

    def end(self, crc: int) -> None:
        """Finish the open member: check its size and patch its CRC-32 into the header."""
        member = self._open
        if member is None or self._written != member.size:
            raise ArtifactError(
                f"internal error: member {member and member.name!r} got {self._written} "
                f"bytes, {member and member.size} announced"
            )
        here = self._f.tell()
        self._f.seek(member.header_offset + 14)
        self._f.write(struct.pack("<I", crc))
        self._f.seek(here)
        member.crc = crc
        self._open = None

    def close(self) -> None:
        """Write the central directory and the end records."""
        start = self._f.tell()
        any64 = self._force64
        for member, zip64 in self._entries:
            raw = member.name.encode("ascii")
            extra = b""
            size, offset = member.size, member.header_offset
            if zip64 or offset >= _MAX32:
                extra = struct.pack("<HHQQQ", _ZIP64_EXTRA, 24, member.size, member.size, offset)
                size = offset = _MAX32
                any64 = True
            self._f.write(
                struct.pack(
                    "<IHHHHHHIIIHHHHHII",
                    _CENTRAL,
                    _MADE_BY,
                    45 if extra else 20,
                    0,
                    0,
                    0,
                    _DOS_DATE,
                    member.crc,
                    size,
                    size,
                    len(raw),
                    len(extra),
                    0,
                    0,
                    0,
                    _UNIX_FILE,
                    offset,
                )
                + raw
                + extra
            )
        end = self._f.tell()
        count, cd_size = len(self._entries), end - start
        if any64 or start >= _MAX32:
            self._f.write(
                struct.pack(
                    "<IQHHIIQQQQ", _END64, 44, _MADE_BY, 45, 0, 0, count, count, cd_size, start
                )
            )
            self._f.write(struct.pack("<IIQI", _LOCATOR64, 0, end, 1))
            self._f.write(struct.pack("<IHHHHIIH", _END, 0, 0, 0xFFFF, 0xFFFF, _MAX32, _MAX32, 0))
        else:
            self._f.write(struct.pack("<IHHHHIIH", _END, 0, 0, count, count, cd_size, start, 0))


# --- reading ------------------------------------------------------------------------------


def _read_at(handle: BinaryIO, offset: int, n: int) -> bytes:
    handle.seek(offset)
    data = handle.read(n)
    if len(data) != n:
        raise ArtifactError(f"truncated at byte {offset}")
    return data


def _zip64_values(extra: bytes, wanted: list[str], where: str) -> dict[str, int]:
    """The 64-bit values of a ZIP64 extra field, in the order the ZIP spec gives them."""
    pos = 0
    while pos + 4 <= len(extra):
        tag, size = struct.unpack_from("<HH", extra, pos)
        if tag == _ZIP64_EXTRA:
            body = extra[pos + 4 : pos + 4 + size]
            if len(body) < 8 * len(wanted):
                break
            return {k: struct.unpack_from("<Q", body, 8 * i)[0] for i, k in enumerate(wanted)}
        pos += 4 + size
    raise ArtifactError(f"{where}: a 32-bit field says ZIP64 but there is no ZIP64 extra field")


def _end_record(handle: BinaryIO, size: int) -> tuple[int, int, int]:
    """(entries, central directory offset, its size) from the end records, checking that
    the end record is the last thing in the file (no comment, nothing after it)."""
    if size < 22:
        raise ArtifactError("too short to be a ZIP archive")
    sig, disk, cd_disk, here, count, cd_size, cd_offset, comment = struct.unpack(
        "<IHHHHIIH", _read_at(handle, size - 22, 22)
    )
    if sig != _END:
        raise ArtifactError(
            "no ZIP end record at the end of the file (not a ZIP archive, or data or an "
            "archive comment after it; artifacts have neither)"
        )
    if comment or disk or cd_disk or here != count:
        raise ArtifactError("the ZIP end record has a comment or spans disks; artifacts do not")
    end = size - 22
    if size >= 42:
        loc = _read_at(handle, size - 42, 20)
        if struct.unpack_from("<I", loc)[0] == _LOCATOR64:
            _, disk, end64, disks = struct.unpack("<IIQI", loc)
            if disk or disks != 1 or end64 + 56 != size - 42:
                raise ArtifactError("the ZIP64 locator does not point just before it")
            rec = _read_at(handle, end64, 56)
            sig, _, _, _, disk, cd_disk, here, count, cd_size, cd_offset = struct.unpack(
                "<IQHHIIQQQQ", rec
            )
            if sig != _END64 or disk or cd_disk or here != count:
                raise ArtifactError("the ZIP64 end record is corrupt")
            end = end64
    if cd_offset + cd_size != end:
        raise ArtifactError(
            "the central directory does not end where the end record begins (data between "
            "them, or a corrupt archive)"
        )
    return count, cd_offset, cd_size


def read_members(handle: BinaryIO, size: int) -> dict[str, Member]:
    """Parse and check the container; returns its members by name.

    Raises ArtifactError (without the file name: the caller adds it) on any departure from
    the rules in the module docstring, before any member's data is read.
    """
    count, cd_offset, cd_size = _end_record(handle, size)
    if count > _MAX_ENTRIES:
        raise ArtifactError(
            f"the archive has {count} members; an artifact has only {' and '.join(MEMBERS)}"
        )
    rows = _central_entries(_read_at(handle, cd_offset, cd_size), count)
    if not any(row[0] == PROGRAM_MEMBER for row in rows):
        raise ArtifactError(f"not a tracebridge artifact (no {PROGRAM_MEMBER})")
    members: dict[str, Member] = {}
    for name, raw, flags, method, csize, usize, disk, made_by, attr, offset, crc in rows:
        where = f"member {name!r}"
        _check_entry(name, raw, flags, method, csize, usize, disk, made_by, attr, where)
        if name in members:
            raise ArtifactError(
                f"{where} appears twice in the archive; an artifact holds each member once "
                "(a reader could take either copy)"
            )
        members[name] = _check_local(handle, Member(name, offset, 0, usize, crc), flags, where)
    _check_tiling(members, cd_offset)
    return members


def _central_entries(directory: bytes, count: int) -> list[tuple]:
    """The fields of each central directory entry, ZIP64 values resolved."""
    rows = []
    pos = 0
    for index in range(count):
        if pos + 46 > len(directory) or struct.unpack_from("<I", directory, pos)[0] != _CENTRAL:
            raise ArtifactError(f"central directory entry {index} is corrupt")
        fields = struct.unpack_from("<IHHHHHHIIIHHHHHII", directory, pos)
        _, made_by, _, flags, method, _, _, crc, csize, usize, n_name, n_extra = fields[:12]
        n_comment, disk, _, attr, offset = fields[12:]
        raw = directory[pos + 46 : pos + 46 + n_name]
        extra = directory[pos + 46 + n_name : pos + 46 + n_name + n_extra]
        pos += 46 + n_name + n_extra + n_comment
        name = raw.decode("utf-8", errors="replace")
        values = {"usize": usize, "csize": csize, "offset": offset}
        wanted = [k for k, v in values.items() if v == _MAX32]
        if wanted:
            values.update(_zip64_values(extra, wanted, f"member {name!r}"))
        usize, csize, offset = values["usize"], values["csize"], values["offset"]
        rows.append((name, raw, flags, method, csize, usize, disk, made_by, attr, offset, crc))
    if pos != len(directory):
        raise ArtifactError("the central directory has bytes after its last entry")
    return rows


def _check_entry(name, raw, flags, method, csize, usize, disk, made_by, attr, where) -> None:
    if flags & (_FLAG_ENCRYPTED | _FLAG_STRONG | _FLAG_MASKED):
        raise ArtifactError(
            f"{where} is marked encrypted (general-purpose flag {flags:#06x}); artifacts "
            "are never encrypted"
        )
    if name.endswith("/") or (made_by >> 8 == 3 and (attr >> 16) & 0o170000 == 0o040000):
        raise ArtifactError(f"{where} is a directory; an artifact holds only files")
    if made_by >> 8 == 3 and (attr >> 16) & 0o170000 not in (0, 0o100000):
        raise ArtifactError(f"{where} is a link or a special file; an artifact holds only files")
    if name not in MEMBERS or raw != name.encode("ascii"):
        raise ArtifactError(
            f"{where} is not part of the format (an artifact holds only "
            f"{' and '.join(MEMBERS)}); remove it or re-save the model with tracebridge"
        )
    if method != 0:
        kind = _METHODS.get(method, f"method {method}")
        raise ArtifactError(
            f"{where} is compressed ({kind}); artifact members are stored uncompressed "
            "(ZIP method 0) so that they can be memory-mapped; re-save it with tracebridge "
            "(nothing was decompressed)"
        )
    if flags & _FLAG_DESCRIPTOR:
        raise ArtifactError(
            f"{where} uses a data descriptor; artifacts give sizes in the local header"
        )
    if csize != usize:
        raise ArtifactError(f"{where}: stored sizes differ ({csize} and {usize})")
    if disk:
        raise ArtifactError(f"{where} is on another disk of a split archive")


def _check_local(handle: BinaryIO, member: Member, flags: int, where: str) -> Member:
    head = _read_at(handle, member.header_offset, 30)
    sig, _, lflags, method, _, _, crc, csize, usize, n_name, n_extra = struct.unpack(
        "<IHHHHHIIIHH", head
    )
    if sig != _LOCAL:
        raise ArtifactError(f"{where}: no local header at byte {member.header_offset}")
    rest = _read_at(handle, member.header_offset + 30, n_name + n_extra)
    if rest[:n_name] != member.name.encode("ascii") or method != 0 or lflags != flags:
        raise ArtifactError(f"{where}: the local header disagrees with the central directory")
    if usize == _MAX32 or csize == _MAX32:
        big = _zip64_values(rest[n_name:], ["usize", "csize"], where)
        usize, csize = big["usize"], big["csize"]
    if crc != member.crc or usize != member.size or csize != member.size:
        raise ArtifactError(
            f"{where}: the local header's CRC or sizes disagree with the central directory"
        )
    member.data_offset = member.header_offset + 30 + n_name + n_extra
    return member


def _check_tiling(members: dict[str, Member], cd_offset: int) -> None:
    at = 0
    for member in sorted(members.values(), key=lambda m: m.header_offset):
        if member.header_offset != at:
            raise ArtifactError(
                f"member {member.name!r} starts at byte {member.header_offset}, not {at}: "
                "artifacts have no data before, between or over their members"
            )
        at = member.data_offset + member.size
    if at != cd_offset:
        raise ArtifactError(
            f"{cd_offset - at} bytes lie between the last member and the central directory"
        )
