"""Reading and writing an artifact: ``program.json`` and ``tensors.safetensors`` in a ZIP.

Saving streams the tensors from where they lie into a fresh temporary file (``atomic``),
hashing them on the way, and renames it into place. Loading checks the container, the
program and the tensors header, then memory-maps the file copy-on-write: the state tensors
are views of the file (the file is never written; a page a program writes to, such as
BatchNorm statistics in training, becomes private to the process).

Note: when the weights' checksum is checked. ``program.json`` and the tensors header are
always checked in full. The SHA-256 of the tensor data costs a read of every byte, which
for a large model is most of the cost of a load that otherwise touches only what a call
uses. It runs when ``verify=True``, in ``tracebridge validate`` (``verify``), and by
default (``verify=None``) when the tensor data is at most ``VERIFY_BELOW`` bytes; above
that, the sizes and offsets of every tensor are still checked against the header and the
program, so no read goes outside the file, but flipped bits inside the weights go
unnoticed until ``verify``.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import torch

from ..check.program import (
    FILE_FIX,
    LIMITS,
    SAVE_FIX,
    check_json_containers,
    check_json_size,
    check_program,
    json_containers,
)
from ..errors import ArtifactError
from ..ir import (
    DTYPE_NAMES,
    FORMAT_VERSION,
    OPSET_VERSION,
    Program,
    StateEntry,
    dtypes,
    graph_from_json,
    graph_to_json,
)
from ..progress import advance
from ..version import __version__
from . import compiled as compiled_member
from . import devices
from . import generators as kept_generators
from . import tensors as st
from .atomic import atomic_file
from .container import PROGRAM_MEMBER, TENSORS_MEMBER, Member, Writer, read_members
from .jsonstrict import loads_strict
from .weights import WeightsArg, bind

VERIFY_BELOW = 64 * 1024 * 1024
_CHUNK = 16 * 1024 * 1024


# --- writing ------------------------------------------------------------------------------


def program_to_json(program: Program, language: str | None = None) -> dict:
    """The program.json document of ``program`` (without the ``tensors`` entry)."""
    doc = {
        "format": "tracebridge",
        "format_version": FORMAT_VERSION,
        "opset_version": OPSET_VERSION,
        "producer": {
            "name": "tracebridge",
            "version": __version__,
            "language": language or program.language,
            "torch": torch.__version__.split("+")[0],
        },
        "kind": program.kind,
        "training": program.training,
        "methods": {name: graph_to_json(g) for name, g in program.methods.items()},
        "dispatch": program.dispatch,
        "module_classes": program.module_classes,
        "state": {name: _state_entry(name, e) for name, e in program.state.items()},
        "meta": program.meta,
    }
    if program.mode_bound:
        doc["mode_bound"] = program.mode_bound
    if program.module_modes:
        doc["module_modes"] = program.module_modes
    if program.backend is not None:
        doc["backend"] = program.backend
    if program.specialised:
        doc["specialised"] = program.specialised
    if program.aliases:
        doc["aliases"] = program.aliases
    if program.module_reprs:
        doc["module_reprs"] = program.module_reprs
    if program.module_types:
        doc["module_types"] = program.module_types
    if program.generators:
        doc["generators"] = kept_generators.to_json(program.generators)
    return doc


def _state_entry(name: str, entry: StateEntry) -> dict:
    out = {
        "kind": entry.kind,
        "dtype": dtypes.name_of(entry.tensor.dtype, f"{entry.kind} {name!r}"),
        "shape": list(entry.tensor.shape),
        "requires_grad": bool(entry.tensor.requires_grad),
    }
    device = devices.saved_device(entry.tensor)
    if device is not None:
        out["device"] = device  # restored at load (artifact/devices.py)
    if not entry.persistent:
        out["persistent"] = False  # a buffer no state_dict() or checkpoint holds
    return out


class _Digest:
    """SHA-256 and CRC-32 of a stream, computed beside the write: both release the GIL on
    large buffers, so hashing overlaps the disk instead of adding to it."""

    def __init__(self):
        self.sha = hashlib.sha256()
        self.crc = 0
        self._pool = ThreadPoolExecutor(2)
        self._pending: list = []

    def _crc(self, data) -> None:
        self.crc = zlib.crc32(data, self.crc)

    def start(self, data) -> None:
        """Begin hashing ``data`` (call ``wait`` before the next ``start``)."""
        if memoryview(data).nbytes < (1 << 20):
            self.sha.update(data)
            self._crc(data)
        else:
            self._pending = [
                self._pool.submit(self.sha.update, data),
                self._pool.submit(self._crc, data),
            ]

    def wait(self) -> None:
        for job in self._pending:
            job.result()
        self._pending = []

    def close(self) -> None:
        self.wait()
        self._pool.shutdown()


def _stream_tensors(
    writer: Writer, layout: st.Layout, tensors: dict[str, torch.Tensor]
) -> tuple[str, int]:
    digest = _Digest()
    try:
        for piece in _pieces(layout, tensors):
            for start in range(0, max(piece.nbytes, 1), _CHUNK):
                chunk = piece[start : start + _CHUNK]
                digest.start(chunk)
                writer.write(chunk)
                digest.wait()
                advance(memoryview(chunk).nbytes)
    finally:
        digest.close()
    return digest.sha.hexdigest(), digest.crc


def _pieces(layout: st.Layout, tensors: dict[str, torch.Tensor]):
    yield memoryview(layout.head)
    for entry in layout.entries:
        if st.is_filler(entry.name):
            yield memoryview(st.filler_bytes(entry))
        else:
            yield st.tensor_bytes(tensors[entry.name])


def write(
    program: Program,
    path: str | os.PathLike,
    language: str | None = None,
    *,
    zip64: bool = False,
    compiled: dict | None = None,
) -> None:
    """Write ``program`` to ``path`` (any file name), atomically; ``language`` overrides the
    program's source language (``program.language``). State on the meta device is not
    stored: the artifact lists it under ``tensors.external``, and ``load(path, weights=...)``
    binds it. ``zip64`` forces ZIP64 records (files over 4 GiB get them anyway).
    ``compiled``: ``{"package": file, "device": ..., ...}`` stores an AOTInductor package
    as the optional member ``compiled.pt2`` (artifact/compiled.py)."""
    language = language or program.language
    if language not in ("python", "r"):
        raise ArtifactError(f"language must be 'python' or 'r', not {language!r}")
    doc = program_to_json(program, language)
    # Never write a file that no reader would load: the load-time rules hold on save too.
    try:
        check_program(doc, os.fspath(path))
    except ArtifactError as exc:
        raise ArtifactError(str(exc).replace(FILE_FIX, SAVE_FIX)) from None
    stored = {n: e.tensor for n, e in program.state.items() if not e.tensor.is_meta}
    external = [n for n, e in program.state.items() if e.tensor.is_meta]
    count = len(stored)  # (the generators' states are not state tensors)
    stored.update(kept_generators.states(program.generators))
    layout = st.plan(stored)
    with atomic_file(path) as handle:
        writer = Writer(handle, zip64=zip64)
        writer.begin(TENSORS_MEMBER, layout.size, align=st.ALIGN)
        sha, crc = _stream_tensors(writer, layout, stored)
        writer.end(crc)
        doc["tensors"] = {"sha256": sha, "count": count}
        if external:
            doc["tensors"]["external"] = external
        if compiled is not None:
            extra = dict(compiled)
            package, device = extra.pop("package"), extra.pop("device")
            sha, size = compiled_member.write_member(writer, package)
            doc["compiled"] = compiled_member.entry(doc, device, sha, size, **extra)
        try:
            text = json.dumps(doc, indent=1, allow_nan=False).encode()
        except ValueError as exc:
            raise ArtifactError(f"the program cannot be written as JSON ({exc})") from None
        # The loader counts these before parsing: a file it would refuse is never written.
        containers = json_containers(text)
        if len(text) > LIMITS["program_bytes"] or containers > LIMITS["containers"]:
            raise ArtifactError(
                f"{os.fspath(path)}: not saved: its program.json would have {len(text)} bytes "
                f"and {containers} JSON objects and arrays, over what a reader accepts "
                f"({LIMITS['program_bytes']} and {LIMITS['containers']}) [rule: resource "
                "limits]; trace fewer methods, or a smaller part of the model"
            )
        writer.begin(PROGRAM_MEMBER, len(text))
        writer.write(text)
        writer.end(zlib.crc32(text))
        writer.close()


def safetensors_bytes(tensors: dict[str, torch.Tensor]) -> tuple[bytes, dict]:
    """A whole safetensors file in memory (for small files such as ``tracebridge run``'s
    outputs), in the artifact's aligned layout; returns the bytes and the header."""
    layout = st.plan(tensors)
    data = b"".join(bytes(p) for p in _pieces(layout, tensors))
    header = {e.name: e for e in layout.entries if not st.is_filler(e.name)}
    return data, header


