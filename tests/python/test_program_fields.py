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


def test_size_specialisations_are_a_field_not_meta(tmp_path):
    def f(x):
        return x * 2 if x.shape[0] > 1 else x + 1  # batch 1 takes the other branch

    traced = tracebridge.trace(f, torch.rand(2, 3))
    path = tmp_path / "spec.tb"
    traced.save(path)
    doc = _doc(path)
    assert doc["specialised"] == {"forward": ["forward__size1_0"]}
    assert "specialised" not in doc.get("meta", {})
    loaded = tracebridge.load(path)
    assert torch.equal(loaded(torch.ones(1, 3)), torch.full((1, 3), 2.0))
    assert torch.equal(loaded(torch.ones(3, 3)), torch.full((3, 3), 2.0))
    doc["meta"] = {"specialised": doc.pop("specialised")}  # meta gives no meaning
    moved = tmp_path / "moved.tb"
    _with_program(path, moved, doc)
    with pytest.raises(tracebridge.GuardError):
        tracebridge.load(moved)(torch.ones(1, 3))


def test_module_names_with_dashes_save_and_load(tmp_path):
    """torchvision names blocks ``block1-0`` (RegNet): such state names are valid."""
    net = nn.Sequential()
    net.add_module("block1-0", nn.Linear(3, 2))
    path = tmp_path / "dash.tb"
    tracebridge.trace(net, torch.rand(2, 3)).save(path)
    x = torch.rand(4, 3)
    torch.testing.assert_close(tracebridge.load(path)(x), net(x))


def test_save_refuses_a_program_no_reader_would_load(tmp_path, unchecked_programs):
    net = nn.Sequential()
    net.add_module("bad name", nn.Linear(3, 2))  # a space: outside the name grammar
    traced = tracebridge.trace(net, torch.rand(2, 3))
    with pytest.raises(tracebridge.ArtifactError, match=r"bad name.*\[rule: names\]; not saved"):
        traced.save(tmp_path / "bad.tb")
    assert not (tmp_path / "bad.tb").exists()


@pytest.mark.parametrize(
    "fn, inputs",
    [
        (lambda v, g: torch._weight_norm(v, g, 0), (torch.rand(4, 3), torch.rand(4, 1))),
        (lambda x: torch._shape_as_tensor(x) * 2, (torch.rand(4, 3),)),
    ],
)
def test_reviewed_private_ops_of_published_models_record_and_reload(fn, inputs, tmp_path):
    traced = tracebridge.trace(fn, inputs)
    traced.save(tmp_path / "p.tb")
    torch.testing.assert_close(tracebridge.load(tmp_path / "p.tb")(*inputs), fn(*inputs))


def test_refs_in_agrees_with_the_leaves_of_fold_literal():
    """refs_in walks arguments itself (a hot path of the tracer): the Refs it finds, in
    order, are exactly those among fold_literal's leaves, for every container kind."""
    from tracebridge.ir.program import Ref, leaves_of, refs_in

    a, b, c, d, e = (Ref(i) for i in range(5))
    nested = [a, (1, [b, "x"], {c: 2, "k": (d, None)}), slice(e, 3, a), {"empty": []}, 4.5]
    assert refs_in(nested) == [x for x in leaves_of(nested) if isinstance(x, Ref)]
    assert [r.id for r in refs_in(nested)] == [0, 1, 2, 3, 4, 0]
    assert refs_in(7) == [] and refs_in(b) == [b]
