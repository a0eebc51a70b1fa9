"""The zoo harness's own logic (benchmarks/zoo.py), without the zoo's packages: how outputs
are compared, how a cell is judged, and how parts are merged and tabulated."""

from __future__ import annotations

import json
import os
import sys

import pytest
import torch

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")
sys.path.insert(0, os.path.abspath(BENCH))

zoo = pytest.importorskip("zoo")


def test_compare_accepts_rounding_and_names_a_difference():
    a = torch.tensor([1.0, 1000.0])
    assert zoo.compare((a,), (a + 1e-3,), 1e-4) is None  # relative to the output's scale
    assert "max abs error" in zoo.compare((a,), (a + torch.tensor([0.0, 5.0]),), 1e-4)
    assert "shape" in zoo.compare(a, a[:1], 1e-4)
    assert "integers" in zoo.compare(torch.tensor([1, 2]), torch.tensor([1, 3]), 1e-4)


def _cell(calls, reload_calls=(), trace_error=None):
    cell = {"calls": [{"status": s} for s in calls], "trace_error": trace_error}
    for c in cell["calls"]:
        if c["status"] != "right":
            c["error"] = "why"
    cell["reload"] = {"calls": [{"status": s, "error": "why"} for s in reload_calls]}
    return cell


def test_a_cell_is_wrong_if_any_call_is_wrong_even_after_reloading():
    assert zoo.verdict(_cell(["right", "right"], ["right", "right"]))[0] == "right"
    assert zoo.verdict(_cell(["right", "wrong"]))[0] == "WRONG"
    assert zoo.verdict(_cell(["right", "error", "wrong"]))[0] == "WRONG"
    assert zoo.verdict(_cell(["right", "right"], ["right", "wrong"]))[0] == "WRONG"
    assert zoo.verdict(_cell(["right", "error"]))[0] == "error"
    assert zoo.verdict(_cell([], trace_error="TraceError: no"))[0] == "error"
    assert zoo.verdict(_cell(["skip", "right"]))[0] == "right"


def test_parts_merge_tool_by_tool_and_the_table_counts_them(tmp_path):
    entry = {"category": "vision", "source": "torchvision"}
    part1 = {
        "resnet18": dict(entry, tools={"jit": _cell(["right"]), "tracebridge": _cell(["error"])})
    }
    part2 = {"resnet18": dict(entry, tools={"tracebridge": _cell(["right"])}), "_meta": {}}
    paths = []
    for i, part in enumerate((part1, part2)):
        paths.append(str(tmp_path / f"p{i}.json"))
        with open(paths[-1], "w") as f:
            json.dump(part, f)
    out = str(tmp_path / "all.json")
    zoo.merge(paths, out)
    with open(out) as f:
        merged = json.load(f)
    assert zoo.verdict(merged["resnet18"]["tools"]["tracebridge"])[0] == "right"
    assert zoo.verdict(merged["resnet18"]["tools"]["jit"])[0] == "right"
    table = str(tmp_path / "zoo.md")
    zoo.write_table(merged, table)
    with open(table) as f:
        text = f.read()
    assert "| tracebridge | 1 | 1 | 1 | 0 | 0 |" in text
    assert "| resnet18 | vision | torchvision | right | right | - | - |" in text


def test_a_merge_that_re_runs_models_is_listed_in_the_table(tmp_path):
    entry = {"category": "vision", "source": "torchvision"}
    full = {
        "resnet18": dict(entry, tools={"tracebridge": _cell(["error"])}),
        "mobilenet_v3_small": dict(entry, tools={"tracebridge": _cell(["right"])}),
        "_meta": {},
    }
    again = {
        "resnet18": dict(entry, tools={"tracebridge": _cell(["right"])}),
        "_meta": {"date": "2026-11-23"},
    }
    paths = []
    for i, part in enumerate((full, again)):
        paths.append(str(tmp_path / f"p{i}.json"))
        with open(paths[-1], "w") as f:
            json.dump(part, f)
    out = str(tmp_path / "all.json")
    zoo.merge(paths, out)
    zoo.merge([out], out)  # merging again keeps the record, once
    with open(out) as f:
        merged = json.load(f)
    record = {"date": "2026-11-23", "models": ["resnet18"], "tools": ["tracebridge"]}
    assert merged["_meta"]["reruns"] == [record]
    table = str(tmp_path / "zoo.md")
    zoo.write_table(merged, table)
    with open(table) as f:
        assert "- 2026-11-23, tracebridge: resnet18\n" in f.read()
    # a re-run of every model, in two parts of one day, is one line that says so
    merged["_meta"]["reruns"] += [
        {"date": "2026-11-25", "models": ["resnet18"], "tools": ["onnx"]},
        {"date": "2026-11-25", "models": ["mobilenet_v3_small"], "tools": ["onnx"]},
    ]
    zoo.write_table(merged, table)
    with open(table) as f:
        assert "- 2026-11-25, onnx: every model\n" in f.read()


