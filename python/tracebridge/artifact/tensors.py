"""The ``tensors.safetensors`` member: the safetensors layout, aligned, streamed, mapped.

Note: alignment. Kernels may round differently on memory that is not aligned to their
vector width, so a tensor read from an unaligned offset can compute other bits than the
same tensor in process (issue 12: up to 3.6 on outputs near 1,200). Every tensor's data
therefore starts at a file offset that is a multiple of 64: the member's data is aligned
inside the ZIP (``container``), the safetensors header is padded with spaces as the format
allows, and where a tensor's size would leave the next one unaligned, a *filler* entry
(``#pad0``, ``#pad1``, ...: dtype ``U8``, 1 to 63 bytes of zeros) takes up the gap. The
safetensors format forbids holes in the data, so fillers are ordinary entries that any
safetensors reader accepts, and readers of artifacts skip them (SPEC section 9).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import ArtifactError
from ..ir import dtypes
from .jsonstrict import loads_strict

ALIGN = 64
FILLER_PREFIX = "#pad"
MAX_HEADER_BYTES = 100_000_000  # the safetensors library's own limit
MAX_DIM = 2**63  # dimensions are int64 in PyTorch
# torch.dtype <-> safetensors code, from the one dtype table (ir/dtypes.py).
ST_DTYPES = {d.torch: d.safetensors for d in dtypes.TABLE if d.safetensors}
FROM_ST = {v: k for k, v in ST_DTYPES.items()}


@dataclass
class Entry:
    """A tensor in the member: its dtype, shape and ``[begin, end)`` in the data."""

    name: str
    dtype: torch.dtype
    shape: list[int]
    begin: int
    end: int


@dataclass
class Layout:
    """What ``plan`` decided: the header bytes (length prefix included), the entries in
    data order (fillers included), and the member's total size."""

    head: bytes
    entries: list[Entry]
    size: int


def is_filler(name: str) -> bool:
    return name.startswith(FILLER_PREFIX)


def _nbytes(dtype: torch.dtype, shape: list[int]) -> int:
    count = 1
    for d in shape:
        count *= d
    return count * torch.empty((), dtype=dtype).element_size()


def plan(tensors: dict[str, torch.Tensor]) -> Layout:
    """Lay out ``tensors`` (in their order) with every data offset a multiple of ``ALIGN``
    relative to the start of the member, which the writer places 64-aligned in the file."""
    entries: list[Entry] = []
    offset = 0
    for name, tensor in tensors.items():
        if tensor.dtype not in ST_DTYPES:
            raise ArtifactError(
                f"state tensor {name!r} has dtype {tensor.dtype}, which the artifact "
                f"format cannot store (it stores {', '.join(str(d)[6:] for d in ST_DTYPES)})"
            )
        gap = -offset % ALIGN
        if gap:
            filler = f"{FILLER_PREFIX}{len(entries)}"
            entries.append(Entry(filler, torch.uint8, [gap], offset, offset + gap))
            offset += gap
        shape = list(tensor.shape)
        size = _nbytes(tensor.dtype, shape)
        entries.append(Entry(name, tensor.dtype, shape, offset, offset + size))
        offset += size
    header = {
        e.name: {"dtype": ST_DTYPES[e.dtype], "shape": e.shape, "data_offsets": [e.begin, e.end]}
        for e in entries
    }
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * (-(8 + len(text)) % ALIGN)
    head = struct.pack("<Q", len(text)) + text
    return Layout(head, entries, len(head) + offset)


def tensor_bytes(tensor: torch.Tensor) -> memoryview:
    """The bytes of ``tensor`` as stored (C order, little-endian), without a copy when it
    is already a contiguous CPU tensor: saving streams each tensor from where it lies."""
    data = tensor.detach()
    if data.device.type != "cpu":
        data = data.cpu()
    data = data.resolve_conj().resolve_neg().contiguous()
    if data.numel() == 0:
        return memoryview(b"")
    return memoryview(data.reshape(-1).view(torch.uint8).numpy())


def filler_bytes(entry: Entry) -> bytes:
    return bytes(entry.end - entry.begin)


# --- reading ------------------------------------------------------------------------------


