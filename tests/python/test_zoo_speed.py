"""The zoo's latency harness (benchmarks/zoo_speed.py) on small models of its own, without
the zoo's packages: what it measures, what it leaves out of the median, what it writes."""

from __future__ import annotations

import json
import os
import sys

import pytest
import torch
from torch import nn

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")
sys.path.insert(0, os.path.abspath(BENCH))

zoo_speed = pytest.importorskip("zoo_speed")
zoo_models = pytest.importorskip("zoo_models")


class _ReadsAnAddress(nn.Module):
    """torch.jit.trace bakes the address in; tracebridge refuses to record it."""

    def forward(self, x):
        return x * (1 + x.data_ptr() % 1)


def _case(name: str, build) -> zoo_models.Case:
    return zoo_models.Case(
        name=name,
        category="test",
        source="here",
        build=build,
        inputs=lambda: [(torch.randn(3, 4),), (torch.randn(2, 4),)],
    )


CASES = [
    _case("mlp", lambda: nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))),
    _case("tanh", lambda: nn.Tanh()),
    _case("address", _ReadsAnAddress),
]


def test_every_model_gets_an_entry_and_the_median_is_over_those_both_ran(tmp_path):
    out = tmp_path / "speed.json"
    args = ["--json", str(out), "--rounds", "5", "--min-rounds", "2", "--budget", "0.05"]
    assert zoo_speed.main(args, cases=CASES) == 0
    models = json.loads(out.read_text())["models"]
    assert set(models) == {"mlp", "tanh", "address"}
    for name in ("mlp", "tanh"):
        entry = models[name]
        assert entry["tracebridge"] == entry["jit"] == "right"
        assert 2 <= entry["rounds"] <= 5
        assert all(entry[f"{k}_us"] > 0 for k in ("eager", "tracebridge", "jit"))
    address = models["address"]
    assert address["tracebridge"].startswith("refused: UnsupportedOpError")
    assert address["jit"] == "right" and "tracebridge_us" not in address
    medians = zoo_speed.medians(models)
    assert medians["models"] == 2  # the refused model is not in the median
    want = sorted(models[n]["tracebridge_us"] / models[n]["eager_us"] for n in ("mlp", "tanh"))
    assert medians["tracebridge"] == pytest.approx(sum(want) / 2)
    table = zoo_speed.table(models)
    assert table.index("| address |") > max(table.index("| mlp |"), table.index("| tanh |"))
    assert "not in the median" in table


def test_frozen_adds_both_frozen_tools_outside_the_main_median(tmp_path):
    out = tmp_path / "speed.json"
    args = ["--json", str(out), "--rounds", "5", "--min-rounds", "2", "--budget", "0.05"]
    assert zoo_speed.main([*args, "--frozen"], cases=CASES) == 0
    models = json.loads(out.read_text())["models"]
    for name in ("mlp", "tanh"):
        entry = models[name]
        assert entry["tracebridge_frozen"] == entry["jit_frozen"] == "right"
        assert entry["tracebridge_frozen_us"] > 0 and entry["jit_frozen_us"] > 0
    address = models["address"]  # tracebridge refused it: nothing to freeze
    assert address["tracebridge_frozen"].startswith("not run")
    assert address["jit_frozen"] == "right"
    medians = zoo_speed.medians(models)
    assert medians["models"] == medians["frozen models"] == 2
    want = sorted(models[n]["jit_frozen_us"] / models[n]["eager_us"] for n in ("mlp", "tanh"))
    assert medians["jit_frozen (frozen set)"] == pytest.approx(sum(want) / 2)
    assert "all four ran right" in zoo_speed.summary(models)


def test_resume_keeps_what_was_measured_and_write_updates_only_its_block(tmp_path, monkeypatch):
    out = tmp_path / "speed.json"
    done = {"category": "test", "tracebridge": "right", "jit": "right", "rounds": 9}
    done.update(eager_us=10.0, tracebridge_us=5.0, jit_us=4.0)
    out.write_text(json.dumps({"_meta": {"command": "x"}, "models": {"mlp": done}}))
    results_md = tmp_path / "RESULTS.md"
    block = "<!-- zoo_speed:begin -->\nold\n<!-- zoo_speed:end -->"
    results_md.write_text(f"# before\n\n{block}\nafter\n")
    monkeypatch.setattr(sys.modules["results_md"], "RESULTS", results_md)
    args = ["--json", str(out), "--resume", "--write", "--only", "mlp", "--only", "tanh"]
    assert zoo_speed.main([*args, "--rounds", "3", "--budget", "0.05"], cases=CASES) == 0
    models = json.loads(out.read_text())["models"]
    assert models["mlp"] == done  # not measured again
    assert models["tanh"]["tracebridge"] == "right"
    text = results_md.read_text()
    assert text.startswith("# before\n") and text.endswith("after\n") and "old" not in text
    assert "| mlp | 10 | 5 | 0.50x | 4 | 0.40x | 1.25 |" in text
    assert "over the 2 models both tools ran right" in text


def test_an_unknown_model_name_is_refused_with_the_name():
    with pytest.raises(SystemExit, match="no zoo model named \\['nope'\\]"):
        zoo_speed.main(["--only", "nope"], cases=CASES)


def test_again_keeps_each_contenders_minimum_over_both_runs(tmp_path):
    out = tmp_path / "speed.json"
    args = ["--json", str(out), "--only", "tanh", "--rounds", "3", "--budget", "0.05"]
    assert zoo_speed.main(args, cases=CASES) == 0
    first = json.loads(out.read_text())["models"]["tanh"]
    assert zoo_speed.main([*args, "--again"], cases=CASES) == 0
    results = json.loads(out.read_text())
    second = results["models"]["tanh"]
    assert results["_meta"]["runs"] == 2
    assert second["rounds"] > first["rounds"]
    for key in ("eager_us", "tracebridge_us", "jit_us"):
        assert second[key] <= first[key]
    # A run that finds a tool wrong replaces the entry: no minimum over a wrong result.
    wrong = dict(second, jit="wrong: output 0 differs")
    assert zoo_speed.merged(second, wrong) == wrong


@pytest.mark.parametrize("jit_copy", [False, True])
def test_jit_copy_gives_torch_jit_weights_of_its_own(jit_copy):
    model = CASES[0].build().eval()
    inputs = CASES[0].inputs()[0]
    entry: dict = {}
    runners = zoo_speed._trace_tools(model, inputs, False, entry, jit_copy)
    assert not entry  # neither tool refused
    eager = {p.data_ptr() for p in model.parameters()}
    scripted = {p.data_ptr() for p in runners["jit"].parameters()}
    assert len(scripted) == len(eager) == 4
    assert scripted.isdisjoint(eager) if jit_copy else scripted == eager
    with torch.no_grad():
        assert torch.equal(runners["jit"](*inputs), model(*inputs))
