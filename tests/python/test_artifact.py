"""Saving and loading: round trips, fresh processes, and every way a file can be bad."""

from __future__ import annotations

import json
import zipfile

import pytest
import torch
import torch.nn as nn

import tracebridge
from tracebridge import artifact
from tracebridge.ir import FORMAT_VERSION

from .conftest import run_fresh_python


def _traced_module():
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2)).eval()
    return model, tracebridge.trace(model, torch.rand(3, 4))


def test_roundtrip_in_process_both_runtimes(tmp_path):
    model, traced = _traced_module()
    path = tmp_path / "model.anything"
    tracebridge.save(traced, path)
    x = torch.rand(7, 4)
    for runtime in ("codegen", "interpreter"):
        loaded = tracebridge.load(path, runtime=runtime)
        torch.testing.assert_close(loaded(x), model(x), rtol=0, atol=0)
    assert list(loaded.state_dict()) == list(model.state_dict())


def test_loaded_in_fresh_process(tmp_path):
    model, traced = _traced_module()
    traced.save(tmp_path / "m.tb")
    x = torch.rand(5, 4)
    torch.save({"x": x, "y": model(x).detach()}, tmp_path / "io.pt")
    result = run_fresh_python(f"""
        import sys, torch, tracebridge
        assert "test_artifact" not in sys.modules
        io = torch.load({str(tmp_path / "io.pt")!r})
        m = tracebridge.load({str(tmp_path / "m.tb")!r})
        torch.testing.assert_close(m(io["x"]), io["y"])
        print("OK", type(m).__name__)
    """)
    assert result.returncode == 0, result.stderr
    assert "OK TracedModule" in result.stdout


def test_archive_is_readable_without_torch(tmp_path):
    _, traced = _traced_module()
    traced.save(tmp_path / "m.tb")
    with zipfile.ZipFile(tmp_path / "m.tb") as archive:
        assert sorted(archive.namelist()) == ["program.json", "tensors.safetensors"]
        assert all(i.compress_type == zipfile.ZIP_STORED for i in archive.infolist())
        doc = json.loads(archive.read("program.json"))
    assert doc["format"] == "tracebridge" and doc["format_version"] == FORMAT_VERSION
    assert doc["state"]["0.weight"] == {
        "kind": "parameter",
        "dtype": "float32",
        "shape": [8, 4],
        "requires_grad": True,
    }


def _rewrite(path, program_text=None, tensors=None):
    with zipfile.ZipFile(path) as archive:
        members = {n: archive.read(n) for n in archive.namelist()}
    if program_text is not None:
        members["program.json"] = program_text
    if tensors is not None:
        members["tensors.safetensors"] = tensors
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)


@pytest.fixture
def saved(tmp_path):
    _, traced = _traced_module()
    path = tmp_path / "m.tb"
    traced.save(path)
    return path


def _doc(path):
    with zipfile.ZipFile(path) as archive:
        return json.loads(archive.read("program.json"))


def test_not_a_zip(tmp_path):
    path = tmp_path / "x.tb"
    path.write_text("hello")
    with pytest.raises(tracebridge.ArtifactError, match=r"x\.tb: not a tracebridge artifact"):
        tracebridge.load(path)


def test_missing_file(tmp_path):
    with pytest.raises(tracebridge.ArtifactError, match="no such file"):
        tracebridge.load(tmp_path / "nope.tb")


def test_truncated(saved):
    data = saved.read_bytes()
    saved.write_bytes(data[: len(data) // 2])
    with pytest.raises(tracebridge.ArtifactError, match="m.tb"):
        tracebridge.load(saved)


def test_flipped_weight_byte_fails_checksum(saved):
    with zipfile.ZipFile(saved) as archive:
        blob = bytearray(archive.read("tensors.safetensors"))
    blob[-3] ^= 0xFF
    _rewrite(saved, tensors=bytes(blob))
    with pytest.raises(tracebridge.ArtifactError, match="checksum"):
        tracebridge.load(saved)


def test_newer_format_refused(saved):
    doc = _doc(saved)
    doc["format_version"] = FORMAT_VERSION + 1
    _rewrite(saved, json.dumps(doc))
    with pytest.raises(tracebridge.ArtifactError, match="newer than this tracebridge reads"):
        tracebridge.load(saved)


def test_unknown_op_refused(saved):
    doc = _doc(saved)
    doc["methods"]["forward"]["nodes"][-1]["op"] = "os.system"
    _rewrite(saved, json.dumps(doc))
    with pytest.raises(tracebridge.ArtifactError, match="'os.system', which is not in the op"):
        tracebridge.load(saved)


def test_schema_violation_names_the_place(saved):
    doc = _doc(saved)
    del doc["methods"]["forward"]["nodes"][0]["outputs"]
    _rewrite(saved, json.dumps(doc))
    with pytest.raises(tracebridge.ArtifactError, match="methods/forward/nodes/0"):
        tracebridge.load(saved)


def test_bad_json(saved):
    _rewrite(saved, b"{not json")
    with pytest.raises(tracebridge.ArtifactError, match="not valid JSON"):
        tracebridge.load(saved)


def test_shape_mismatch_in_tensors(saved):
    doc = _doc(saved)
    doc["state"]["0.weight"]["shape"] = [4, 8, 1]
    _rewrite(saved, json.dumps(doc))
    with pytest.raises(tracebridge.ArtifactError, match="0.weight"):
        tracebridge.load(saved)


def test_safetensors_layout_is_standard(saved):
    # The header is standard safetensors: any reader can parse it.
    with zipfile.ZipFile(saved) as archive:
        blob = archive.read("tensors.safetensors")
    tensors = artifact.parse_safetensors(blob, "m")
    assert tensors["0.weight"].shape == (8, 4)
    header_len = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8 : 8 + header_len])
    assert header["0.weight"]["dtype"] == "F32"


def test_package_schema_matches_shared_ir():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    package = root / "python/tracebridge/schema/program.schema.json"
    assert package.read_text() == (root / "shared_ir/program.schema.json").read_text()