def parse_header(head_len_bytes: bytes, read, size: int) -> tuple[dict[str, Entry], int]:
    """Check the safetensors header of a member of ``size`` bytes; returns the entries by
    name (fillers left out) and where the data starts within the member.

    ``head_len_bytes`` are the first 8 bytes; ``read(n)`` returns the next ``n``. The rules
    are the safetensors library's (a JSON object starting with ``{``, trailing spaces
    allowed; offsets inside the data, contiguous, without holes or overlaps; sizes that fit
    the shapes) plus the artifact's (no duplicate keys, no other fields, fillers are U8).
    """
    if size < 8:
        raise ArtifactError("tensors.safetensors is truncated (less than 8 bytes)")
    (head_len,) = struct.unpack("<Q", head_len_bytes)
    if head_len > MAX_HEADER_BYTES or head_len > size - 8:
        raise ArtifactError(
            f"tensors.safetensors: its header claims {head_len} bytes, past the end of the "
            f"member or the {MAX_HEADER_BYTES}-byte limit"
        )
    raw = read(head_len)
    header = loads_strict(raw, "tensors.safetensors header")
    if not isinstance(header, dict) or raw[:1] != b"{":
        raise ArtifactError("tensors.safetensors: the header is not a JSON object")
    data_len = size - 8 - head_len
    entries, spans = {}, []
    for name, info in header.items():
        if name == "__metadata__":
            if not isinstance(info, dict) or not all(isinstance(v, str) for v in info.values()):
                raise ArtifactError("tensors.safetensors: __metadata__ must map strings to strings")
            continue
        entry = _entry(name, info)
        if is_filler(name) and (entry.dtype != torch.uint8 or len(entry.shape) != 1):
            raise ArtifactError(f"tensors.safetensors: filler {name!r} must be a 1-D U8 entry")
        spans.append(entry)
        if not is_filler(name):
            entries[name] = entry
    at = 0
    for entry in sorted(spans, key=lambda e: (e.begin, e.end)):
        if entry.begin != at:
            raise ArtifactError(
                f"tensors.safetensors: tensor {entry.name!r} starts at data offset "
                f"{entry.begin}, not {at} (the data must be contiguous, without holes or "
                "overlaps)"
            )
        at = entry.end
    if at != data_len:
        raise ArtifactError(
            f"tensors.safetensors has a bad dtype or offsets: its tensors cover {at} bytes of "
            f"data but the member holds {data_len}"
        )
    return entries, 8 + head_len


def _entry(name: str, info: Any) -> Entry:
    where = f"tensors.safetensors: tensor {name!r}"
    if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
        raise ArtifactError(f"{where} must have exactly dtype, shape and data_offsets")
    dtype = FROM_ST.get(info["dtype"]) if isinstance(info["dtype"], str) else None
    shape, offsets = info["shape"], info["data_offsets"]
    if dtype is None:
        raise ArtifactError(f"{where} has dtype {info['dtype']!r}, which artifacts do not hold")
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise ArtifactError(f"{where} has a bad shape {shape!r}")
    if any(d >= MAX_DIM for d in shape):
        # PyTorch sizes are int64: even a tensor of no elements cannot have such a dimension.
        raise ArtifactError(f"{where} has a dimension of 2^63 or more (shape {shape})")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(type(o) is int for o in offsets)
        or not 0 <= offsets[0] <= offsets[1]
    ):
        raise ArtifactError(f"{where} has bad data_offsets {offsets!r}")
    if _nbytes(dtype, shape) != offsets[1] - offsets[0]:
        raise ArtifactError(
            f"{where}: {offsets[1] - offsets[0]} bytes do not fit shape {shape} of {info['dtype']}"
        )
    return Entry(name, dtype, shape, offsets[0], offsets[1])


def view(buffer, entry: Entry, base: int) -> torch.Tensor:
    """The tensor of ``entry`` as a view of ``buffer`` (a memory map) at ``base``."""
    count = 1
    for d in entry.shape:
        count *= d
    if count == 0:
        return torch.empty(entry.shape, dtype=entry.dtype)
    flat = torch.frombuffer(buffer, dtype=entry.dtype, count=count, offset=base + entry.begin)
    return flat.reshape(entry.shape)
