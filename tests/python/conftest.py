"""Shared fixtures. Tests never depend on the order they run in."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


@pytest.fixture
def no_copies():
    """The inference-mode analysis left no output of the test to the safety net's copy
    (runtime/lean.py, ``lean.COPIES``)."""
    from tracebridge.runtime import lean

    before = lean.COPIES[0]
    yield
    assert lean.COPIES[0] == before, "an output was left to the safety net's copy"


@pytest.fixture
def lean_always(monkeypatch):
    """Calls without autograd enter inference mode however few ops their graph has
    (runtime/lean.py, ``MIN_OPS``): the tests' small modules stand for large ones."""
    from tracebridge.runtime import lean

    monkeypatch.setattr(lean, "MIN_OPS", 0)


@pytest.fixture
def quiet_warnings():
    """Ignore every warning for one test. Files whose tests trace code that warns by design
    (constants from closures, folded values) use it for all their tests with
    ``pytestmark = pytest.mark.usefixtures("quiet_warnings")``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def run_fresh_python(code: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """Run ``code`` in a new interpreter that never imported the tests' model code."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


_UNCHECKED: list = []  # non-empty while a test asks for programs the checker would refuse


@pytest.fixture
def unchecked_programs():
    """For tests that show the runtime is safe on its own: programs built in memory skip the
    suite-wide check below (loading a file still runs the checker, as always)."""
    _UNCHECKED.append(True)
    yield
    _UNCHECKED.pop()


@pytest.fixture(autouse=True, scope="session")
def _check_every_program():
    """Every program a test traces or loads passes the file checker (``check_program``), so
    the checker's rules are tried on every graph the suite makes, not only on files."""
    from tracebridge import api
    from tracebridge.check.program import check_program

    originals = {cls: cls.__init__ for cls in (api.TracedFunction, api.TracedModule)}

    def checked(init):
        def __init__(self, program, *args, **kwargs):
            if not _UNCHECKED:
                check_program(program)
            init(self, program, *args, **kwargs)

        return __init__

    for cls, init in originals.items():
        cls.__init__ = checked(init)
    yield
    for cls, init in originals.items():
        cls.__init__ = init
