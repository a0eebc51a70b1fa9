"""The strict container: aligned, memory-mapped, bit-for-bit tensors; ZIP64; and every
departure from the container rules refused with an ArtifactError (SPEC section 1)."""

from __future__ import annotations

import json
import struct
import zipfile

import pytest
import torch
import torch.nn as nn

import tracebridge
from tracebridge import artifact
from tracebridge.artifact import archive as archive_mod

from . import artifact_cases as cases


def _conv_bn():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 7, 3, padding=1),
        nn.BatchNorm2d(7),
        nn.ReLU(),
        nn.Conv2d(7, 5, 3, stride=2),
        nn.BatchNorm2d(5),
        nn.Flatten(),
        nn.Linear(5 * 4 * 4, 3),
    ).eval()


def test_loaded_artifact_computes_bit_for_bit_what_the_trace_computes(tmp_path):
    model = _conv_bn()
    x = torch.randn(4, 3, 10, 10)
    traced = tracebridge.trace(model, x)
    traced.save(tmp_path / "m.tb")
    loaded = tracebridge.load(tmp_path / "m.tb")
    for shape in ((4, 3, 10, 10), (1, 3, 10, 10), (9, 3, 10, 10)):
        y = torch.randn(shape)
        assert torch.equal(loaded(y), traced(y))
        assert torch.equal(loaded(y), model(y))


def test_every_tensor_is_64_byte_aligned_in_the_file_and_in_memory(tmp_path):
    tracebridge.trace(_conv_bn(), torch.randn(2, 3, 10, 10)).save(tmp_path / "m.tb")
    opened = artifact.open_artifact(tmp_path / "m.tb")
    opened.handle.close()
    assert opened.entries, "no tensors"
    for name, entry in opened.entries.items():
        assert (opened.data_base + entry.begin) % 64 == 0, name
    loaded = tracebridge.load(tmp_path / "m.tb")
    for name, tensor in loaded.state_dict().items():
        assert tensor.data_ptr() % 64 == 0, name


def test_state_tensors_are_views_of_the_mapped_file(tmp_path):
    model = nn.Linear(256, 256)
    tracebridge.trace(model, torch.randn(2, 256)).save(tmp_path / "m.tb")
    opened = artifact.open_artifact(tmp_path / "m.tb")
    opened.handle.close()
    program = artifact.read(tmp_path / "m.tb")
    weight, bias = program.state["weight"].tensor, program.state["bias"].tensor
    # Views of one mapping: the tensors lie as far apart in memory as in the file.
    apart = opened.entries["bias"].begin - opened.entries["weight"].begin
    assert bias.data_ptr() - weight.data_ptr() == apart
    weight.add_(1)  # copy-on-write: the process sees the write, the file does not change
    assert torch.equal(
        artifact.read(tmp_path / "m.tb").state["weight"].tensor, model.weight.detach()
    )


def test_member_is_standard_safetensors_for_the_safetensors_library(tmp_path):
    from safetensors.torch import load

    model = _conv_bn()
    tracebridge.trace(model, torch.randn(2, 3, 10, 10)).save(tmp_path / "m.tb")
    with zipfile.ZipFile(tmp_path / "m.tb") as archive:
        assert archive.testzip() is None  # CRCs right for any ZIP reader
        tensors = load(archive.read("tensors.safetensors"))
    state = {k: v for k, v in tensors.items() if not k.startswith("#pad")}
    assert set(state) == set(model.state_dict())
    for name, value in model.state_dict().items():
        assert torch.equal(state[name], value)
    assert all(
        t.dtype == torch.uint8 and t.count_nonzero() == 0
        for k, t in tensors.items()
        if k.startswith("#pad")
    )


def test_reads_files_written_by_the_safetensors_library():
    from safetensors.torch import save

    tensors = {"a": torch.randn(3, 5), "b": torch.arange(7, dtype=torch.int64)}
    back = artifact.parse_safetensors(save(tensors), "t.safetensors")
    assert all(torch.equal(back[k], v) for k, v in tensors.items())


def test_zip64_written_and_read(tmp_path):
    model = _conv_bn()
    x = torch.randn(2, 3, 10, 10)
    traced = tracebridge.trace(model, x)
    path = tmp_path / "z64.tb"
    artifact.write(traced._program_for_saving(), path, zip64=True)
    data = path.read_bytes()
    assert struct.pack("<I", 0x06064B50) in data[-120:]  # the ZIP64 end record
    with zipfile.ZipFile(path) as archive:  # another reader agrees
        assert archive.testzip() is None
        assert all(i.extra.startswith(b"\x01\x00") for i in archive.infolist())
    assert torch.equal(tracebridge.load(path)(x), traced(x))


