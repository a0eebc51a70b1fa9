"""What the review of session 14's own changes found, fixed (each failed before the fix).

* PyTorch's own reads of ``grad_fn`` (a legacy backward hook's bookkeeping) are not the
  code's decisions: no guard.
* ``x == "mean"`` (torch answers NotImplemented, so False) is no caught op failure.
* A trace made under autocast without the check is recorded in that autocast.
* ``from math import log2`` / ``from random import random`` in a helper module the model
  reaches only through an import (``from . import util``), and ``random.SystemRandom``.
"""

from __future__ import annotations

import importlib
import sys
import textwrap

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge import GuardError, UnsupportedOpError


@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize("runtime", ["codegen", "interpreter"])
def test_a_legacy_backward_hook_adds_no_guard(runtime):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    model[0].register_backward_hook(lambda module, grad_in, grad_out: None)
    x = torch.randn(2, 4)
    traced = tracebridge.trace(model, (x,), runtime=runtime)
    for context in (torch.enable_grad, torch.no_grad, torch.inference_mode):
        with context():
            torch.testing.assert_close(traced(x), model(x))


def test_comparing_a_tensor_with_text_is_no_caught_failure():
    def reduce(x, how):
        return x.sum() if how == "sum" else x.mean() if x.shape[0] == "mean" else x * 2

    traced = tracebridge.trace(lambda x: reduce(x, "none") + (x == "mean"), (torch.ones(3),))
    torch.testing.assert_close(traced(torch.full((4,), 2.0)), torch.full((4,), 4.0))


def test_a_trace_under_autocast_without_the_check_serves_that_autocast():
    fc = nn.Linear(4, 4)

    def f(x):
        return torch.log_softmax(fc(x).float(), -1)

    with torch.autocast("cpu", dtype=torch.bfloat16):
        traced = tracebridge.trace(f, (torch.randn(2, 4),), check_trace=False)
        x = torch.randn(3, 4)
        got, want = traced(x), f(x)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    with pytest.raises(GuardError, match="tracebridge.trace ran under this autocast"):
        traced(x)


def _package(tmp_path, name: str, util: str, model: str):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    (folder / "util.py").write_text(textwrap.dedent(util))
    (folder / "model.py").write_text(textwrap.dedent(model))
    sys.path.insert(0, str(tmp_path))
    try:
        return importlib.import_module(f"{name}.model")
    finally:
        sys.path.remove(str(tmp_path))


def test_math_and_random_imported_by_name_in_a_module_reached_by_import(tmp_path):
    model = _package(
        tmp_path,
        "reach14",
        """
        from math import log2
        from random import random

        def levels(n):
            return int(log2(n))

        def keep(p):
            return random() > p
        """,
        """
        import torch
        from . import util

        def levels(x):
            return x * util.levels(x.shape[1])

        def drop(x):
            return x * 2 if util.keep(0.1) else x
        """,
    )
    traced = tracebridge.trace(model.levels, (torch.ones(2, 5),))
    torch.testing.assert_close(traced(torch.ones(3, 5)), model.levels(torch.ones(3, 5)))
    # int() of the traced logarithm in the helper guards its value: 13 is refused, where
    # the C function read the example's width and served 2 levels for 3
    with pytest.raises(GuardError, match=r"log2\(x\.shape\[1\]\)"):
        traced(torch.ones(2, 13))
    with pytest.raises(UnsupportedOpError, match=r"random\.random\(\) drew"):
        tracebridge.trace(model.drop, (torch.ones(3),))


def test_system_random_draws_are_watched():
    import random

    source = random.SystemRandom()

    def drop(x):
        return x * 2 if source.random() < 0.5 else x

    with pytest.raises(UnsupportedOpError, match=r"random\.random\(\) drew"):
        tracebridge.trace(drop, (torch.ones(3),))
    assert isinstance(source.random(), float)  # as it was, after the trace
