"""Control flow by an exception: an op that raises while the code is traced, caught by the
code's own ``try/except``, leaves nothing in the graph, so the trace is refused, naming the
op and the line (trace/capture.py). Errors that leave the traced function, errors caught
inside torch's own code and ops that succeed are unaffected. Also: three-argument ``pow``
of traced numbers, and the message for reading ``x.grad``."""

from __future__ import annotations

import inspect

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import GuardError, UnsupportedOpError

from .graph_helpers import loaded

pytestmark = pytest.mark.usefixtures("quiet_warnings")


def either_orientation(a, b):
    try:
        return a @ b  # weights stored (in, out) or (out, in)
    except RuntimeError:
        return a @ b.T


def cholesky_or_input(m):
    try:
        return torch.linalg.cholesky(m)  # fails where m is not positive definite
    except RuntimeError:
        return m


def _line(fn, text: str) -> str:
    lines, first = inspect.getsourcelines(fn)
    return f":{first + next(i for i, line in enumerate(lines) if text in line)}"


def test_a_caught_shape_error_refuses_the_trace():
    with pytest.raises(UnsupportedOpError) as info:
        tracebridge.trace(either_orientation, (torch.randn(3, 4), torch.randn(2, 4)))
    message = str(info.value)
    assert "matmul" in message and "RuntimeError" in message
    assert _line(either_orientation, "return a @ b  #") in message
    assert "caught" in message and "shape" in message  # what happened, what to do


def test_a_caught_value_error_refuses_the_trace():
    with pytest.raises(UnsupportedOpError) as info:
        tracebridge.trace(cholesky_or_input, (-torch.eye(3),))
    assert "linalg.cholesky" in str(info.value)
    assert _line(cholesky_or_input, "torch.linalg.cholesky") in str(info.value)


def test_a_caught_refusal_of_the_tracer_refuses_the_trace():
    # tracebridge's errors are RuntimeErrors: code that catches one would record the
    # fallback where eager takes the first path.
    def fn(x):
        try:
            return x + x.data_ptr()
        except RuntimeError:
            return x

    with pytest.raises(UnsupportedOpError, match="caught"):
        tracebridge.trace(fn, (torch.randn(3),))


class Caught(nn.Module):
    def forward(self, x, w):
        try:
            y = x @ w
        except RuntimeError:
            y = x @ w.T
        return y.relu()


def test_a_module_whose_forward_catches_is_refused():
    with pytest.raises(UnsupportedOpError, match="matmul"):
        tracebridge.trace(Caught(), (torch.randn(3, 4), torch.randn(2, 4)))


def test_an_error_that_leaves_the_traced_code_is_its_own():
    def fn(a, b):
        return a @ b

    with pytest.raises(RuntimeError, match="cannot be multiplied") as info:
        tracebridge.trace(fn, (torch.randn(3, 4), torch.randn(2, 4)))
    assert not isinstance(info.value, UnsupportedOpError)


def test_a_try_whose_op_succeeds_traces_and_runs_after_reloading(tmp_path):
    a, b = torch.randn(3, 4), torch.randn(4, 2)
    traced = tracebridge.trace(either_orientation, (a, b))
    for runner in (traced, loaded(traced, tmp_path)):
        x, y = torch.randn(5, 4), torch.randn(4, 3)
        assert torch.equal(runner(x, y), either_orientation(x, y))
        with pytest.raises(RuntimeError):  # where eager would take the except path
            runner(torch.randn(3, 4), torch.randn(2, 4))


def test_an_explicit_shape_test_is_guarded(tmp_path):
    def fn(a, b):
        return a @ b if a.shape[-1] == b.shape[0] else a @ b.T

    traced = tracebridge.trace(fn, (torch.randn(3, 4), torch.randn(2, 4)))
    for runner in (traced, loaded(traced, tmp_path)):
        a, b = torch.randn(3, 4), torch.randn(5, 4)
        assert torch.equal(runner(a, b), fn(a, b))
        with pytest.raises(GuardError):
            runner(torch.randn(3, 4), torch.randn(4, 4))


