"""The package installs beside the user's own torch; the set-up's exact pins stay in
requirements.txt (README "Installing")."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from packaging.requirements import Requirement
from packaging.version import Version

tomllib = pytest.importorskip("tomllib")  # Python 3.11+
ROOT = Path(__file__).resolve().parents[2]


def _requirements() -> dict[str, Requirement]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        deps = tomllib.load(f)["project"]["dependencies"]
    return {Requirement(d).name: Requirement(d) for d in deps}


def test_torch_is_a_tested_range_not_a_pin():
    spec = _requirements()["torch"].specifier
    for version in ("2.11.0", "2.12.1", "2.13.0"):
        assert spec.contains(version), (version, str(spec))
    assert not spec.contains("2.10.0")
    assert spec.contains(Version(torch.__version__).base_version)


def test_numpy_has_no_cap():
    spec = _requirements()["numpy"].specifier
    assert spec.contains("1.26.4") and spec.contains("2.3.0"), str(spec)


def test_exact_pins_live_in_requirements_txt():
    text = (ROOT / "requirements.txt").read_text()
    assert re.search(r"^torch==2\.13\.0\+cpu$", text, re.M)
    assert re.search(r"^numpy==1\.", text, re.M)  # R's reticulate 1.28 cannot load numpy 2


def test_setup_installs_torch_from_the_cpu_index():
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert "https://download.pytorch.org/whl/cpu" in setup
    readme = (ROOT / "README.md").read_text()
    assert "--index-url https://download.pytorch.org/whl/cpu" in readme


def test_scale_out_has_an_environment_of_its_own():
    """Ray and Spark need numpy 2: they never go into R's .venv."""
    makefile = (ROOT / "Makefile").read_text()
    rule = makefile.split("\nscale-setup:")[1].split("\n\n")[0]
    assert ".venv-scale" in rule and "requirements-scale.txt" in rule
    assert not re.search(r"(^|\s)\.venv/bin/pip", rule)


def test_pip_install_keeps_the_installed_torch(tmp_path):
    """pip resolves the package's metadata against this environment's torch (2.13 here, any
    of 2.11-2.13 for a user) and would install tracebridge alone: no torch, no numpy."""
    project = tmp_path / "project"
    (project / "python" / "tracebridge").mkdir(parents=True)
    shutil.copy(ROOT / "pyproject.toml", project)
    shutil.copy(ROOT / "README.md", project)
    (project / "python" / "tracebridge" / "__init__.py").write_text("")
    report = tmp_path / "report.json"
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-index"]
    cmd += ["--no-build-isolation", "--report", str(report), str(project)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if "No module named pip" in done.stderr:
        pytest.skip("this environment has no pip")
    assert done.returncode == 0, done.stderr[-2000:]
    names = [item["metadata"]["name"] for item in json.loads(report.read_text())["install"]]
    assert names == ["tracebridge"]


def test_make_test_builds_the_docs_and_runs_the_scale_out_examples():
    """CI runs `make test` only: the site's checks and the Ray and Spark examples are steps
    of it, each setting up its own environment (.venv-docs, .venv-scale)."""
    makefile = (ROOT / "Makefile").read_text()
    steps = re.search(r"^test: (.*)$", makefile, re.M).group(1).split()
    assert steps[0] == "setup" and {"test-docs", "test-scale"} <= set(steps)
    scale = makefile.split("\ntest-scale: scale-setup\n")[1].split("\n\n")[0]
    assert "TRACEBRIDGE_SCALE=1" in scale and "tests/python/test_scale_out.py" in scale
    assert "openjdk-17-jre-headless" in makefile.split("\nscale-setup:")[1].split("\n\n")[0]
    build = makefile.split("define DOCS_BUILD\n")[1].split("endef")[0]
    assert "mkdocs build --strict" in build and "links site/python site/r" in build
    assert re.search(r"^test-docs: docs-setup\n\t\$\(DOCS_BUILD\)$", makefile, re.M)
