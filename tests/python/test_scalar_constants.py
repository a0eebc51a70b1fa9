"""Tensor-scalar arithmetic runs with the scalar as a 0-dim tensor made at load
(runtime/scalars.py): the same bits, dtypes and gradients as the literal, and the literal
wherever that could differ (other dtypes, subclasses, modes, autocast)."""

from __future__ import annotations

import math

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import tracebridge
from tracebridge.runtime import scalars

from .graph_helpers import loaded, same_bits

SCALARS = [
    0.5,
    0.1,
    -10000.0,
    1e-12,
    1 / 3,
    math.sqrt(2 / math.pi),
    0.044715,
    1e30,
    1e-45,
    float("inf"),
    -float("inf"),
    float("nan"),
    0.0,
    -0.0,
    2,
    7,
    -1,
    0,
    2**40 + 1,
]


def arithmetic(scalar):
    """Every op form the runtime gives a tensor, with ``scalar`` as a literal."""

    def f(x):
        a = x + scalar
        b = x - scalar
        c = x * scalar
        d = x / scalar
        e = scalar - x
        f_ = torch.mul(x, scalar) + torch.sub(x, scalar)
        g = x.clone()
        g.add_(scalar)
        g.mul_(scalar)
        g.sub_(scalar)
        g.div_(scalar)
        return torch.stack([a, b, c, d, e, f_, g])

    return f


def inputs(dtype):
    return [
        torch.randn(3, 5, dtype=dtype),
        torch.randn(5, 3, dtype=dtype).t(),  # not contiguous
        torch.tensor(
            [[float("inf"), -float("inf"), float("nan"), 0.0, -0.0, 1e-40, 3e38]], dtype=dtype
        ),
        torch.randn(1, 1, dtype=dtype),
    ]


def traced_for(fn, example, tmp_path):
    return loaded(tracebridge.trace(fn, (example,), check_trace=False), tmp_path)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_same_bits_as_the_literal(dtype, tmp_path):
    torch.manual_seed(0)
    for k, scalar in enumerate(SCALARS):
        fn = arithmetic(scalar)
        with torch.no_grad():
            folder = tmp_path / str(k)
            folder.mkdir()
            module = traced_for(fn, torch.randn(4, 6, dtype=dtype), folder)
            assert "_plain" in module.code  # the constants are in use
            for x in inputs(dtype):
                assert same_bits(module(x), fn(x)), (scalar, x)


def test_other_dtypes_get_the_literal(tmp_path):
    """Traced in float32, called in float64, half, bfloat16: a half kernel reads the
    wrapped number's double value, which a constant would have lost."""
    torch.manual_seed(1)
    fn = arithmetic(0.1)
    module = traced_for(fn, torch.randn(4, 6), tmp_path)
    for dtype in (torch.float64, torch.float16, torch.bfloat16):
        x = torch.randn(4, 6).to(dtype)
        assert same_bits(module(x), fn(x)), dtype


def test_gradients_are_the_same(tmp_path):
    torch.manual_seed(2)
    fn = arithmetic(0.3)
    module = traced_for(fn, torch.randn(4, 6), tmp_path)
    x = torch.randn(4, 6)
    x1 = x.clone().requires_grad_()
    x2 = x.clone().requires_grad_()
    # the in-place ops write a clone: gradients flow through every form
    (g1,) = torch.autograd.grad(module(x1).pow(2).sum(), x1)
    (g2,) = torch.autograd.grad(fn(x2).pow(2).sum(), x2)
    assert same_bits(g1, g2)


def test_modes_and_subclasses_see_the_literal(tmp_path):
    """A torch function mode, a dispatch mode or a tensor subclass sees the number the
    program wrote, not a tensor the runtime made."""
    module = traced_for(lambda x: x * 0.25 + 1.5, torch.randn(3), tmp_path)

    class Seen(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.kinds = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.kinds += [type(a).__name__ for a in args[1:]]
            return func(*args, **(kwargs or {}))

    class Dispatched(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.wrapped = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.wrapped += [type(a).__name__ for a in args[1:]]
            return func(*args, **(kwargs or {}))

    x = torch.randn(3)
    with Seen() as seen:
        out = module(x)
    assert seen.kinds == ["float", "float"]
    assert torch.equal(out, x * 0.25 + 1.5)
    with Dispatched() as dispatched:
        module(x)
    assert dispatched.wrapped == ["float", "float"]

    @tracebridge.pass_through  # it only counts
    class Tagged(torch.Tensor):
        seen: list = []

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            cls.seen += [type(a).__name__ for a in args[1:]]
            return super().__torch_function__(func, types, args, kwargs or {})

    module(x.as_subclass(Tagged))
    assert Tagged.seen[:2] == ["float", "float"]


def test_autocast_gets_the_literal(tmp_path):
    module = traced_for(lambda x: x * 0.1 - 3.0, torch.randn(3), tmp_path)
    x = torch.randn(3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not scalars.plain_call()
        assert same_bits(module(x), x * 0.1 - 3.0)
    assert scalars.plain_call()


def test_ops_with_other_arguments_keep_the_literal(tmp_path):
    """``alpha``, ``rounding_mode``, ``pow`` and bool scalars are not rewritten."""
    fn = lambda x: (  # noqa: E731
        torch.add(x, 0.5, alpha=2)
        + torch.div(x, 3.0, rounding_mode="floor")
        + x.pow(2.0)
        + (x * True)
    )
    traced = tracebridge.trace(fn, (torch.randn(3),), check_trace=False)
    assert "_plain" not in traced.code
    x = torch.randn(5)
    assert same_bits(loaded(traced, tmp_path)(x), fn(x))


def test_the_interpreter_agrees(tmp_path):
    fn = arithmetic(1 / 7)
    traced = tracebridge.trace(fn, (torch.randn(2, 3),), check_trace=False)
    x = torch.randn(3, 2)
    assert same_bits(
        loaded(traced, tmp_path, runtime="interpreter")(x), loaded(traced, tmp_path)(x)
    )