# --- reading ------------------------------------------------------------------------------


@dataclass
class Opened:
    """An artifact opened and checked, its weights not yet read: the document, where the
    tensors lie in the file, and the file itself (kept open for mapping)."""

    name: str
    doc: dict
    handle: BinaryIO
    entries: dict[str, st.Entry] = field(default_factory=dict)
    member: Member | None = None
    data_base: int = 0  # file offset of the first tensor byte
    members: dict[str, Member] = field(default_factory=dict)

    def mapping(self) -> mmap.mmap:
        """The whole file mapped copy-on-write (shared with the page cache until written)."""
        return mmap.mmap(self.handle.fileno(), 0, access=mmap.ACCESS_COPY)

    def verify(self, buffer=None) -> None:
        """Check the SHA-256 (and CRC-32) of the tensor data: a read of every byte."""
        member = self.member
        expected = self.doc.get("tensors", {}).get("sha256")
        if member is None:
            return
        buffer = buffer if buffer is not None else self.mapping()
        view = memoryview(buffer)[member.data_offset : member.data_offset + member.size]
        digest = _Digest()
        try:
            for start in range(0, member.size, _CHUNK):
                digest.start(view[start : start + _CHUNK])
                digest.wait()
                advance(min(_CHUNK, member.size - start))
        finally:
            digest.close()
            view.release()
        if digest.crc != member.crc:
            raise ArtifactError(f"{self.name}: {TENSORS_MEMBER} fails its CRC-32 (corrupt)")
        if expected and digest.sha.hexdigest() != expected:
            raise ArtifactError(
                f"{self.name}: {TENSORS_MEMBER} does not match its sha256 checksum (the file "
                "is corrupt or was edited)"
            )


