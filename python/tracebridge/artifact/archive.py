"""The artifact: one ZIP archive (stored, not compressed) holding

* ``program.json``: the program (methods, state metadata, metadata), see SPEC.md;
* ``tensors.safetensors``: every state tensor, in safetensors layout (8-byte little-endian
  header length, a JSON header of ``name -> {dtype, shape, data_offsets}``, raw bytes).

Any language reads it with a ZIP reader and a JSON parser. Nothing is pickled; op names are
checked against the op set before anything runs. The format is recognised by content,
whatever the file is called.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import zipfile
from typing import Any

import torch

from ..check.program import check_json_size, check_program
from ..errors import ArtifactError
from ..ir import (
    DTYPE_NAMES,
    DTYPES,
    FORMAT_VERSION,
    OPSET_VERSION,
    Program,
    StateEntry,
    dtypes,
    graph_from_json,
    graph_to_json,
)
from ..version import __version__

PROGRAM_MEMBER = "program.json"
TENSORS_MEMBER = "tensors.safetensors"
_ST_DTYPES = dtypes.ST_CODES
_FROM_ST = dtypes.FROM_ST


# --- writing ------------------------------------------------------------------------------


def program_to_json(program: Program, language: str = "python") -> dict:
    return {
        "format": "tracebridge",
        "format_version": FORMAT_VERSION,
        "opset_version": OPSET_VERSION,
        "producer": {
            "name": "tracebridge",
            "version": __version__,
            "language": language,
            "torch": torch.__version__.split("+")[0],
        },
        "kind": program.kind,
        "training": program.training,
        "methods": {name: graph_to_json(g) for name, g in program.methods.items()},
        "dispatch": program.dispatch,
        "module_classes": program.module_classes,
        "state": {
            name: {
                "kind": e.kind,
                "dtype": DTYPE_NAMES[e.tensor.dtype],
                "shape": list(e.tensor.shape),
                "requires_grad": bool(e.tensor.requires_grad),
            }
            for name, e in program.state.items()
        },
        "meta": program.meta,
    }


def safetensors_bytes(tensors: dict[str, torch.Tensor]) -> tuple[bytes, dict]:
    header: dict[str, Any] = {}
    chunks, offset = [], 0
    for name, tensor in tensors.items():
        data = tensor.detach().cpu().contiguous()
        if data.dtype not in DTYPE_NAMES or DTYPE_NAMES[data.dtype] not in _ST_DTYPES:
            raise ArtifactError(
                f"state tensor {name!r} has dtype {data.dtype}, which the "
                "artifact format cannot store"
            )
        raw = data.reshape(-1).view(torch.uint8).numpy().tobytes() if data.numel() else b""
        header[name] = {
            "dtype": _ST_DTYPES[DTYPE_NAMES[data.dtype]],
            "shape": list(data.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        chunks.append(raw)
        offset += len(raw)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # align the data to 8 bytes, as safetensors does
    return struct.pack("<Q", len(head)) + head + b"".join(chunks), header


def _add_member(archive: zipfile.ZipFile, name: str, data: bytes) -> None:
    """A stored member with a fixed date, so that saving the same trace twice gives the
    same bytes (reproducible artifacts, stable checksums)."""
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    info.external_attr = 0o644 << 16
    archive.writestr(info, data)


def write(program: Program, path: str | os.PathLike, language: str = "python") -> None:
    """Write ``program`` to ``path`` (any file name); ``language`` is the producer's."""
    if language not in ("python", "r"):
        raise ArtifactError(f"language must be 'python' or 'r', not {language!r}")
    doc = program_to_json(program, language)
    blob, header = safetensors_bytes({n: e.tensor for n, e in program.state.items()})
    doc["tensors"] = {"sha256": hashlib.sha256(blob).hexdigest(), "count": len(header)}
    text = json.dumps(doc, indent=1, sort_keys=False).encode()
    tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED) as archive:
        _add_member(archive, PROGRAM_MEMBER, text)
        _add_member(archive, TENSORS_MEMBER, blob)
    os.replace(tmp, path)  # never leave a half-written artifact under the real name


# --- reading ------------------------------------------------------------------------------


