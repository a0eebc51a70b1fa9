"""Hostile and broken artifacts, made from a valid one, for the container tests of both
languages. Each maker writes a file and returns a pattern that the refusal must match in
Python and in R (the two readers word their messages alike).

    python tests/python/artifact_cases.py FOLDER   # write every case + cases.json (for R)
"""

from __future__ import annotations

import json
import struct
import sys
import warnings
import zipfile
from pathlib import Path

import torch

import tracebridge


def _valid(path: Path, fn=torch.relu) -> dict[str, bytes]:
    tracebridge.trace(fn, torch.randn(3)).save(path)
    with zipfile.ZipFile(path) as archive:
        return {n: archive.read(n) for n in archive.namelist()}


def _zip(path: Path, members: list[tuple[zipfile.ZipInfo | str, bytes]], method=None) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate name
        with zipfile.ZipFile(path, "w") as archive:
            for info, data in members:
                if method is not None:
                    archive.writestr(info, data, compress_type=method)
                else:
                    archive.writestr(info, data)


def duplicate_member(path: Path) -> str:
    relu = _valid(path, torch.relu)
    neg = _valid(path, torch.neg)
    _zip(
        path,
        [
            ("tensors.safetensors", relu["tensors.safetensors"]),
            ("program.json", relu["program.json"]),
            ("program.json", neg["program.json"]),
        ],
    )
    return "twice"


def duplicate_json_key(path: Path) -> str:
    relu = _valid(path, torch.relu)
    neg = json.loads(_valid(path, torch.neg)["program.json"])
    text = relu["program.json"].decode().rstrip().rstrip("}")
    text += ', "methods": ' + json.dumps(neg["methods"]) + "}"
    _zip(path, [("tensors.safetensors", relu["tensors.safetensors"]), ("program.json", text)])
    return "twice"


def deflate_member(path: Path) -> str:
    members = _valid(path)
    _zip(path, list(members.items()), method=zipfile.ZIP_DEFLATED)
    return r"compressed \(deflate\)"


def bzip2_member(path: Path) -> str:
    members = _valid(path)
    # A small bomb: a megabyte of spaces inside the JSON compresses to a few dozen bytes.
    members["program.json"] = members["program.json"] + b" " * (1 << 20)
    _zip(path, list(members.items()), method=zipfile.ZIP_BZIP2)
    assert path.stat().st_size < 10_000
    return r"compressed \(bzip2\)"


def _patch_flags(path: Path, flag: int) -> None:
    data = bytearray(path.read_bytes())
    for sig, at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        pos = data.find(sig)
        while pos >= 0:
            old = struct.unpack_from("<H", data, pos + at)[0]
            struct.pack_into("<H", data, pos + at, old | flag)
            pos = data.find(sig, pos + 4)
    path.write_bytes(bytes(data))


def encrypted_flag(path: Path) -> str:
    _valid(path)
    _patch_flags(path, 0x0001)
    return "encrypted"


def data_descriptor_flag(path: Path) -> str:
    _valid(path)
    _patch_flags(path, 0x0008)
    return "data descriptor"


def directory_entry(path: Path) -> str:
    members = _valid(path)
    _zip(path, [("weights/", b""), *members.items()])
    return "directory"


def extra_member(path: Path) -> str:
    members = _valid(path)
    _zip(path, [*members.items(), ("notes.txt", b"hello")])
    return "not part of the format"


def symlink_member(path: Path) -> str:
    members = _valid(path)
    link = zipfile.ZipInfo("tensors.safetensors")
    link.create_system = 3
    link.external_attr = 0o120777 << 16
    _zip(path, [(link, b"/etc/passwd"), ("program.json", members["program.json"])])
    return "link"


def trailing_data(path: Path) -> str:
    _valid(path)
    path.write_bytes(path.read_bytes() + b"trailing junk")
    return "end record"


def leading_data(path: Path) -> str:
    _valid(path)
    path.write_bytes(b"#!/bin/sh\n" + path.read_bytes())
    return "not a ZIP archive|local header|starts at byte"


def nan_constant(path: Path) -> str:
    members = _valid(path)
    doc = json.loads(members["program.json"])
    doc["meta"] = {"x": float("nan")}
    members["program.json"] = json.dumps(doc).encode()
    _zip(path, list(members.items()))
    return "not valid JSON"


def byte_order_mark(path: Path) -> str:
    members = _valid(path)
    members["program.json"] = b"\xef\xbb\xbf" + members["program.json"]
    _zip(path, list(members.items()))
    return "byte-order mark"


