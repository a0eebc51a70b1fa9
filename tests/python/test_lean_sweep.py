"""Cases the sweep of the zoo and the held-out models found for runtime/lean.py.

Each is the smallest module that shows one way the code for calls without autograd could
give the caller an inference tensor (left to the safety net's copy, ``lean.COPIES``) or
raise where eager does not: the same bits as eager, normal tensors out, no copy.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tracebridge.runtime import lean

from .graph_helpers import loaded_module as _loaded

pytestmark = pytest.mark.usefixtures("quiet_warnings", "lean_always")


def _same_as_eager(module: nn.Module, loaded, *inputs) -> torch.Tensor:
    """Calls ``loaded`` and ``module`` under ``torch.no_grad()``: the same bits and strides,
    a normal tensor, not copied by the safety net; returns the loaded module's result."""
    before = lean.COPIES[0]
    with torch.no_grad():
        got, expected = loaded(*inputs), module(*inputs)
    assert lean.COPIES[0] == before, "an output was left to the safety net's copy"
    assert not got.is_inference() and not torch.is_inference_mode_enabled()
    assert got.dtype == expected.dtype and got.stride() == expected.stride()
    assert torch.equal(got, expected)
    return got


class KeywordView(nn.Module):
    """A view whose tensor is passed by keyword (``torch.transpose(input=h, ...)``), then
    written in place: the view joins ``h``'s memory as a positional view does."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        flipped = torch.transpose(input=self.linear(x) * 2, dim0=0, dim1=1)
        return flipped.add_(1)


class KeywordFlatten(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        return torch.flatten(input=self.linear(x))


@pytest.mark.parametrize("module", [KeywordView, KeywordFlatten])
def test_a_view_of_a_tensor_passed_by_keyword_is_made_outside_inference_mode(module, tmp_path):
    module = module().eval()
    x = torch.randn(3, 4)
    loaded = _loaded(module, (x,), tmp_path)
    got = _same_as_eager(module, loaded, x)
    got.mul_(2)  # writable in place, as eager's


class DivideThenClamp(nn.Module):
    """``linear(x) / scale`` runs in place into the linear's dead result where the dtypes are
    the traced ones (runtime/inplace.py); with another dtype of ``scale`` it runs out of
    place, and the ``clamp_`` after it writes that result outside inference mode."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x, scale):
        return (self.linear(x) / scale).clamp_(min=0)


class Divide(nn.Module):
    """The division alone, returned: the safety net copied it on the other dtype."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x, scale):
        return self.linear(x) / scale


class MeanOverMask(nn.Module):
    """The held-out "torch._assert on sizes and data": a float sum divided by an int64 mask
    count, which runs out of place on every call (the result is float, not the mask's
    int64), with the traced dtypes."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x, mask):
        return (self.linear(x) * mask[..., None]).sum(1) / mask.sum(-1, keepdim=True)


def test_a_mean_over_an_integer_mask_is_a_normal_tensor(tmp_path):
    module = MeanOverMask().eval()
    x, mask = torch.randn(2, 5, 4), torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    loaded = _loaded(module, (x, mask), tmp_path)
    _same_as_eager(module, loaded, x, mask).add_(1)


@pytest.mark.parametrize("module", [DivideThenClamp, Divide])
def test_an_op_that_may_run_in_place_gives_a_normal_tensor_when_it_does_not(module, tmp_path):
    module = module().eval()
    x, scale = torch.randn(3, 4), torch.rand(3, 1) + 1
    loaded = _loaded(module, (x, scale), tmp_path)
    assert "inplace" in loaded._methods["forward"].no_grad_code
    _same_as_eager(module, loaded, x, scale)  # in place, as traced
    got = _same_as_eager(module, loaded, x, scale.double())  # out of place: another dtype
    assert got.dtype == torch.float64
    got.add_(1)
