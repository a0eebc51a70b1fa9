"""``math`` functions of traced numbers (trace/math_calls.py): recorded (op-set 9's
``scalar.sin`` ... for the float functions) or guarded, never baked.

``math`` reads a float's double in C without asking it: ``math.cos(t.item())`` was the
example's cosine on every call, silently (a cosine noise schedule on a 0-dim timestep), and
check_trace could not see it (a 0-dim input has no size to grow)."""

from __future__ import annotations

import cmath
import io
import math
import statistics
from math import cos as imported_cos

import pytest
import torch

import tracebridge
from tracebridge.errors import GuardError
from tracebridge.ir import ops


def _both(traced):
    buf = io.BytesIO()
    traced.save(buf)
    return [traced, tracebridge.load(buf.getvalue())]


def _t(value: float) -> torch.Tensor:
    return torch.tensor(value, dtype=torch.float64)


def _ops(traced) -> set:
    return {n.op for n in traced.program.methods["forward"].nodes}


def cosine_schedule(x, t):
    alpha = math.cos((t.item() / 1000 + 0.008) / 1.008 * math.pi / 2) ** 2
    return x * math.sqrt(alpha) + (1 - alpha) ** 0.5


def test_a_cosine_schedule_on_an_item_follows_the_timestep():
    x = torch.ones(2, 3, dtype=torch.float64)
    for traced in _both(tracebridge.trace(cosine_schedule, (x, _t(10.0)))):
        assert "scalar.cos" in _ops(traced)
        for step in (900.0, 0.0, 10.0, 517.5):
            torch.testing.assert_close(traced(x, _t(step)), cosine_schedule(x, _t(step)))


RECORDED = {
    "sin": lambda v: math.sin(v),
    "cos": lambda v: math.cos(v),
    "tan": lambda v: math.tan(v),
    "asin": lambda v: math.asin(v / 4),
    "acos": lambda v: math.acos(v / 4),
    "atan": lambda v: math.atan(v),
    "sinh": lambda v: math.sinh(v),
    "cosh": lambda v: math.cosh(v),
    "tanh": lambda v: math.tanh(v),
    "asinh": lambda v: math.asinh(v),
    "acosh": lambda v: math.acosh(v + 1),
    "atanh": lambda v: math.atanh(v / 4),
    "erf": lambda v: math.erf(v),
    "erfc": lambda v: math.erfc(v),
    "log1p": lambda v: math.log1p(v),
    "expm1": lambda v: math.expm1(v),
    "exp2": lambda v: math.exp2(v),
    "cbrt": lambda v: math.cbrt(v),
    "atan2": lambda v: math.atan2(v, 1.5),
    "hypot": lambda v: math.hypot(v, 1.0),
    "copysign": lambda v: math.copysign(2.0, v - 2),
    "fmod": lambda v: math.fmod(v, 1.5),
    "degrees": lambda v: math.degrees(v),
    "radians": lambda v: math.radians(v),
    "fabs": lambda v: math.fabs(v - 2),
    "log_base": lambda v: math.log(v, 2),
    "isnan": lambda v: float(math.isnan(v)),
    "isinf": lambda v: float(math.isinf(v)),
    "isfinite": lambda v: float(math.isfinite(v)),
    "imported_by_name": lambda v: imported_cos(v),
}


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_math_of_an_item_is_recorded_and_serves_other_values(name):
    g = RECORDED[name]

    def fn(x):
        return torch.ones(2, dtype=torch.float64) * g(x.item())

    for traced in _both(tracebridge.trace(fn, _t(2.5))):
        for value in (1.7, 3.25, 0.5):
            torch.testing.assert_close(traced(_t(value)), fn(_t(value)), rtol=0, atol=0)


def test_math_of_a_size_is_recorded_and_serves_other_sizes():
    def fn(x):
        n = x.shape[0]
        return x * math.sin(n) + math.atan2(n, 3) + math.log(n, 2)

    for traced in _both(tracebridge.trace(fn, torch.ones(4))):
        assert {"scalar.sin", "scalar.atan2"} <= _ops(traced)
        for rows in (5, 8, 13):
            x = torch.ones(rows)
            torch.testing.assert_close(traced(x), fn(x), rtol=0, atol=0)