def read_json(path: str | os.PathLike) -> tuple[dict, bytes]:
    """Open an artifact and return its program JSON and raw tensor bytes, checked."""
    name = os.fspath(path)
    if not os.path.exists(name):
        raise ArtifactError(f"{name}: no such file")
    if not zipfile.is_zipfile(name):
        raise ArtifactError(
            f"{name}: not a tracebridge artifact (not a ZIP archive; "
            "tracebridge files are ZIP archives holding program.json)"
        )
    try:
        with zipfile.ZipFile(name) as archive:
            members = set(archive.namelist())
            if PROGRAM_MEMBER not in members:
                raise ArtifactError(f"{name}: not a tracebridge artifact (no {PROGRAM_MEMBER})")
            check_json_size(archive.getinfo(PROGRAM_MEMBER).file_size, name)
            text = archive.read(PROGRAM_MEMBER)
            blob = archive.read(TENSORS_MEMBER) if TENSORS_MEMBER in members else b""
    except ArtifactError:
        raise
    except (
        zipfile.BadZipFile,
        OSError,
        EOFError,
        ValueError,
        NotImplementedError,
        RuntimeError,
    ) as exc:
        raise ArtifactError(f"{name}: corrupt or truncated archive ({exc})") from None
    try:
        doc = json.loads(text)
    except RecursionError:
        raise ArtifactError(f"{name}: {PROGRAM_MEMBER} is nested too deeply") from None
    except ValueError as exc:
        raise ArtifactError(f"{name}: {PROGRAM_MEMBER} is not valid JSON ({exc})") from None
    check_document(doc, name)
    return doc, blob


def check_document(doc: Any, name: str) -> None:
    """Every rule of the spec (``check.program.check_program``), before anything runs."""
    check_program(doc, name)


def parse_safetensors(blob: bytes, name: str) -> dict[str, torch.Tensor]:
    if not blob:
        return {}
    if len(blob) < 8:
        raise ArtifactError(f"{name}: {TENSORS_MEMBER} is truncated")
    (head_len,) = struct.unpack("<Q", blob[:8])
    if head_len > len(blob) - 8:
        raise ArtifactError(f"{name}: {TENSORS_MEMBER} header runs past the end of the data")
    try:
        header = json.loads(blob[8 : 8 + head_len])
    except ValueError:
        raise ArtifactError(f"{name}: {TENSORS_MEMBER} has a corrupt header") from None
    data = memoryview(bytearray(blob[8 + head_len :]))
    tensors = {}
    for key, info in header.items():
        if key == "__metadata__":
            continue
        dtype_name = _FROM_ST.get(info.get("dtype"))
        start, end = info.get("data_offsets", [0, -1])
        if dtype_name is None or not 0 <= start <= end <= len(data):
            raise ArtifactError(f"{name}: tensor {key!r} has a bad dtype or offsets")
        dtype = DTYPES[dtype_name]
        shape = info["shape"]
        count = 1
        for d in shape:
            count *= d
        if count * torch.empty((), dtype=dtype).element_size() != end - start:
            raise ArtifactError(
                f"{name}: tensor {key!r}: {end - start} bytes do not fit shape "
                f"{shape} of {dtype_name}"
            )
        if count == 0:
            tensors[key] = torch.empty(shape, dtype=dtype)
        else:
            tensors[key] = torch.frombuffer(data[start:end], dtype=dtype).reshape(shape)
    return tensors


def read(path: str | os.PathLike) -> Program:
    """Read and check an artifact; returns the Program (tensors on the CPU)."""
    name = os.fspath(path)
    doc, blob = read_json(path)
    expected = doc.get("tensors", {}).get("sha256")
    if expected and hashlib.sha256(blob).hexdigest() != expected:
        raise ArtifactError(f"{name}: {TENSORS_MEMBER} does not match its checksum (corrupt)")
    tensors = parse_safetensors(blob, name)
    return program_from_json(doc, tensors, name)


def program_from_json(doc: dict, tensors: dict[str, torch.Tensor], name: str = "") -> Program:
    state = {}
    for key, info in doc["state"].items():
        if key not in tensors:
            raise ArtifactError(f"{name}: state {key!r} has no tensor in {TENSORS_MEMBER}")
        tensor = tensors[key]
        if list(tensor.shape) != info["shape"] or DTYPE_NAMES[tensor.dtype] != info["dtype"]:
            raise ArtifactError(f"{name}: state {key!r} does not match its description")
        state[key] = StateEntry(info["kind"], tensor)
    try:
        methods = {m: graph_from_json(g) for m, g in doc["methods"].items()}
    except (KeyError, ValueError, TypeError) as exc:
        raise ArtifactError(f"{name}: a graph is malformed ({exc})") from None
    meta = dict(doc.get("meta", {}))
    meta["producer"] = doc.get("producer", {})
    meta["format_version"] = doc["format_version"]
    return Program(
        kind=doc["kind"],
        methods=methods,
        state=state,
        dispatch=doc.get("dispatch", {}),
        training=doc.get("training", False),
        module_classes=doc.get("module_classes", {}),
        meta=meta,
    )
