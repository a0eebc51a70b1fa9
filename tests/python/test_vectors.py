"""Golden vectors (shared_ir/vectors/): every committed artifact, made from Python or from R,
loads with both runtimes and reproduces its expected outputs; the guard case raises.

These files are the format's compatibility test: they were written by format version 1 and
must keep loading in every later version. Nothing here starts R.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import tracebridge
from tracebridge.artifact import parse_safetensors, read_json
from tracebridge.ir.pytree import flatten

VECTORS = Path(__file__).resolve().parents[2] / "shared_ir" / "vectors"
MANIFEST = json.loads((VECTORS / "manifest.json").read_text())
ENTRIES = {e["name"]: e for e in MANIFEST["vectors"]}
RUNTIMES = ["codegen", "interpreter"]
ERRORS = {"GuardError": tracebridge.GuardError}


def read_tensors(name: str) -> dict[str, torch.Tensor]:
    blob = (VECTORS / name).read_bytes()
    return {k: v.clone() for k, v in parse_safetensors(blob, name).items()}


def by_method(tensors: dict[str, torch.Tensor], prefix: str) -> dict[str, list[torch.Tensor]]:
    """``{"forward": [input0, input1, ...]}`` from ``input0`` or ``encode.input0`` names."""
    groups: dict[str, dict[int, torch.Tensor]] = {}
    for key, tensor in tensors.items():
        method, _, leaf = key.rpartition(".")
        assert leaf.startswith(prefix), f"unexpected tensor name {key!r}"
        groups.setdefault(method or "forward", {})[int(leaf[len(prefix) :])] = tensor
    return {m: [g[i] for i in range(len(g))] for m, g in groups.items()}


def call(obj, method: str, inputs: list[torch.Tensor]):
    if method == "forward":
        return obj(*inputs)
    return getattr(obj, method)(*inputs)


def leaves(out) -> list[torch.Tensor]:
    flat, _ = flatten(out, lambda x: isinstance(x, torch.Tensor))
    return flat


def cases():
    for entry in MANIFEST["vectors"]:
        for case in entry["cases"]:
            for runtime in RUNTIMES:
                yield pytest.param(
                    entry["name"],
                    case["label"],
                    runtime,
                    id=f"{entry['name']}-{case['label']}-{runtime}",
                )


def test_manifest_lists_every_file():
    listed = {"manifest.json", "generate.py", "generate.R"}
    for entry in MANIFEST["vectors"]:
        listed.add(entry["artifact"])
        listed.add(f"{entry['name']}.graph")  # the golden graph text
        for case in entry["cases"]:
            listed.add(case["inputs"])
            if "expected" in case:
                listed.add(case["expected"])
    on_disk = {p.name for p in VECTORS.iterdir() if p.is_file()}
    assert on_disk - listed == set(), "files not in manifest.json"
    assert listed - on_disk <= {"generate.R"}, "manifest.json lists missing files"


def test_manifest_covers_the_issue():
    covers = {c for e in MANIFEST["vectors"] for c in e["covers"]}
    wanted = {
        "function",
        "mlp",
        "cnn",
        "batchnorm",
        "residual",
        "attention",
        "lstm",
        "embedding",
        "dict_output",
        "tuple_output",
        "trace_module",
        "respect_mode",
        "symbolic_batch",
        "guards",
    }
    assert wanted <= covers, f"missing: {sorted(wanted - covers)}"
    producers = [e["producer"] for e in MANIFEST["vectors"]]
    assert len(producers) >= 12
    assert producers.count("python") >= 6
    assert producers.count("r") >= 6


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_artifact_metadata(name):
    entry = ENTRIES[name]
    doc, _ = read_json(VECTORS / entry["artifact"])
    assert doc["format"] == "tracebridge"
    assert doc["format_version"] == entry["format_version"] == 1
    assert doc["kind"] == entry["kind"]
    assert list(doc["methods"]) == entry["methods"]
    assert (VECTORS / entry["artifact"]).stat().st_size < 64 * 1024, "keep vectors small"


@pytest.mark.parametrize(("name", "label", "runtime"), list(cases()))
def test_vector(name, label, runtime):
    entry = ENTRIES[name]
    case = next(c for c in entry["cases"] if c["label"] == label)
    loaded = tracebridge.load(VECTORS / entry["artifact"], runtime=runtime)
    if "mode" in case:
        loaded.train(case["mode"] == "train")
    inputs = by_method(read_tensors(case["inputs"]), "input")
    if "raises" in case:
        with pytest.raises(ERRORS[case["raises"]]):
            for method, args in inputs.items():
                call(loaded, method, args)
        return
    expected = by_method(read_tensors(case["expected"]), "output")
    assert sorted(expected) == sorted(inputs)
    tol = entry["tolerance"]
    for method, args in inputs.items():
        with torch.no_grad():
            got = leaves(call(loaded, method, args))
        want = expected[method]
        assert len(got) == len(want), f"{method}: {len(got)} outputs, expected {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert g.dtype == w.dtype, f"{method} output{i}: dtype {g.dtype} != {w.dtype}"
            assert g.shape == w.shape, f"{method} output{i}: shape {g.shape} != {w.shape}"
            torch.testing.assert_close(
                g,
                w,
                rtol=tol["rtol"],
                atol=tol["atol"],
                msg=lambda m, i=i, method=method: f"{method} output{i}: {m}",
            )


def test_guard_error_names_the_assumption():
    entry = ENTRIES["py_guards"]
    case = next(c for c in entry["cases"] if c.get("raises"))
    loaded = tracebridge.load(VECTORS / entry["artifact"])
    (x,) = by_method(read_tensors(case["inputs"]), "input")["forward"]
    with pytest.raises(tracebridge.GuardError) as info:
        loaded(x)
    # where the assumption was made (the generator's source line) and what broke
    assert "generate.py:" in info.value.location
    assert "is True, but now it is False" in str(info.value)


def test_guards_can_be_disabled_for_the_guard_vector():
    entry = ENTRIES["py_guards"]
    loaded = tracebridge.load(VECTORS / entry["artifact"])
    x = -torch.ones(2, 4)
    with tracebridge.guards_disabled():
        out = loaded(x)
    torch.testing.assert_close(out, x * 2 + 1)  # the recorded branch, as asked


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_python_printer_matches_the_golden_graph_text(name):
    """The stored text (shared_ir/vectors/<name>.graph) is what Python's printer writes;
    R's printer is held to the same files in tests/testthat/test-vectors.R."""
    from tracebridge.ir.printer import graph_text

    program = tracebridge.artifact.read(VECTORS / ENTRIES[name]["artifact"])
    text = "\n\n".join(graph_text(g, m) for m, g in program.methods.items()) + "\n"
    assert text == (VECTORS / f"{name}.graph").read_text()
