"""What a program means is in its fields (format 2), never in ``meta``.

Mode binding, the source language and the backend partition are documented fields of the
program (shared_ir/SPEC.md section 2); ``meta`` is display-only. Format 1 files, which kept
the first and last in ``meta``, keep loading with the same behaviour.
"""

from __future__ import annotations

import json
import zipfile

import pytest
import torch
import torch.nn as nn

import tracebridge
from tracebridge import artifact
from tracebridge.ir import FORMAT_VERSION


class DropoutNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.fc(x))


def _doc(path) -> dict:
    with zipfile.ZipFile(path) as archive:
        return json.loads(archive.read("program.json"))


def _with_program(path, target, doc: dict) -> None:
    """Copy the artifact at ``path`` to ``target`` with another program.json."""
    with zipfile.ZipFile(path) as archive:
        members = {n: archive.read(n) for n in archive.namelist()}
    members["program.json"] = json.dumps(doc).encode()
    with zipfile.ZipFile(target, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)


@pytest.fixture
def mode_bound_file(tmp_path):
    traced = tracebridge.trace(DropoutNet().eval(), torch.rand(2, 3))
    path = tmp_path / "bound.tb"
    traced.save(path)
    return path


def test_mode_binding_is_a_field_not_meta(mode_bound_file):
    doc = _doc(mode_bound_file)
    assert doc["format_version"] == FORMAT_VERSION == 2
    assert doc["mode_bound"]["forward"]["training"] is False
    assert "mode_bound" not in doc.get("meta", {})


def test_loaded_mode_binding_still_refuses_the_other_mode(mode_bound_file):
    loaded = tracebridge.load(mode_bound_file)
    loaded(torch.rand(4, 3))
    loaded.train()
    with pytest.raises(tracebridge.GuardError, match="dropout|mode|train"):
        loaded(torch.rand(4, 3))


def test_format_1_file_with_meta_mode_binding_loads_the_same(mode_bound_file, tmp_path):
    doc = _doc(mode_bound_file)
    doc["format_version"] = 1
    doc["meta"] = {"mode_bound": doc.pop("mode_bound"), "note": "display"}
    old = tmp_path / "v1.tb"
    _with_program(mode_bound_file, old, doc)
    program = artifact.read(old)
    assert program.mode_bound["forward"]["training"] is False
    assert program.meta == {"note": "display"}  # the meaning moved out of meta
    loaded = tracebridge.load(old)
    loaded.train()
    with pytest.raises(tracebridge.GuardError):
        loaded(torch.rand(4, 3))


def test_load_then_save_keeps_meta_display_only(mode_bound_file, tmp_path):
    loaded = tracebridge.load(mode_bound_file)
    again = tmp_path / "again.tb"
    loaded.save(again)
    doc = _doc(again)
    assert "producer" not in doc["meta"] and "format_version" not in doc["meta"]
    assert doc["mode_bound"] == _doc(mode_bound_file)["mode_bound"]


def test_source_language_is_a_field_that_save_keeps(tmp_path):
    traced = tracebridge.trace(lambda x: x + 1, torch.rand(2))
    assert traced.program.language == "python"
    traced.program.language = "r"  # what R's jit_trace sets
    path = tmp_path / "r.tb"
    traced.save(path)
    assert _doc(path)["producer"]["language"] == "r"
    loaded = tracebridge.load(path)
    assert loaded.program.language == "r"
    loaded.save(tmp_path / "again.tb")
    assert _doc(tmp_path / "again.tb")["producer"]["language"] == "r"
    traced.save(tmp_path / "py.tb", language="python")  # an explicit language wins
    assert _doc(tmp_path / "py.tb")["producer"]["language"] == "python"
