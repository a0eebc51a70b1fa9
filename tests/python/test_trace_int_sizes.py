"""``int(size)`` stays a traced size (trace/integers.py): arithmetic on it is recorded and a
branch on it guards the branch, not the size's value.

transformers' MobileNetV2 pads with ``in_height = int(features.shape[-2])`` and branches on
its parity: a trace at 64 must serve every even size, and refuse an odd one at the line of
the branch. Every test asserts results against eager, in process and after save/load.
"""

from __future__ import annotations

import builtins
import inspect
import operator
import os
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tracebridge
from tracebridge import GuardError
from tracebridge.trace.integers import names_only_called, only_called

from .graph_helpers import loaded as saved_and_loaded
from .int_as_value import halves

HERE = os.path.basename(__file__)


# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


def apply_tf_padding(features: torch.Tensor, stride: int = 2, kernel: int = 3) -> torch.Tensor:
    """transformers' MobileNetV2 apply_tf_padding, for one stride and kernel."""
    in_height = int(features.shape[-2])
    in_width = int(features.shape[-1])
    if in_height % stride == 0:
        pad_along_height = max(kernel - stride, 0)
    else:
        pad_along_height = max(kernel - (in_height % stride), 0)
    if in_width % stride == 0:
        pad_along_width = max(kernel - stride, 0)
    else:
        pad_along_width = max(kernel - (in_width % stride), 0)
    pad_left = pad_along_width // 2
    pad_top = pad_along_height // 2
    padding = (pad_left, pad_along_width - pad_left, pad_top, pad_along_height - pad_top)
    return F.pad(features, padding, "constant", 0.0)


class TFPadded(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, stride=2)

    def forward(self, x):
        return self.conv(apply_tf_padding(x))


def test_int_of_a_size_keeps_the_trace_general_and_guards_the_branch(tmp_path):
    model = TFPadded().eval()
    traced = tracebridge.trace(model, torch.randn(1, 2, 8, 8))
    loaded = saved_and_loaded(traced, tmp_path)
    assert not any("== 8" in g for g in traced.guards)
    for size in [(8, 8), (6, 10), (16, 4)]:  # even sizes: the example's branches
        x = torch.randn(2, 2, *size)
        assert torch.allclose(traced(x), model(x), atol=1e-6)
        assert torch.equal(loaded(x), traced(x))
    # Odd sizes take the other branches: served by the graph traced at 7x7 (a size cut by
    # 1 where a guard reads a residue: check/specialise.py).
    for size in [(9, 9), (7, 11)]:
        x = torch.randn(2, 2, *size)
        assert torch.allclose(traced(x), model(x), atol=1e-6)
        assert torch.equal(loaded(x), traced(x))
    for fn in (traced, loaded):
        with pytest.raises(GuardError) as info:
            fn(torch.randn(1, 2, 9, 8))  # odd and even: no graph has both branches
        message = str(info.value)
        assert "% 2) == 0" in message and "but now it is" in message
        assert HERE in message and "% stride == 0:" in message
        # The first graph's refusal, or the 7x7 graph's, which says whose assumption it is.
        first = "(x.shape[2] % 2) == 0 is True, but now it is False" in message
        assert first or "(in the graph traced with the example's size 8 cut to 7)" in message


def test_int_of_a_float_size_is_truncated_by_a_recorded_op():
    def f(x):
        half = int(x.shape[0] / 2)  # a SymFloat: int() truncates it
        return x[:half] * 2

    traced = tracebridge.trace(f, torch.randn(6, 3))
    assert traced.guards == []
    for n in (6, 7, 11):
        x = torch.randn(n, 3)
        assert torch.equal(traced(x), f(x))


