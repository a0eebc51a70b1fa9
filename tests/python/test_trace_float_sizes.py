"""``float(size)`` while tracing stays a traced number (trace/integers.py), as ``int(size)``.

This module uses ``float`` only as a call or an ``isinstance`` class, so the stand-in is
bound here while tracing; a module that uses it any other way keeps the builtin.
"""

from __future__ import annotations

import pytest
import torch

import tracebridge
from tracebridge.trace.integers import only_called

# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


def scaled_by_rows(x):
    return x * float(x.shape[0])


def positions_over_length(x):
    return torch.arange(x.shape[1]) / float(x.shape[1]) + x


def half_of_rows(x):
    return x[: int(float(x.shape[0]) / 2)]


def inverse_sqrt_width(x):
    scale = float(x.shape[-1]) ** -0.5
    return (x @ x.transpose(0, 1)) * scale


@pytest.mark.parametrize(
    "fn", [scaled_by_rows, positions_over_length, half_of_rows, inverse_sqrt_width]
)
def test_float_of_a_size_keeps_the_trace_general(fn, tmp_path):
    traced = tracebridge.trace(fn, torch.randn(3, 4))
    loaded = tracebridge.load(traced.save(tmp_path / "f.tb") or tmp_path / "f.tb")
    assert traced.guards == []
    for shape in [(5, 4), (2, 7), (9, 1)]:
        x = torch.randn(*shape)
        assert torch.equal(traced(x), fn(x))
        assert torch.equal(loaded(x), fn(x))


def test_float_of_anything_else_is_the_builtins_answer():
    seen = {}

    def f(x):
        n = float(x.shape[0])
        seen.setdefault("n", (isinstance(n, float), n))
        seen.setdefault("other", (float("inf"), float(2), float(x.sum() * 0 + 1.5)))
        return x * n

    traced = tracebridge.trace(f, torch.randn(3, 2))
    assert seen["n"] == (True, 3.0)
    assert seen["other"] == (float("inf"), 2.0, 1.5)
    assert torch.equal(traced(torch.ones(4, 2)), torch.full((4, 2), 4.0))


def test_float_bound_only_where_it_is_only_called_and_removed_after():
    assert only_called("def f(x):\n    return float(x.shape[0])", "float")
    assert not only_called("def f(x):\n    return torch.ones(2, dtype=float)", "float")
    assert not only_called("def f(x):\n    return type(x) is float", "float")
    # int and float are decided apart: float as a dtype leaves int's stand-in bound
    source = "def f(x):\n    return torch.ones(int(x), dtype=float)"
    assert only_called(source, "int") and not only_called(source, "float")
    tracebridge.trace(scaled_by_rows, torch.randn(2, 2))
    assert "float" not in globals() and "int" not in globals()


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x.new_tensor([x.shape[0], x.shape[1]]),  # a floating tensor of sizes
        lambda x: x.new_tensor(x.shape[0]) * x,
        lambda x: torch.tensor([x.shape[0] / 2, 1.0]),
        lambda x: torch.tensor([[x.shape[0]], [x.shape[1]]], dtype=torch.float64),
        lambda x: torch.as_tensor((x.shape[1], 2), dtype=torch.float32),
    ],
)
def test_sizes_made_into_floating_tensors_stay_general(fn, tmp_path):
    """PyTorch reads an int into a floating tensor with ``__float__``: the data is read
    from the sizes' values while the node keeps the traced numbers."""
    traced = tracebridge.trace(fn, torch.randn(2, 3))
    loaded = tracebridge.load(traced.save(tmp_path / "t.tb") or tmp_path / "t.tb")
    assert traced.guards == []
    for shape in [(4, 5), (1, 3)]:
        x = torch.randn(*shape)
        assert torch.equal(traced(x), fn(x)) and torch.equal(loaded(x), fn(x))


def quarter_is_whole(x):
    return x * (5.0 if (x.shape[0] / 4).is_integer() else 1.0)


def by_hex(x):
    return x * (5.0 if float(x.shape[0]).hex() == "0x1.8p+3" else 1.0)


def test_float_methods_read_in_c_are_traced_or_guarded():
    """``float.is_integer`` and ``float.hex`` read the value in C (prober19 F3): the first
    is a comparison with the floor, whose answer is guarded (general for every size that
    gives it), the second guards the value."""
    whole = tracebridge.trace(quarter_is_whole, torch.ones(2, 3))
    for n in (2, 6, 10):
        x = torch.rand(n, 3)
        assert torch.equal(whole(x), quarter_is_whole(x))
    with pytest.raises(tracebridge.GuardError, match="floor"):
        whole(torch.rand(8, 3))
    hexed = tracebridge.trace(by_hex, torch.ones(2, 3))
    assert torch.equal(hexed(torch.ones(2, 3)), by_hex(torch.ones(2, 3)))
    with pytest.raises(tracebridge.GuardError):
        hexed(torch.ones(12, 3))
