"""The held-out sweep's own logic (benchmarks/heldout.py), without the zoo's packages: its
model list stays apart from the zoo's, and its table replaces only its own marked block."""

from __future__ import annotations

import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")
sys.path.insert(0, os.path.abspath(BENCH))

heldout = pytest.importorskip("heldout")


def test_the_held_out_models_are_not_in_the_zoo():
    from heldout_models import all_cases as held
    from zoo_models import all_cases as zoo_cases

    names = [c.name for c in held()]
    assert len(names) >= 30 and len(set(names)) == len(names)
    assert not set(names) & {c.name for c in zoo_cases()}


def _entry(tracebridge: str, jit: str) -> dict:
    def cell(status):
        calls = [{"status": "right"}, {"status": status, "error": f"{status} here"}]
        return {"calls": calls, "trace_error": None}

    return {"tools": {"tracebridge": cell(tracebridge), "jit": cell(jit)}}


def test_the_table_counts_names_causes_and_replaces_only_its_block(tmp_path):
    from heldout_models import all_cases

    first, second = (c.name for c in all_cases()[:2])
    results = {
        first: _entry("right", "wrong"),
        "mamba (state space)": _entry("error", "error"),
        second: _entry("right", "right"),
        "_meta": {"date": "2026-01-01", "torch": "x", "timm": "y", "transformers": "z"},
    }
    page = tmp_path / "RESULTS.md"
    page.write_text(
        "# Results\n\nkept above\n\n<!-- heldout:begin -->\nstale table\n<!-- heldout:end -->\n"
        "\nkept below\n"
    )
    heldout.write_markdown(results, str(page))
    text = page.read_text()
    assert text.startswith("# Results\n\nkept above\n") and text.endswith("\nkept below\n")
    assert "stale table" not in text and text.count(heldout.BEGIN) == 1
    assert "| tracebridge | 2 | 0 | 1 | 3 |" in text
    assert "| torch.jit.trace | 1 | 1 | 1 | 3 |" in text
    assert "torch.export" not in text.split("| model |")[1]  # no column for a tool not run
    assert f"| {first} |" in text and "**SILENTLY WRONG**" in text
    assert f"- **mamba (state space)**: {heldout.CAUSES['mamba (state space)']}" in text
    # Written again: the block is replaced, not added.
    heldout.write_markdown(results, str(page))
    assert page.read_text() == text


def test_a_tool_run_on_some_models_only_has_a_column_with_dashes_elsewhere(tmp_path):
    from heldout_models import all_cases

    first, second = (c.name for c in all_cases()[:2])
    with_export = _entry("right", "right")
    with_export["tools"]["export"] = _entry("wrong", "wrong")["tools"]["jit"]
    results = {first: _entry("right", "error"), second: with_export, "_meta": {}}
    page = tmp_path / "RESULTS.md"
    heldout.write_markdown(results, str(page))
    text = page.read_text()
    assert "| torch.export | 0 | 1 | 0 | 1 |" in text  # counted where it ran only
    # Side by side on the models all three ran on: the second only.
    assert "On the 1 models all three tools ran on" in text
    assert "tracebridge right on 1, silently wrong on 0, refused on 0" in text
    assert "torch.export right on 0, silently wrong on 1, refused on 0" in text
    assert "| tracebridge | torch.jit.trace | torch.export |" in text
    assert f"| {first} |" in text and text.split(f"| {first} |")[1].split("\n")[0].endswith(
        "| right | refused | - |"
    )