def open_artifact(path: str | os.PathLike) -> Opened:
    """Open ``path`` and check everything but the weights' bytes: the container, program.json
    (JSON, versions, schema, op set) and the tensors header against the state."""
    name = os.fspath(path)
    if not os.path.exists(name):
        raise ArtifactError(f"{name}: no such file")
    if not os.path.isfile(name):
        raise ArtifactError(f"{name}: not a regular file")
    handle = open(name, "rb")  # noqa: SIM115 - kept open by Opened for the mapping
    try:
        opened = _open(name, handle)
    except BaseException:
        handle.close()
        raise
    return opened


def _open(name: str, handle: BinaryIO) -> Opened:
    size = os.fstat(handle.fileno()).st_size
    head = handle.read(4)
    if head[:2] != b"PK":
        raise ArtifactError(
            f"{name}: not a tracebridge artifact (not a ZIP archive; tracebridge files are "
            "ZIP archives holding program.json)"
        )
    try:
        members = read_members(handle, size)
    except ArtifactError as exc:
        raise ArtifactError(f"{name}: {exc}") from None
    program = members[PROGRAM_MEMBER]
    check_json_size(program.size, name)  # before reading a byte of it
    handle.seek(program.data_offset)
    text = handle.read(program.size)
    if zlib.crc32(text) != program.crc:
        raise ArtifactError(f"{name}: {PROGRAM_MEMBER} fails its CRC-32 (corrupt)")
    check_json_containers(text, name)  # before parsing: parse cost grows with containers
    doc = loads_strict(text, f"{name}: {PROGRAM_MEMBER}")
    check_document(doc, name)
    opened = Opened(name, doc, handle, members=members)
    tensors = members.get(TENSORS_MEMBER)
    if tensors is not None and tensors.size:
        handle.seek(tensors.data_offset)
        try:
            entries, start = st.parse_header(handle.read(8), handle.read, tensors.size)
        except ArtifactError as exc:
            raise ArtifactError(f"{name}: {exc}") from None
        opened.entries, opened.member = entries, tensors
        opened.data_base = tensors.data_offset + start
    _check_state(opened)
    return opened


