"""``x.float()``, ``x.double()``, ``x.half()``, ``x.bfloat16()`` are tested inline, as
``x.to(dtype)`` is (runtime/identity.py): ``x`` itself where PyTorch returns it, the call
otherwise, and the call for a subclass."""

from __future__ import annotations

import pytest
import torch

import tracebridge

from .graph_helpers import loaded, recording_subclass

METHODS = ["float", "double", "half", "bfloat16"]


# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


@pytest.mark.parametrize("method", METHODS)
def test_conversions_to_the_dtype_a_tensor_has_give_it_back(method, tmp_path):
    def convert(x):
        return getattr(x, method)()

    # traced where the call converts: one that gave its input back would guard the dtype
    # instead (trace/noops.py, guard_returned_input)
    example = torch.randn(2, 3, dtype=torch.float64 if method == "float" else torch.float32)
    traced = tracebridge.trace(convert, (example,))
    assert f"else op_Tensor_{method}_" in traced.code  # tested inline
    module = loaded(traced, tmp_path)
    plain = tracebridge.load(tmp_path / "m.tb", runtime="interpreter")
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        for grad in (False, True):
            x = torch.randn(2, 3, dtype=torch.float64).to(dtype).requires_grad_(grad)
            got, expected, stepped = module(x), convert(x), plain(x)
            assert (got is x) == (expected is x)
            for other in (expected, stepped):
                assert torch.equal(got, other) and got.dtype == other.dtype
                assert got.requires_grad == other.requires_grad


def test_subclasses_see_the_conversion(tmp_path):
    Tagged = recording_subclass()

    example = torch.randn(2, 3, dtype=torch.float64)  # each call converts (see above)

    def each(x):
        return x.float(), x.half(), x.bfloat16(), x.half().double()

    module = loaded(tracebridge.trace(each, (example,)), tmp_path)
    module(example.as_subclass(Tagged))
    assert all(m in Tagged.calls for m in METHODS)


def test_moves_to_the_device_a_tensor_is_on_give_it_back(tmp_path):
    def move(x, y):
        return x.to(y.device) * 2, x.to(device=y.device, dtype=torch.float32) + 1

    # traced where the dtype conversion converts (see the dtype test above)
    traced = tracebridge.trace(move, (torch.randn(3, dtype=torch.float64), torch.randn(3)))
    assert traced.code.count("else op_Tensor_to_") == 2  # each tested inline
    module = loaded(traced, tmp_path)
    for dtype in (torch.float32, torch.float64):
        x, y = torch.randn(3, dtype=dtype), torch.randn(3)
        got, expected = module(x, y), move(x, y)
        for a, b in zip(got, expected):
            assert torch.equal(a, b) and a.dtype == b.dtype
    Tagged = recording_subclass()
    module(torch.randn(3).as_subclass(Tagged), torch.randn(3))
    assert "to" in Tagged.calls  # a subclass sees the call


def test_a_move_gives_the_same_object_as_eager():
    def move(x, y):
        return x.to(y.device)

    traced = tracebridge.trace(move, (torch.randn(3, dtype=torch.float64), torch.randn(3)))
    assert "else op_Tensor_to_" in traced.code
    x = torch.randn(3)
    assert traced(x, torch.randn(3)) is x  # the input itself, as eager gives it