def test_int_of_other_values_is_the_builtin():
    seen = {}

    def f(x):
        seen["values"] = (int("12"), int(3.7), 0, int("ff", 16), int(True))
        seen["checks"] = (isinstance(3, int), isinstance(x.shape[0], int), issubclass(bool, int))
        return x * int(x.sum())  # int() of a tensor: its traced .item(), truncated

    traced = tracebridge.trace(f, torch.ones(2))
    assert seen["values"] == (12, 3, 0, 255, 1)
    assert all(type(v) is builtins.int for v in seen["values"])
    assert seen["checks"] == (True, True, True)
    assert traced.guards == []
    assert torch.equal(traced(torch.ones(3)), torch.full((3,), 3.0))  # sum 3, traced at 2
    assert torch.equal(traced(torch.full((2,), 0.4)), torch.zeros(2))  # int(0.8) is 0


def test_int_of_a_tensor_that_decides_guards_where_it_decides():
    def f(x):
        n = int(x.sum())
        return x * 2 if n > 2 else x - 1

    traced = tracebridge.trace(f, torch.ones(2))
    assert torch.equal(traced(torch.ones(2)), torch.zeros(2))
    with pytest.raises(GuardError, match="n > 2"):
        traced(torch.ones(3))


def test_the_module_global_is_bound_only_while_tracing():
    module = sys.modules[__name__]
    assert "int" not in vars(module)
    inside = {}

    def f(x):
        inside.setdefault("int", vars(module).get("int"))  # the first call: the recording
        return x * 2

    tracebridge.trace(f, torch.ones(2))
    assert inside["int"] is not None and inside["int"] is not builtins.int
    assert "int" not in vars(module)
    assert type(vars(builtins)["int"]) is type  # the builtin itself was never replaced


def test_a_module_that_uses_int_as_a_value_is_left_alone(tmp_path):
    """Code may need the builtin (``torch.ones(n, dtype=int)``, ``type(v) is int``): in
    a module that uses ``int`` as a value, ``int(size)`` guards the size's value, as
    before, and the trace is right where it serves."""
    traced = tracebridge.trace(halves, torch.randn(2, 8))
    x = torch.randn(3, 8)
    assert torch.equal(traced(x), halves(x))
    with pytest.raises(GuardError, match=r"x.shape\[1\] == 8"):
        traced(torch.randn(2, 6))


def test_operator_index_of_a_size_guards_it():
    """``operator.index`` copies an int subclass in C without asking it: patched while
    tracing, it guards the size (it baked it with no guard: silently wrong at batch 3)."""

    def f(x):
        return x.view(operator.index(x.size(0)), -1)

    traced = tracebridge.trace(f, torch.randn(2, 3, 4), check_trace=False)
    assert traced.guards == [f"forward: x.shape[0] == 2 (at {__file__}:{_line(f, 'view')})"]
    with pytest.raises(GuardError, match=r"x.shape\[0\] == 2, but now it is 3"):
        traced(torch.randn(3, 3, 4))


def _line(fn, text: str) -> int:
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


@pytest.mark.parametrize(
    "source, bound",
    [
        ("def f(x: int) -> int:\n    return int(x.shape[0])", True),
        ("def f(x):\n    return isinstance(x, (int, float)) and int(x)", True),
        ("y: int = 3\nz = isinstance(3, int | float)", True),
        ("def f(x):\n    return torch.ones(2, dtype=int)", False),
        ("def f(x):\n    return type(x) is int", False),
        ("to_int = int", False),
        ("def int(x):\n    return x", False),
        ("from numpy import int64 as int", False),
        ("async def int(x):\n    return x", False),
        ("def f(x):\n    return x.int() + print_int(x)  # no int of its own", True),
    ],
)
def test_the_stand_in_is_bound_only_where_int_is_only_called(source, bound):
    assert only_called(source, "int") is bound


def test_one_parse_answers_for_every_name_as_each_alone():
    sources = [
        "def f(x):\n    return int(x) + float(x)",
        "def f(x):\n    return torch.ones(2, dtype=float) * int(x)",
        "def f(x, int=3):\n    return float(x)",
        "import math\nfloat = math.floor",
        "def f(x):\n    return x + 1",
    ]
    for source in sources:
        found = names_only_called(source, ("int", "float"))
        assert found == {n for n in ("int", "float") if only_called(source, n)}
    assert names_only_called(sources[1], ("int", "float")) == {"int"}
    assert names_only_called(sources[4], ("int", "float")) == {"int", "float"}