def _check_state(opened: Opened) -> None:
    name, doc, entries = opened.name, opened.doc, opened.entries
    state = doc["state"]
    info = doc.get("tensors", {})
    external = info.get("external", [])
    if not isinstance(external, list) or not all(isinstance(n, str) for n in external):
        raise ArtifactError(f"{name}: tensors.external must be a list of state names")
    if len(set(external)) != len(external) or any(n not in state for n in external):
        raise ArtifactError(
            f"{name}: tensors.external names a tensor twice or one not in the state"
        )
    stored = [n for n in state if n not in external]
    both = [n for n in external if n in entries]
    kept_generators.check_entries(doc, entries, name)
    extra = [n for n in entries if n not in state and not kept_generators.is_entry(n)]
    if both or extra:
        raise ArtifactError(
            f"{name}: {TENSORS_MEMBER} holds {', '.join(map(repr, both + extra))}, which "
            "program.json lists as external or not at all"
        )
    for key in stored:
        if key not in entries:
            raise ArtifactError(f"{name}: state {key!r} has no tensor in {TENSORS_MEMBER}")
        entry, want = entries[key], state[key]
        if entry.shape != want["shape"] or DTYPE_NAMES[entry.dtype] != want["dtype"]:
            raise ArtifactError(
                f"{name}: state {key!r} does not match its description: program.json says "
                f"{want['dtype']}{want['shape']}, "
                f"{TENSORS_MEMBER} says {DTYPE_NAMES[entry.dtype]}{entry.shape}"
            )
    count = info.get("count")
    if count is not None and count != len(stored):
        raise ArtifactError(
            f"{name}: tensors.count is {count} but {TENSORS_MEMBER} holds {len(stored)} tensors"
        )


def read(
    path: str | os.PathLike,
    weights: WeightsArg | None = None,
    verify: bool | None = None,
    map_location: devices.MapLocation = None,
) -> Program:
    """Read and check an artifact; returns the Program, its state tensors views of the
    mapped file (or of the ``weights`` checkpoints). ``verify``: see the module Note.
    Tensors saved from another device than the CPU go back to it, or where
    ``map_location`` says (``artifact/devices.py``)."""
    opened = open_artifact(path)
    try:
        tensors: dict[str, torch.Tensor] = {}
        if opened.entries:
            buffer = opened.mapping()
            size = opened.member.size if opened.member else 0
            if verify or (verify is None and size <= VERIFY_BELOW):
                opened.verify(buffer)
            tensors = {k: st.view(buffer, e, opened.data_base) for k, e in opened.entries.items()}
        elif verify and opened.member is not None:
            opened.verify()
        external = opened.doc.get("tensors", {}).get("external", [])
        unread = unread_transient(opened.doc, external)
        needed = [n for n in external if n not in unread]
        if weights is not None:
            tensors.update(
                bind(
                    opened.doc["state"],
                    needed,
                    weights,
                    opened.name,
                    opened.doc.get("aliases", {}),
                )
            )
        elif needed:
            shown = ", ".join(needed[:5]) + (", ..." if len(needed) > 5 else "")
            raise ArtifactError(
                f"{opened.name}: the artifact holds no data for {len(needed)} state tensors "
                f"({shown}): it was saved from a program traced on the meta device. Load it "
                "with weights= a .safetensors file, a list of them, or a sharded index "
                "(model.safetensors.index.json)"
            )
        doc = _without_state(opened.doc, [n for n in unread if n not in tensors])
        program = program_from_json(doc, tensors, opened.name, map_location=map_location)
        devices.place(program.state, devices.saved_devices(opened.doc), map_location, opened.name)
        return program
    finally:
        opened.handle.close()  # the mapping keeps the file itself alive