def test_errors_caught_inside_an_op_of_torch_do_not_count():
    # hasattr's AttributeError is Python's protocol, not a path of the code
    def fn(x):
        return x * 2 if hasattr(x, "no_such_attribute") else x + 1

    traced = tracebridge.trace(fn, (torch.randn(3),))
    x = torch.randn(3)
    assert torch.equal(traced(x), fn(x))


@pytest.mark.parametrize(
    "fn",
    [
        lambda a: a * pow(a.shape[0], 2, 5),
        lambda a: a * pow(2, a.shape[0], 5),
        lambda a: a * pow(3, 2, a.shape[0]),
    ],
    ids=["base", "exponent", "modulus"],
)
def test_three_argument_pow_of_a_size_is_recorded(fn, tmp_path):
    traced = tracebridge.trace(fn, (torch.ones(3, 4),))
    for runner in (traced, loaded(traced, tmp_path)):
        for n in (3, 4, 7):
            x = torch.ones(n, 4)
            assert torch.equal(runner(x), fn(x))


@pytest.mark.parametrize(
    "fn",
    [
        lambda a: a * pow(3, 10 * a.shape[0], 7),
        lambda a: a * pow(-3, a.shape[0] ** 3, -7),
        lambda a: a * pow(a.shape[0] + 1000, 5 * a.shape[0], 1009),
        lambda a: a * pow(a.shape[0], 100, 11),
        lambda a: a * pow(2, a.shape[0], 1),
        lambda a: a * pow(2, 3 * a.shape[0], 24),  # 2 and 24 share a factor: no order
        lambda a: a * pow(5, a.shape[0] * 7, 2**32 - 5),  # an order past the search
        lambda a: a * pow(a.shape[0], a.shape[0] * 9, 2**31 - 1),
    ],
    ids=[
        "large_exponent",
        "negative_modulus",
        "traced_base",
        "literal_exponent",
        "modulus_one",
        "no_order",
        "large_modulus",
        "all_traced",
    ],
)
def test_three_argument_pow_is_right_where_the_power_itself_is_past_int64(fn, tmp_path):
    """``pow(3, 10 * n, 7)`` was recorded as ``(3 ** (10 * n)) % 7``: right up to n = 4,
    and for n = 5 (3**50) a range error that called the graph corrupt. Python reduces by
    the modulus at every step: so does the trace (square and multiply)."""
    traced = tracebridge.trace(fn, (torch.ones(3, 4),), check_trace=False)
    interpreted = loaded(traced, tmp_path, runtime="interpreter")
    for runner in (traced, loaded(traced, tmp_path), interpreted):
        for n in (1, 3, 5, 64, 1000):
            x = torch.ones(n, 4)
            assert torch.equal(runner(x), fn(x)), n


def test_three_argument_pow_past_a_32_bit_modulus_is_refused_with_its_line():
    with pytest.raises(UnsupportedOpError, match=r"modulus of 1099511627791 at .*try_except"):
        tracebridge.trace(lambda a: a * pow(5, a.shape[0], 2**40 + 15), (torch.ones(3, 4),))


def test_three_argument_pow_with_a_negative_exponent_is_refused_or_guarded():
    def fn(a):
        return a * pow(2, a.shape[0] - 4, 5)

    with pytest.raises(UnsupportedOpError, match="modular inverse"):
        tracebridge.trace(fn, (torch.ones(3, 4),))
    traced = tracebridge.trace(fn, (torch.ones(5, 4),))
    with pytest.raises(GuardError):
        traced(torch.ones(3, 4))


def test_three_argument_pow_of_a_float_size_is_pythons_type_error():
    with pytest.raises(TypeError, match="3rd argument"):
        tracebridge.trace(lambda a: a * pow(a.shape[0] / 2, 2, 5), (torch.ones(3, 4),))


def test_reading_grad_names_the_attribute_and_why():
    with pytest.raises(UnsupportedOpError) as info:
        tracebridge.trace(lambda a: a + (1 if a.grad is None else 2), (torch.randn(3),))
    message = str(info.value)
    assert ".grad" in message and "gradient is not an input" in message
    assert "getset_descriptor" not in message
