"""``pow(x, 2)`` runs as ``mul(x, x)`` in calls without autograd (runtime/squares.py): the
same bits as eager and the interpreter over dtypes, layouts and special values, and
``pow`` wherever that could differ (autograd, other dtypes, subclasses, modes)."""

from __future__ import annotations

import pytest
import torch
from torch.overrides import TorchFunctionMode

import tracebridge

from .graph_helpers import loaded, no_grad_code, recording_subclass, same_bits

# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


def squares(x):
    """Llama's RMSNorm variance and every spelling of a square, next to other powers."""
    a = x.pow(2).mean(-1, keepdim=True)
    b = x**2.0 + torch.pow(x, 2)
    c = x.pow(3) + x.pow(0.5).nan_to_num(0.25)
    return a + b + c


def layouts(dtype):
    special = [float("inf"), -float("inf"), float("nan"), 0.0, -0.0, 1e-40, 3e38, -1e-30]
    return [
        torch.randn(3, 8, dtype=dtype),
        torch.randn(8, 3, dtype=dtype).t(),  # not contiguous
        torch.randn(3, 1, dtype=dtype).expand(3, 8),  # stride 0
        torch.randn(3, 16, dtype=dtype)[:, ::2],  # strided
        torch.tensor([special], dtype=dtype),
        torch.randn(2, 5, 8, dtype=dtype) * 1e20,  # squares that overflow float32
    ]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_squares_run_as_products_with_the_same_bits(dtype, tmp_path):
    torch.manual_seed(0)
    traced = tracebridge.trace(squares, (torch.randn(4, 8, dtype=dtype),), check_trace=False)
    code = no_grad_code(traced)
    # x ** 2.0 and the two pow(x, 2) (one node once repeats run once, runtime/cse.py)
    assert code.count("op_mul_") == 2
    assert code.count("op_pow_") == 4  # each square's fallback, and the cube and the root
    fast = loaded(traced, tmp_path)
    plain = tracebridge.load(tmp_path / "m.tb", runtime="interpreter")
    with torch.no_grad():
        for x in layouts(dtype):
            if x.dim() != 2:
                continue
            expected = squares(x)
            assert same_bits(fast(x), expected) and same_bits(plain(x), expected)
    with torch.no_grad():  # the product's layout follows the input's, as pow's does
        for k, x in enumerate(layouts(dtype)):
            traced_x = tracebridge.trace(lambda t: t.pow(2), (x,), check_trace=False)
            folder = tmp_path / str(k)
            folder.mkdir()
            one = loaded(traced_x, folder)
            assert "op_mul_" in no_grad_code(traced_x)
            assert same_bits(one(x), x.pow(2))


def test_calls_with_autograd_run_pow_and_get_its_gradients(tmp_path):
    """``pow``'s backward is ``grad * 2 * x``; ``mul(x, x)``'s sums two products, which
    rounds differently: a call with autograd keeps ``pow``."""
    torch.manual_seed(1)
    traced = tracebridge.trace(squares, (torch.randn(4, 8),), check_trace=False)
    assert "op_mul_" not in traced.code
    fast = loaded(traced, tmp_path)
    x = torch.randn(4, 8).abs()
    x1 = x.clone().requires_grad_()
    x2 = x.clone().requires_grad_()
    (g1,) = torch.autograd.grad(fast(x1).sum(), x1)
    (g2,) = torch.autograd.grad(squares(x2).sum(), x2)
    assert same_bits(g1, g2)


def test_other_dtypes_get_pow(tmp_path):
    """Traced in float32, called in float64, half and bfloat16: ``pow`` runs, as in eager."""
    torch.manual_seed(2)
    module = loaded(tracebridge.trace(lambda t: t.pow(2), (torch.randn(4, 8),)), tmp_path)
    with torch.no_grad():
        for x in (
            torch.randn(4, 8).half() * 300,
            torch.randn(4, 8).bfloat16() * 1e19,
            torch.randn(4, 8).double() * 1e200,
        ):
            assert torch.equal(module(x), x.pow(2)) and module(x).dtype == x.dtype


def test_a_square_traced_in_another_dtype_keeps_pow(tmp_path):
    traced = tracebridge.trace(lambda t: t.pow(2), (torch.randn(4, 8).half(),))
    assert "op_mul_" not in no_grad_code(traced)
    traced = tracebridge.trace(lambda t: t.pow(2), (torch.arange(6),))
    assert "op_mul_" not in no_grad_code(traced)


def test_graphs_that_turn_gradients_on_keep_pow():
    def f(x):
        with torch.enable_grad():
            return x.pow(2)

    traced = tracebridge.trace(f, (torch.randn(3),), check_trace=False)
    assert "op_mul_" not in no_grad_code(traced)


def test_modes_and_subclasses_see_pow(tmp_path):
    module = loaded(tracebridge.trace(lambda t: t.pow(2), (torch.randn(3),)), tmp_path)

    class Seen(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.calls = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.calls.append(func.__name__)
            return func(*args, **(kwargs or {}))

    Sub = recording_subclass()

    x = torch.randn(3)
    with torch.no_grad():
        with Seen() as seen:
            assert torch.equal(module(x), x.pow(2))
        assert "pow" in seen.calls and "mul" not in seen.calls
        y = x.as_subclass(Sub)
        assert torch.equal(module(y).as_subclass(torch.Tensor), x.pow(2))
        assert "pow" in Sub.calls and "mul" not in Sub.calls