def test_saving_twice_gives_the_same_bytes(tmp_path):
    traced = tracebridge.trace(_conv_bn(), torch.randn(2, 3, 10, 10))
    traced.save(tmp_path / "a.tb")
    traced.save(tmp_path / "b.tb")
    assert (tmp_path / "a.tb").read_bytes() == (tmp_path / "b.tb").read_bytes()


@pytest.mark.parametrize("case", sorted(cases.HOSTILE))
def test_strict_container_refuses(tmp_path, case):
    path = tmp_path / f"{case}.tb"
    message = cases.HOSTILE[case](path)
    with pytest.raises(tracebridge.ArtifactError, match=message) as info:
        tracebridge.load(path)
    assert str(path) in str(info.value)
    with pytest.raises(tracebridge.ArtifactError, match=message):
        artifact.verify(path)


def test_parser_differential_both_refuse(tmp_path):
    # The file: a duplicated member or key made R show relu and Python run neg.
    for case in ("duplicate_member", "duplicate_json_key"):
        path = tmp_path / f"{case}.tb"
        cases.HOSTILE[case](path)
        with pytest.raises(tracebridge.ArtifactError, match="twice"):
            tracebridge.load(path)


def test_bzip2_bomb_refused_before_decompressing(tmp_path, monkeypatch):
    import bz2

    path = tmp_path / "bomb.tb"
    cases.HOSTILE["bzip2_member"](path)
    called = []
    monkeypatch.setattr(bz2, "decompress", lambda *a, **k: called.append(1))
    monkeypatch.setattr(bz2, "BZ2Decompressor", lambda *a, **k: called.append(1))
    with pytest.raises(tracebridge.ArtifactError, match="nothing was decompressed"):
        tracebridge.load(path)
    assert not called


def test_program_json_size_limit_checked_before_parsing(tmp_path, monkeypatch):
    traced = tracebridge.trace(torch.relu, torch.randn(3))
    traced.save(tmp_path / "m.tb")
    from tracebridge.check import program as checker

    monkeypatch.setitem(checker.LIMITS, "program_bytes", 100)
    parsed = []
    monkeypatch.setattr(archive_mod, "loads_strict", lambda *a: parsed.append(1))
    with pytest.raises(tracebridge.ArtifactError, match="more than the limit of 100"):
        tracebridge.load(tmp_path / "m.tb")
    assert not parsed


def test_checksum_runs_below_the_threshold_and_on_request(tmp_path, monkeypatch):
    model = nn.Linear(64, 64)
    tracebridge.trace(model, torch.randn(2, 64)).save(tmp_path / "m.tb")
    cases.flip_weight_byte(tmp_path / "m.tb")
    with pytest.raises(tracebridge.ArtifactError, match="CRC-32|sha256"):
        tracebridge.load(tmp_path / "m.tb")  # small: checked by default
    monkeypatch.setattr(archive_mod, "VERIFY_BELOW", 0)
    tracebridge.load(tmp_path / "m.tb")  # large: header checks only, weights not read
    with pytest.raises(tracebridge.ArtifactError, match="CRC-32|sha256"):
        tracebridge.load(tmp_path / "m.tb", verify=True)
    with pytest.raises(tracebridge.ArtifactError, match="CRC-32|sha256"):
        artifact.verify(tmp_path / "m.tb")


def test_v1_golden_vectors_still_load():
    from pathlib import Path

    folder = Path(__file__).resolve().parents[2] / "shared_ir" / "vectors"
    files = sorted(folder.glob("*.tb"))
    assert files
    for path in files:
        doc = artifact.verify(path)
        assert doc["format_version"] == 1
        tracebridge.load(path)


def test_program_json_is_plain_json(tmp_path):
    tracebridge.trace(_conv_bn(), torch.randn(2, 3, 10, 10)).save(tmp_path / "m.tb")
    with zipfile.ZipFile(tmp_path / "m.tb") as archive:
        doc = json.loads(archive.read("program.json"))
    assert doc["tensors"]["count"] == len(doc["state"])
    assert "external" not in doc["tensors"]


def test_random_byte_damage_is_an_artifact_error_or_a_good_load(tmp_path):
    import random

    model = nn.Linear(5, 3)
    x = torch.randn(2, 5)
    tracebridge.trace(model, x).save(tmp_path / "m.tb")
    good = (tmp_path / "m.tb").read_bytes()
    rng = random.Random(1)
    outcomes = {"refused": 0, "loaded": 0}
    for _ in range(300):
        data = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        if rng.random() < 0.2:
            data = data[: rng.randrange(len(data))]
        path = tmp_path / "bad.tb"
        path.write_bytes(bytes(data))
        try:
            loaded = tracebridge.load(path, verify=True)
        except tracebridge.ArtifactError:
            outcomes["refused"] += 1
            continue
        outcomes["loaded"] += 1  # damage in bytes that carry no meaning (padding, dates)
        assert torch.equal(loaded(x), model(x))
    assert outcomes["refused"] > 250
