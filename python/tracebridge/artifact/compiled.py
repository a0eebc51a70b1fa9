"""The optional compiled member of an artifact: an AOTInductor package (``compiled.pt2``).

Note: what binds a package to its program. A package is native code plus the weights it
was compiled with; it is right only for the program it was made from, on the device kind,
PyTorch build and platform it was compiled for. program.json's ``compiled`` entry says so
(``device``, ``torch``, ``platform``) and carries ``digest``: the SHA-256 of the program's
methods and state descriptions and of its weights' checksum (``tensors.sha256``), so a
program or weights edited after compiling no longer match. The package's own bytes have
``sha256`` and ``size``. Readers never open the member unless the user trusts compiled
code (``tracebridge.load_compiled(..., trust_compiled_code=True)``); every other reader
ignores it (shared_ir/SPEC.md section 1, rule 2, and section 2).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import zlib

import torch

from ..errors import ArtifactError
from .container import COMPILED_MEMBER, Writer

_CHUNK = 16 * 1024 * 1024
FORMAT = "aotinductor"


def program_digest(doc: dict) -> str:
    """The SHA-256 that ties a package to ``doc`` (program.json): methods, state
    descriptions and the weights' checksum, as canonical JSON."""
    bound = {
        "methods": doc["methods"],
        "state": doc["state"],
        "weights": doc.get("tensors", {}).get("sha256"),
    }
    text = json.dumps(bound, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def this_platform() -> str:
    """Where native code built here runs: ``linux-x86_64``, ``darwin-arm64``, ..."""
    return f"{sys.platform}-{platform.machine()}"


def write_member(writer: Writer, package: str | os.PathLike) -> tuple[str, int]:
    """Stream the package file into the archive as ``compiled.pt2``; its SHA-256 and size."""
    size = os.path.getsize(package)
    sha = hashlib.sha256()
    crc = 0
    writer.begin(COMPILED_MEMBER, size)
    with open(package, "rb") as source:
        while chunk := source.read(_CHUNK):
            sha.update(chunk)
            crc = zlib.crc32(chunk, crc)
            writer.write(chunk)
    writer.end(crc)
    return sha.hexdigest(), size


def entry(doc: dict, device: str, sha: str, size: int, **extra) -> dict:
    """program.json's ``compiled`` entry for a package compiled for ``device``."""
    return {
        "format": FORMAT,
        "member": COMPILED_MEMBER,
        "device": device,
        "torch": torch.__version__,
        "platform": this_platform(),
        "digest": program_digest(doc),
        "sha256": sha,
        "size": size,
        **extra,
    }


def mismatch(doc: dict, device: torch.device | None) -> str | None:
    """Why the package of ``doc`` cannot run here (None: it can): another torch build,
    platform or device kind, or a program that changed since it was compiled."""
    info = doc.get("compiled")
    if not isinstance(info, dict):
        return "the file holds no compiled package (save it with tracebridge.save_compiled)"
    if info.get("format") != FORMAT:
        return f"its compiled form is {info.get('format')!r}, not {FORMAT!r}"
    if info.get("torch") != torch.__version__:
        return (
            f"it was compiled with torch {info.get('torch')}, and this is torch {torch.__version__}"
        )
    if info.get("platform") != this_platform():
        return f"it was compiled for {info.get('platform')}, and this is {this_platform()}"
    want = torch.device(info.get("device", "cpu")).type
    if device is not None and device.type != want:
        return f"it was compiled for {want}, and the program is to run on {device.type}"
    if want == "cuda" and not torch.cuda.is_available():
        return "it was compiled for cuda, and CUDA is not available here"
    if info.get("digest") != program_digest(doc):
        return "the program or its weights changed after it was compiled (digest mismatch)"
    return None


def describe(doc: dict) -> dict | None:
    """What ``tracebridge inspect`` shows of the compiled member (None: the file has
    none), from program.json alone -- the package is never opened, let alone run:
    the entry's fields, whether its digest matches the program (``digest_matches``) and
    why it cannot run in this process (``runs_here``: ``"yes"`` or the reason)."""
    info = doc.get("compiled")
    if not isinstance(info, dict):
        return None
    shown = {
        key: info.get(key)
        for key in ("format", "member", "method", "device", "torch", "platform", "size")
    }
    shown["digest_matches"] = info.get("digest") == program_digest(doc)
    why = mismatch(doc, None)
    shown["runs_here"] = "yes" if why is None else why
    return shown


def read_member(path: str | os.PathLike, doc: dict, opened=None) -> bytes:
    """The package bytes, checked against program.json's ``sha256`` and ``size``.
    ``opened``: the artifact already opened and checked (``open_artifact``; left open),
    so that the document is not checked a second time."""
    from .archive import open_artifact

    own = opened is None
    if own:
        opened = open_artifact(path)
    try:
        member = opened.members.get(COMPILED_MEMBER)
        info = doc["compiled"]
        if member is None:
            raise ArtifactError(
                f"{os.fspath(path)}: program.json describes a compiled package, but the "
                f"archive has no {COMPILED_MEMBER}; re-save it with tracebridge.save_compiled"
            )
        if member.size != info.get("size"):
            raise ArtifactError(f"{os.fspath(path)}: {COMPILED_MEMBER} has the wrong size")
        opened.handle.seek(member.data_offset)
        data = opened.handle.read(member.size)
    finally:
        if own:
            opened.handle.close()
    if zlib.crc32(data) != member.crc or hashlib.sha256(data).hexdigest() != info.get("sha256"):
        raise ArtifactError(
            f"{os.fspath(path)}: {COMPILED_MEMBER} does not match its checksum (the file is "
            "corrupt or was edited)"
        )
    return data