@pytest.mark.parametrize(
    ("fn", "special"),
    [
        (lambda v: float(math.isnan(v)), math.nan),
        (lambda v: float(math.isinf(v)), math.inf),
        (lambda v: float(math.isfinite(v)), -math.inf),
    ],
    ids=["isnan", "isinf", "isfinite"],
)
def test_a_test_of_nan_or_infinity_is_a_guarded_branch(fn, special):
    def traced_fn(x):
        return torch.ones(1, dtype=torch.float64) * fn(x.item())

    for traced in _both(tracebridge.trace(traced_fn, _t(2.5))):
        with pytest.raises(GuardError):
            traced(_t(special))


GUARDED = {
    "pow": lambda v: math.pow(v, 2),
    "gamma": lambda v: math.gamma(v),
    "lgamma": lambda v: math.lgamma(v),
    "modf": lambda v: math.modf(v)[0],
    "frexp": lambda v: float(math.frexp(v)[1]),
    "isclose": lambda v: float(math.isclose(v, 2.5)),
    "isclose_keyword": lambda v: float(math.isclose(2.5, 2.4, rel_tol=v / 10)),
    "fsum": lambda v: math.fsum([v, 1.0]),
    "ldexp": lambda v: math.ldexp(v, 2),
    "remainder": lambda v: math.remainder(v, 1.5),
    "round_digits": lambda v: round(v, 1),
    "statistics_mean": lambda v: statistics.mean([v, 1.0]),
    "type_of_value": lambda v: type(v)(v) * 2,
    "cmath_sqrt": lambda v: cmath.sqrt(v).real,
    "cmath_phase": lambda v: cmath.phase(complex(1.0, 1.0)) * cmath.exp(v).real,
}


@pytest.mark.parametrize("name", sorted(GUARDED))
def test_other_math_of_an_item_is_guarded_where_it_is_read(name):
    g = GUARDED[name]

    def fn(x):
        return torch.ones(2, dtype=torch.float64) * g(x.item())

    for traced in _both(tracebridge.trace(fn, _t(2.5))):
        torch.testing.assert_close(traced(_t(2.5)), fn(_t(2.5)), rtol=0, atol=0)
        where = "statistics.py" if name == "statistics_mean" else "test_math_of_traced.py"
        with pytest.raises(GuardError, match=where):
            traced(_t(1.7))


def test_integer_functions_of_a_size_are_guarded():
    def fn(x):
        n = x.shape[0]
        return x * math.comb(n, 2) + math.isqrt(n) + math.factorial(n) + math.gcd(n, 6)

    for traced in _both(tracebridge.trace(fn, torch.ones(4), check_trace=False)):
        torch.testing.assert_close(traced(torch.ones(4)), fn(torch.ones(4)))
        with pytest.raises(GuardError):
            traced(torch.ones(5))


def test_round_and_log_with_two_arguments_of_a_size_can_be_saved():
    """They traced but could not be saved (``scalar.round takes 1 arguments, not 2``):
    ``log(n, 2)`` is recorded as ``log(n) / log(2)``, ``round(v, ndigits)`` guarded."""

    def fn(x):
        n = x.shape[0]
        return x * round(n / 3, 2) + round(n, -1) + math.log(n, 2)

    for traced in _both(tracebridge.trace(fn, torch.ones(12))):
        torch.testing.assert_close(traced(torch.ones(12)), fn(torch.ones(12)))
        with pytest.raises(GuardError):
            traced(torch.ones(17))


def test_unary_plus_and_real_keep_an_item_traced():
    def fn(x):
        v = x.item()
        return torch.ones(1, dtype=torch.float64) * (+v) * v.real * v.conjugate() + v.imag

    for traced in _both(tracebridge.trace(fn, _t(2.5))):
        torch.testing.assert_close(traced(_t(1.7)), fn(_t(1.7)))


def test_the_math_ops_are_in_op_set_9():
    for name in ops.MATH_FLOAT_UNARY + ops.MATH_FLOAT_BINARY:
        assert ops.SINCE[f"scalar.{name}"] == 9 <= ops.OPSET_VERSION
        assert ops.info(f"scalar.{name}").impl is getattr(math, name)
