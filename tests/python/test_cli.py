"""The ``tracebridge`` command line: inspect, validate, graph, run.

Most tests call ``cli.main([...])`` in-process; one runs the installed console script.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import torch
from torch import nn

import tracebridge
from tracebridge import artifact
from tracebridge.frontends import cli
from tracebridge.ir import FORMAT_VERSION, OPSET_VERSION
from tracebridge.ir.printer import graph_text

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.bn = nn.BatchNorm1d(3)

    def forward(self, x):
        return torch.relu(self.bn(self.fc(x)))[:, 1:]


def looped(x):
    total = x * 0
    for i in range(x.shape[0]):  # unrolled: a loop guard on x.shape[0]
        total = total + x[i]
    return total, x.sum().item()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    torch.manual_seed(0)
    net = Net()
    module = tracebridge.trace(net, torch.randn(5, 4), respect_mode=True)
    module.save(root / "net.tb")
    with pytest.warns(tracebridge.TracerWarning):
        function = tracebridge.trace(looped, torch.randn(3))
    function.save(root / "looped.tb")
    return {
        "root": root,
        "net": str(root / "net.tb"),
        "looped": str(root / "looped.tb"),
        "module": net,
    }


def run_cli(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def rewrite(
    src: str, dst, edit_doc=None, edit_blob=None, compress=zipfile.ZIP_STORED, fix_checksum=True
) -> str:
    """Copy an artifact with its program.json and/or tensor bytes changed."""
    with zipfile.ZipFile(src) as archive:
        doc = json.loads(archive.read("program.json"))
        blob = archive.read("tensors.safetensors")
    if edit_blob is not None:
        blob = edit_blob(blob)
    if edit_doc is not None:
        edit_doc(doc)
    if fix_checksum and edit_blob is None:
        doc["tensors"]["sha256"] = hashlib.sha256(blob).hexdigest()
    with zipfile.ZipFile(dst, "w", compression=compress) as archive:
        archive.writestr("program.json", json.dumps(doc))
        archive.writestr("tensors.safetensors", blob)
    return str(dst)


def write_safetensors(path, tensors: dict) -> str:
    with open(path, "wb") as handle:
        handle.write(artifact.safetensors_bytes(tensors)[0])
    return str(path)


# --- inspect -----------------------------------------------------------------------------------


def test_inspect_shows_versions_state_guards_counts_and_graphs(files, capsys):
    code, out, err = run_cli(capsys, "inspect", files["net"])
    assert (code, err) == (0, "")
    assert f"tracebridge format {FORMAT_VERSION}, op set {OPSET_VERSION}" in out
    assert f"tracebridge {tracebridge.__version__} (python, torch" in out
    assert "module (Net), saved in training mode" in out
    assert "methods:    trainforward, evalforward" in out
    assert "forward -> trainforward (train) / evalforward (eval)" in out
    assert "parameter  fc.weight               f32[3, 4]" in out
    assert "buffer     bn.num_batches_tracked  i64[]" in out
    assert "state: 7 tensors, 116 bytes" in out  # 12+3+3+3+3+3 floats + one int64
    # BatchNorm in training mode refuses a batch of one: a branch guard in trainforward only.
    assert "method trainforward: 15 nodes, 1 guard\n" in out
    assert "method evalforward: 10 nodes, 0 guards\n" in out
    assert "(branch guard, at" in out
    assert "    prim.state   7\n" in out
    program = artifact.read(files["net"])
    cli.label_sizes(artifact.read_json(files["net"])[0], program.methods)  # as inspect shows
    for name, graph in program.methods.items():
        assert graph_text(graph, name) in out
    assert "%0: f32[s0, 3] = linear(" in out  # intermediate sizes in the input symbols


def test_inspect_json_summary(files, capsys):
    code, out, _ = run_cli(capsys, "inspect", "--json", files["looped"])
    assert code == 0
    data = json.loads(out)
    assert data["kind"] == "function" and data["methods"] == ["forward"]
    assert (data["format_version"], data["opset_version"]) == (FORMAT_VERSION, OPSET_VERSION)
    graph = data["graphs"]["forward"]
    assert graph["inputs"] == [{"name": "x", "type": "f32[s0]"}]
    assert [(g["what"], g["expect"], g["kind"]) for g in graph["guards"]] == [
        ("x.shape[0]", 3, "loop")
    ]
    assert graph["op_counts"]["getitem"] == 3 and graph["op_counts"]["add"] == 3
    assert graph["nodes"] == sum(graph["op_counts"].values())


def test_no_model_code_runs_for_inspect_validate_graph(files, capsys, monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("model code must not run")

    monkeypatch.setattr(tracebridge.api, "load", forbidden)
    monkeypatch.setattr(tracebridge.runtime.method.Method, "__call__", forbidden)
    monkeypatch.setattr(tracebridge.runtime.codegen, "generate", forbidden)
    monkeypatch.setattr(tracebridge.runtime.method, "Interpreter", forbidden)
    for argv in (
        ["inspect", files["net"]],
        ["validate", files["net"]],
        ["graph", files["net"]],
        ["inspect", files["looped"]],
    ):
        code, _, err = run_cli(capsys, *argv)
        assert (code, err) == (0, ""), argv


# --- validate ----------------------------------------------------------------------------------


def test_validate_accepts_good_files(files, capsys):
    code, out, err = run_cli(capsys, "validate", files["net"])
    assert (code, err) == (0, "")
    assert out == (
        f"{files['net']}: valid tracebridge artifact "
        f"(format {FORMAT_VERSION}, op set {OPSET_VERSION}; "
        "2 methods, 25 nodes, 1 guard, 7 tensors; checksum ok)\n"
    )
    assert run_cli(capsys, "validate", files["looped"])[0] == 0


def _set_node_op(doc, op):
    doc["methods"]["evalforward"]["nodes"][-1]["op"] = op


def _undefined_ref(doc):
    doc["methods"]["evalforward"]["nodes"][-1]["args"][0] = {"ref": 999}


def _dangling_dispatch(doc):
    doc["dispatch"]["forward"]["eval"] = "nothere"


def _missing_state(doc):
    doc["methods"]["evalforward"]["nodes"][0]["args"] = ["nothere"]


def _count_mismatch(doc):
    doc["tensors"]["count"] = 3


def _state_shape(doc):
    doc["state"]["fc.weight"]["shape"] = [4, 3]


def _outputs(doc):
    doc["methods"]["evalforward"]["outputs"] = []


BAD_DOCS = [
    (lambda d: d.update(format_version=99), "format version 99 is newer"),
    (
        lambda d: d.update(opset_version=OPSET_VERSION + 1),
        f"op-set version {OPSET_VERSION + 1} is newer",
    ),
    (lambda d: d.update(kind="banana"), "does not follow the schema at kind"),
    (lambda d: d.pop("methods"), "does not follow the schema"),
    (lambda d: _set_node_op(d, "os.system"), "'os.system', which is not in the op set"),
    (_undefined_ref, "uses %999 before it is defined"),
    (_dangling_dispatch, "names method 'nothere'"),
    (_missing_state, "state 'nothere' does not exist"),
    (_count_mismatch, "tensors.count is 3"),
    (_state_shape, "'fc.weight' does not match its description"),
    (_outputs, "0 outputs but out_spec has 1 leaves"),
]


@pytest.mark.parametrize("edit,message", BAD_DOCS, ids=[m for _, m in BAD_DOCS])
def test_validate_refuses_bad_documents(files, tmp_path, capsys, edit, message):
    path = rewrite(files["net"], tmp_path / "bad.tb", edit_doc=edit)
    code, out, err = run_cli(capsys, "validate", path)
    assert code == 1 and out == ""
    assert message in err
    assert err.startswith("tracebridge validate: error: ") and err.count("\n") == 1


def test_validate_refuses_damaged_archives(files, tmp_path, capsys):
    with open(files["net"], "rb") as handle:
        good = handle.read()
    cases = {}
    cases["missing"] = (str(tmp_path / "nope.tb"), "no such file")
    text = tmp_path / "text.tb"
    text.write_text("hello")
    cases["text"] = (str(text), "not a ZIP archive")
    half = tmp_path / "half.tb"
    half.write_bytes(good[: len(good) // 2])
    cases["truncated"] = (str(half), "not a ZIP archive")
    empty = tmp_path / "empty.tb"
    with zipfile.ZipFile(empty, "w") as archive:
        archive.writestr("other.txt", "x")
    cases["no program"] = (str(empty), "no program.json")
    notjson = tmp_path / "notjson.tb"
    with zipfile.ZipFile(notjson, "w") as archive:
        archive.writestr("program.json", "{not json")
    cases["not json"] = (str(notjson), "program.json is not valid JSON")

    def flip(blob):
        return blob[:-1] + bytes([blob[-1] ^ 0xFF])

    cases["checksum"] = (
        rewrite(files["net"], tmp_path / "flip.tb", edit_blob=flip),
        "does not match its sha256 checksum",
    )

    def cut(blob):
        return blob[:-8]

    def cut_doc(doc):
        with zipfile.ZipFile(files["net"]) as archive:
            raw = archive.read("tensors.safetensors")[:-8]
        doc["tensors"]["sha256"] = hashlib.sha256(raw).hexdigest()

    cases["short tensors"] = (
        rewrite(files["net"], tmp_path / "cut.tb", edit_doc=cut_doc, edit_blob=cut),
        "has a bad dtype or offsets",
    )
    cases["compressed"] = (
        rewrite(files["net"], tmp_path / "zip.tb", compress=zipfile.ZIP_DEFLATED),
        "is compressed",
    )
    for label, (path, message) in cases.items():
        code, out, err = run_cli(capsys, "validate", path)
        assert code == 1, label
        assert message in err, (label, err)
        assert err.count("\n") == 1 and "Traceback" not in err, label


def test_usage_errors_exit_2(files, capsys):
    assert run_cli(capsys, "validate")[0] == 2
    assert run_cli(capsys, "frobnicate", files["net"])[0] == 2
    assert run_cli(capsys)[0] == 2
    code, _, err = run_cli(capsys, "graph", files["net"], "--method", "nope")
    assert code == 2 and "it has: trainforward, evalforward, forward" in err
    assert run_cli(capsys, "graph", files["net"], "--format", "jpeg")[0] == 2
    assert run_cli(capsys, "--help")[0] == 0


# --- graph -------------------------------------------------------------------------------------


def test_graph_dot_has_one_node_per_ir_node_and_follows_the_saved_mode(files, capsys):
    code, out, _ = run_cli(capsys, "graph", files["net"])
    assert code == 0
    assert out.startswith('digraph "trainforward" {')  # saved in training mode
    graph = artifact.read(files["net"]).methods["trainforward"]
    declared = [line for line in out.splitlines() if "[label=" in line and "->" not in line]
    drawn = [n for n in graph.nodes if n.op != "prim.state"]  # state: folded into its op
    assert len(declared) == len(graph.inputs) + len(drawn) + 1  # + the return node
    assert 'n7 [label="guard == False' in out and "shape=octagon" in out
    assert "in0 -> n2" in out  # x feeds linear
    code, out, _ = run_cli(capsys, "graph", files["net"], "--method", "evalforward")
    assert out.startswith('digraph "evalforward" {') and "guard" not in out


def test_graph_writes_file_and_svg(files, tmp_path, capsys):
    dot_path = tmp_path / "g.dot"
    assert run_cli(capsys, "graph", files["looped"], "-o", dot_path)[0] == 0
    assert dot_path.read_text().startswith('digraph "forward" {')
    if shutil.which("dot") is None:
        pytest.skip("Graphviz is not installed")
    svg_path = tmp_path / "g.svg"
    code, _, err = run_cli(capsys, "graph", files["looped"], "--format", "svg", "-o", svg_path)
    assert (code, err) == (0, "")
    svg = svg_path.read_text()
    assert "<svg" in svg and "</svg>" in svg and "prim.size" in svg


def test_graph_svg_without_graphviz_is_a_clear_error(files, capsys, monkeypatch):
    monkeypatch.setattr(cli.shutil, "which", lambda name: None)
    code, out, err = run_cli(capsys, "graph", files["net"], "--format", "svg")
    assert code == 1 and out == ""
    assert "Graphviz 'dot' program is not installed" in err and "--format dot" in err


def test_dot_escapes_quotes():
    assert cli._dot_string('a "b"\\c\nd') == '"a \\"b\\"\\\\c\\nd"'


# --- run ---------------------------------------------------------------------------------------


def test_run_writes_outputs_that_match_eager(files, tmp_path, capsys):
    x = torch.randn(6, 4)
    inputs = write_safetensors(tmp_path / "in.safetensors", {"input0": x})
    out_path = tmp_path / "out.safetensors"
    code, out, err = run_cli(
        capsys, "run", files["net"], "--inputs", inputs, "--mode", "eval", "-o", out_path
    )
    assert (code, err) == (0, "")
    assert out == f"wrote 1 output of evalforward to {out_path}\n"
    got = artifact.parse_safetensors(out_path.read_bytes(), str(out_path))
    net = files["module"]
    net.eval()
    with torch.no_grad():
        expected = net(x)
    torch.testing.assert_close(got["output0"], expected)


def test_run_npz_inputs_prints_a_summary(files, tmp_path, capsys):
    x = np.array([1.0, -2.0, 4.0], dtype=np.float32)
    np.savez(tmp_path / "in.npz", input0=x)
    code, out, err = run_cli(capsys, "run", files["looped"], "--inputs", tmp_path / "in.npz")
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "forward: 2 outputs",
        "  output0 [0]: f32[3] [3, 3, 3]",
        "  output1 [1]: f64[] [3]",
    ]
    npz_out = tmp_path / "out.npz"
    assert (
        run_cli(
            capsys,
            "run",
            files["looped"],
            "--inputs",
            tmp_path / "in.npz",
            "-o",
            npz_out,
            "--runtime",
            "interpreter",
        )[0]
        == 0
    )
    with np.load(npz_out) as data:
        assert data["output0"].tolist() == [3.0, 3.0, 3.0] and float(data["output1"]) == 3.0


def test_run_errors(files, tmp_path, capsys):
    two = write_safetensors(
        tmp_path / "two.safetensors", {"input0": torch.ones(3), "input1": torch.ones(3)}
    )
    code, _, err = run_cli(capsys, "run", files["looped"], "--inputs", two)
    assert code == 2 and "takes 1 input tensors (x: f32[s0])" in err
    misnamed = write_safetensors(tmp_path / "bad.safetensors", {"x": torch.ones(3)})
    code, _, err = run_cli(capsys, "run", files["looped"], "--inputs", misnamed)
    assert code == 2 and "named input0, input1" in err
    four = write_safetensors(tmp_path / "four.safetensors", {"input0": torch.ones(4)})
    code, _, err = run_cli(capsys, "run", files["looped"], "--inputs", four)
    assert code == 1 and "unrolled a Python loop for x.shape[0] == 3, but now it is 4" in err
    code, _, err = run_cli(capsys, "run", files["looped"], "--inputs", four, "-o", "out.txt")
    assert code == 2 and ".safetensors or .npz" in err


# --- the installed command ------------------------------------------------------------------


def test_console_script(files):
    exe = os.path.join(REPO, ".venv", "bin", "tracebridge")
    if not os.path.exists(exe):
        pytest.skip("the tracebridge console script is not installed in .venv")
    done = subprocess.run(
        [exe, "validate", files["net"]], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "valid tracebridge artifact" in done.stdout


def test_python_dash_m(files):
    """``python -m tracebridge`` is the same command (prober17: there was none)."""
    env = {**os.environ, "PYTHONPATH": os.path.join(REPO, "python")}
    done = subprocess.run(
        [sys.executable, "-m", "tracebridge", "validate", files["net"]],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert "valid tracebridge artifact" in done.stdout