def describe(path: str | os.PathLike) -> tuple[dict, Program]:
    """Every check of ``read`` plus the weights' checksum; returns program.json and the
    Program, its stored state mapped and its external state (``tensors.external``) as meta
    tensors of the described dtype and shape: for ``tracebridge inspect`` and ``validate``,
    which describe a program without running it or binding its weights."""
    opened = open_artifact(path)
    try:
        tensors: dict[str, torch.Tensor] = {}
        if opened.member is not None and opened.member.size:
            buffer = opened.mapping()
            opened.verify(buffer)
            tensors = {k: st.view(buffer, e, opened.data_base) for k, e in opened.entries.items()}
        state = opened.doc["state"]
        for name in opened.doc.get("tensors", {}).get("external", []):
            tensors[name] = _described_meta(state[name])
        return opened.doc, program_from_json(opened.doc, tensors, opened.name, describing=True)
    finally:
        opened.handle.close()


def _described_meta(info: dict) -> torch.Tensor:
    """A meta tensor of the dtype and shape that a state entry of program.json describes."""
    dtype = next(d for d, n in DTYPE_NAMES.items() if n == info["dtype"])
    return torch.empty(info["shape"], dtype=dtype, device="meta")


def unread_transient(doc: dict, external: list[str]) -> list[str]:
    """The ``external`` state names (no data in the file) that are non-persistent buffers
    no graph of ``doc`` reads.

    Note: such a buffer (a causal-mask cache the traced path never used, on the meta
    device when traced) is in no checkpoint, the file holds no values for it, and no call
    of the program needs them, so a load does not ask for it. Unless the weights hold it,
    the loaded program leaves it out (``_without_state``): a meta tensor in its place
    would make ``loaded.to("cuda")`` fail ("Cannot copy out of meta tensor"), and any
    values made up for it would be wrong. ``state_dict()`` keys are unchanged (it was
    never in them). A persistent one is still asked for: the checkpoint of the traced
    model holds it, and a missing one means another model."""
    read = {
        node["args"][0]
        for graph in doc["methods"].values()
        for node in graph["nodes"]
        if node["op"] == "prim.state" and node["args"]
    }
    state = doc["state"]
    return [
        name
        for name in external
        if state[name].get("persistent", True) is False
        and state[name]["kind"] == "buffer"
        and name not in read
    ]


def _without_state(doc: dict, names: list[str]) -> dict:
    """``doc`` with the state entries ``names`` (and the tied names of them) left out."""
    if not names:
        return doc
    gone = set(names)
    out = dict(doc)
    out["state"] = {k: v for k, v in doc["state"].items() if k not in gone}
    aliases = doc.get("aliases", {})
    out["aliases"] = {k: v for k, v in aliases.items() if v not in gone and k not in gone}
    return out


def verify(path: str | os.PathLike) -> dict:
    """Every check of ``read`` plus the weights' checksum, without building tensors;
    returns program.json (``tracebridge validate``)."""
    opened = open_artifact(path)
    try:
        if opened.member is not None and opened.member.size:
            opened.verify()
        return opened.doc
    finally:
        opened.handle.close()