def _tensors_with_header(header: dict, data: bytes) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def _with_state(path: Path, tensors: bytes) -> None:
    model = torch.nn.Linear(2, 1)
    tracebridge.trace(model, torch.randn(1, 2)).save(path)
    with zipfile.ZipFile(path) as archive:
        program = archive.read("program.json")
    _zip(path, [("tensors.safetensors", tensors), ("program.json", program)])


def duplicate_tensor_key(path: Path) -> str:
    one = {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}
    body = json.dumps(
        {"bias": one, "weight": {"dtype": "F32", "shape": [1, 2], "data_offsets": [4, 12]}}
    )
    body = body[:-1] + ', "bias": ' + json.dumps(one) + "}"
    _with_state(path, struct.pack("<Q", len(body)) + body.encode() + bytes(12))
    return "twice"


def tensor_hole(path: Path) -> str:
    header = {
        "bias": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
        "weight": {"dtype": "F32", "shape": [1, 2], "data_offsets": [8, 16]},
    }
    _with_state(path, _tensors_with_header(header, bytes(16)))
    return "contiguous"


def tensor_past_end(path: Path) -> str:
    header = {
        "bias": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
        "weight": {"dtype": "F32", "shape": [1, 2], "data_offsets": [4, 12]},
    }
    _with_state(path, _tensors_with_header(header, bytes(8)))
    return "cover|past the end"


HOSTILE = {
    f.__name__: f
    for f in (
        duplicate_member,
        duplicate_json_key,
        deflate_member,
        bzip2_member,
        encrypted_flag,
        data_descriptor_flag,
        directory_entry,
        extra_member,
        symlink_member,
        trailing_data,
        leading_data,
        nan_constant,
        byte_order_mark,
        duplicate_tensor_key,
        tensor_hole,
        tensor_past_end,
    )
}


def flip_weight_byte(path: Path) -> None:
    """Flip one byte of the last tensor's data in place (headers and CRCs left as they
    were), as a disk error would."""
    from tracebridge import artifact

    opened = artifact.open_artifact(path)
    opened.handle.close()
    data = bytearray(path.read_bytes())
    end = opened.member.data_offset + opened.member.size
    data[end - 2] ^= 0xFF
    path.write_bytes(bytes(data))


def sparse_big(path: Path, rows: int = 2, cols: int = 671_088_640) -> torch.Tensor:
    """An artifact over 4 GiB (ZIP64, a float32 buffer of ``rows x cols``, 5 GiB by
    default) written as a sparse file: the data is a hole that reads as zeros, so it takes
    no disk space and no time. The CRC and checksum are not those of the data (computing
    them would read 5 GiB): it loads with verification off, as large files do by default.
    Returns an input for its ``forward`` (``x + w[:, :3].sum()``), whose result is ``x``."""
    import zlib

    from tracebridge.artifact import archive, container
    from tracebridge.artifact import tensors as st

    class Big(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("w", torch.empty(rows, cols, device="meta"))

        def forward(self, x):
            return x + self.w[:, :3].sum()

    x = torch.randn(4)
    program = tracebridge.trace(Big(), x.to("meta"), check_trace=False)._program_for_saving()
    doc = archive.program_to_json(program)
    layout = st.plan({"w": program.state["w"].tensor})
    doc["tensors"] = {"sha256": "0" * 64, "count": 1}
    text = json.dumps(doc).encode()
    with open(path, "wb") as handle:
        writer = container.Writer(handle)
        writer.begin(container.TENSORS_MEMBER, layout.size, align=st.ALIGN)
        writer.write(layout.head)
        writer.skip(layout.size - len(layout.head))
        writer.end(0)
        writer.begin(container.PROGRAM_MEMBER, len(text))
        writer.write(text)
        writer.end(zlib.crc32(text))
        writer.close()
    return x


def meta_with_weights(folder: str) -> dict:
    """A program traced on the meta device, its weights in a safetensors file, an input
    and the eager output, for the R tests of jit_load(path, weights =)."""
    from safetensors.torch import save_file

    out = Path(folder)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2))
    save_file(model.state_dict(), out / "weights.safetensors")
    save_file({"0.weight": model.state_dict()["0.weight"]}, out / "partial.safetensors")
    with torch.device("meta"):
        meta = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2))
    traced = tracebridge.trace(meta, torch.empty(3, 6, device="meta"), check_trace=False)
    traced.save(out / "program.tb")
    x = torch.arange(18, dtype=torch.float32).reshape(3, 6) / 10
    return {
        "program": str(out / "program.tb"),
        "weights": str(out / "weights.safetensors"),
        "partial": str(out / "partial.safetensors"),
        "x": x.tolist(),
        "y": model(x).detach().tolist(),
    }


def main(folder: str) -> None:
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    manifest = {name: make(out / f"{name}.tb") for name, make in HOSTILE.items()}
    (out / "cases.json").write_text(json.dumps(manifest, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
