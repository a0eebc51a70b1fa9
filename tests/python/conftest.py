"""Shared fixtures. Tests never depend on the order they run in."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


def run_fresh_python(code: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """Run ``code`` in a new interpreter that never imported the tests' model code."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