def read_json(path: str | os.PathLike) -> tuple[dict, memoryview]:
    """Open and check an artifact; returns program.json and the tensors member's bytes (a
    view of the mapped file: nothing is read until used)."""
    opened = open_artifact(path)
    try:
        member = opened.member
        if member is None or not member.size:
            return opened.doc, memoryview(b"")
        buffer = opened.mapping()
        return opened.doc, memoryview(buffer)[member.data_offset : member.data_offset + member.size]
    finally:
        opened.handle.close()


def parse_safetensors(blob, name: str) -> dict[str, torch.Tensor]:
    """The tensors of a whole safetensors file held in memory (``blob``), checked by the
    rules of ``tensors.parse_header``; the tensors are copies, independent of ``blob``."""
    data = memoryview(blob)
    if not data.nbytes:
        return {}
    pos = [8]

    def take(n: int) -> bytes:
        out = data[pos[0] : pos[0] + n].tobytes()
        pos[0] += n
        return out

    try:
        entries, start = st.parse_header(data[:8].tobytes(), take, data.nbytes)
    except ArtifactError as exc:
        raise ArtifactError(f"{name}: {exc}") from None
    buffer = bytearray(data[start:])
    return {k: st.view(buffer, e, 0).clone() for k, e in entries.items()}


# --- the document ---------------------------------------------------------------------------


def check_document(doc: Any, name: str) -> None:
    """Every rule of the spec (``check.program.check_program``), before anything runs."""
    check_program(doc, name)


def program_from_json(
    doc: dict,
    tensors: dict[str, torch.Tensor],
    name: str = "",
    describing: bool = False,
    map_location: devices.MapLocation = None,
) -> Program:
    """The Program of a checked document, its state bound to ``tensors`` by name
    (``describing``: for a description only, a CUDA generator is left out where this
    machine has no CUDA, as devices are ignored there; ``map_location``: where the
    generators go, generators.load_device)."""
    state = {}
    for key, info in doc["state"].items():
        if key not in tensors:
            raise ArtifactError(f"{name}: state {key!r} has no tensor in {TENSORS_MEMBER}")
        tensor = tensors[key]
        if list(tensor.shape) != info["shape"] or DTYPE_NAMES[tensor.dtype] != info["dtype"]:
            raise ArtifactError(f"{name}: state {key!r} does not match its description")
        if info["kind"] == "constant" and info.get("requires_grad") is True:
            # a tensor the code closed over that requires grad (a module's parameter a
            # traced function reads): gradients flow to it as in the traced process, and
            # its results require grad as eager's (prober21b M4)
            grows = tensor.is_floating_point() or tensor.is_complex()
            if grows and not tensor.is_inference():  # (inference tensors never require it)
                tensor.requires_grad_()
        state[key] = StateEntry(info["kind"], tensor, info.get("persistent", True))
    try:
        methods = {m: graph_from_json(g) for m, g in doc["methods"].items()}
    except (KeyError, ValueError, TypeError) as exc:
        raise ArtifactError(f"{name}: a graph is malformed ({exc})") from None
    meta = dict(doc.get("meta", {}))
    mode_bound = doc.get("mode_bound", {})
    backend = doc.get("backend")
    if doc["format_version"] == 1:
        # Format 1 kept these in meta; format 2 made them fields (meta is display-only).
        mode_bound = meta.pop("mode_bound", {})
        backend = meta.pop("backend", None)
    return Program(
        kind=doc["kind"],
        methods=methods,
        state=state,
        dispatch=doc.get("dispatch", {}),
        training=doc.get("training", False),
        module_classes=doc.get("module_classes", {}),
        module_reprs=dict(doc.get("module_reprs", {})),
        module_types=dict(doc.get("module_types", {})),
        language=doc.get("producer", {}).get("language", "python"),
        mode_bound=mode_bound,
        module_modes=dict(doc.get("module_modes", {})),
        backend=backend,
        specialised=dict(doc.get("specialised", {})),
        aliases=dict(doc.get("aliases", {})),
        generators=kept_generators.rebuild(doc, tensors, name, describing, map_location),
        meta=meta,
        from_file=True,
    )