def test_the_onnx_column_runs_the_exported_trace_on_other_shapes_and_after_saving(tmp_path):
    pytest.importorskip("onnxscript")
    pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    onnx_model = zoo.trace_with("onnx", model, (torch.randn(2, 3),), str(tmp_path))
    for batch in (2, 1, 5):  # traced at 2: the batch is a dynamic dimension of the file
        x = torch.randn(batch, 3)
        assert zoo.compare(model(x), onnx_model(x), 1e-4) is None
    path = str(tmp_path / "m.onnx")
    zoo.save_with("onnx", onnx_model, path)
    reloaded = zoo.load_with("onnx", path)  # called with the flat inputs, as the reload is
    x = torch.randn(3, 3)
    assert zoo.identical(onnx_model(x), reloaded(x))


def test_the_table_has_an_onnx_column(tmp_path):
    entry = {"category": "vision", "source": "torchvision"}
    results = {"m": dict(entry, tools={"onnx": _cell(["right"])}), "_meta": {}}
    table = str(tmp_path / "zoo.md")
    zoo.write_table(results, table)
    with open(table) as f:
        text = f.read()
    assert "| m | vision | torchvision | - | - | - | right |" in text
    assert "| onnx | 1 | 1 | 1 | 0 | 0 |" in text


def test_an_onnx_note_shared_by_two_models_is_written_once_naming_both(tmp_path):
    entry = {"category": "language/decoder", "source": "transformers"}
    refused = {"calls": [], "trace_error": "OnnxExportError: refused"}
    results = {
        "mixtral (MoE)": dict(entry, tools={"onnx": refused}),
        "qwen2_moe (MoE)": dict(entry, tools={"onnx": refused}),
        "_meta": {},
    }
    table = str(tmp_path / "zoo.md")
    zoo.write_table(results, table)
    with open(table) as f:
        text = f.read()
    note = zoo.ONNX_NOTES["mixtral (MoE)"]
    assert text.count(note) == 1
    assert f"- **mixtral (MoE)**, **qwen2_moe (MoE)**: {note}" in text


def test_an_onnx_cell_with_sizes_fixed_by_export_onnx_says_why(tmp_path):
    pytest.importorskip("onnxscript")
    pytest.importorskip("onnxruntime")

    class Wide(torch.nn.Module):
        def forward(self, x):  # a range guard ONNX cannot state: export_onnx fixes x[1]
            return x * 2 if x.shape[1] > 4 else x + 1

    onnx_model = zoo.trace_with("onnx", Wide(), (torch.randn(2, 6),), str(tmp_path))
    assert "fixed in the file (x[1] = 6)" in onnx_model.fixed
    cell = {"calls": [{"status": "right"}, {"status": "error", "error": "invalid dimensions"}]}
    cell["fixed"] = onnx_model.fixed
    status, detail = zoo.verdict(cell)
    assert status == "error"
    assert "1/2 calls right; then: invalid dimensions (why: an ONNX model cannot" in detail


def test_heldout_merge_keeps_the_recorded_reruns_and_records_new_ones():
    """Merging a part (``heldout.py --merge``) replaced the whole ``_meta``: the re-runs
    recorded earlier (and their reasons) vanished from the table."""
    heldout = pytest.importorskip("heldout")
    old = {"_meta": {"date": "d1", "reruns": [{"date": "d1", "models": ["a"], "why": "x"}]}}
    results = dict(old, a={"tools": {}}, b={"tools": {}})
    heldout.merge_into(results, {"_meta": {"date": "d2"}, "c": {"tools": {}}})
    assert results["_meta"]["reruns"] == old["_meta"]["reruns"] and "c" in results
    assert results["_meta"]["date"] == "d2"
    heldout.merge_into(results, {"_meta": {"date": "d3"}, "b": {"tools": {1: 2}}}, "a fix")
    assert results["b"] == {"tools": {1: 2}}
    assert results["_meta"]["reruns"][-1] == {"date": "d3", "models": ["b"], "why": "a fix"}
