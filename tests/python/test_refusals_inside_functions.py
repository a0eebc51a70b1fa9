"""A call the tracer follows into Python code (``Tensor.dim_order``, a library function
that handles ``__torch_function__``) and refuses there is named as the user wrote it: the
function and the user's line first, the internal reason after (prober17: ``dim_order()``
was refused naming ``sym_max``)."""

from __future__ import annotations

import inspect

import pytest
import torch
from torch.overrides import handle_torch_function, has_torch_function

import tracebridge


def _line_of(fn, text: str) -> str:
    lines, first = inspect.getsourcelines(fn)
    offset = next(i for i, line in enumerate(lines) if text in line)
    return f"{inspect.getsourcefile(fn)}:{first + offset}"


def permuted(x):
    order = x.dim_order()
    return x.permute(*order) * 2


def test_dim_order_is_refused_naming_dim_order_and_the_users_line():
    with pytest.raises(tracebridge.UnsupportedOpError) as refused:
        tracebridge.trace(permuted, torch.rand(2, 3))
    message = str(refused.value)
    where = _line_of(permuted, "x.dim_order()")
    assert message.startswith(f"cannot record Tensor.dim_order at {where}: ")
    assert "move the call to Tensor.dim_order out of the traced code" in message
    # the internal helper is the reason, not the subject
    assert message.index("Tensor.dim_order") < message.index("sym_max")


def storage_address(x):
    """A library function in Python that handles __torch_function__ and, inside, does
    what no graph may hold (reads a raw address)."""
    if has_torch_function((x,)):
        return handle_torch_function(storage_address, (x,), x)
    return x * x.data_ptr()


def uses_address(x):
    return storage_address(x) + 1


def test_any_refusal_inside_a_followed_function_names_that_function():
    with pytest.raises(tracebridge.UnsupportedOpError) as refused:
        tracebridge.trace(uses_address, torch.rand(3))
    message = str(refused.value)
    # the innermost line of the user's files that made the call: here the helper is in
    # one of them, and dispatches to itself
    where = _line_of(storage_address, "return handle_torch_function(")
    assert message.startswith(f"cannot record storage_address at {where}: ")
    assert "data_ptr" in message  # the reason, kept


def test_a_refusal_that_names_the_call_already_is_kept():
    def reads(x):
        return x.untyped_storage()

    with pytest.raises(tracebridge.UnsupportedOpError) as refused:
        tracebridge.trace(reads, torch.rand(3))
    assert "untyped_storage" in str(refused.value)
    assert "follows it into its Python code" not in str(refused.value)
