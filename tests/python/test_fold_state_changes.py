"""Every way the state of a traced or loaded module can change after the values folded
from it were kept (runtime/folding.py, ``Folded``) is seen at the next call without
autograd: the result is eager's on the changed module. (In-place writes, parameter
assignment, ``.data =``, ``load_state_dict`` and ``.double()``: test_models_speed.py,
``test_folded_values_follow_the_state``; writes through ``.data``: test_folded_data_writes.py.)"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tracebridge

pytestmark = pytest.mark.usefixtures("quiet_warnings")


class Negated(torch.Tensor):
    """A tensor whose products come out negated: a subclass whose torch function changes
    what eager computes from it."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **(kwargs or {}))
        if func in (torch.mul, torch.Tensor.mul, torch.Tensor.__mul__):
            return -out
        return out


class Scaled(nn.Module):
    """``weight * 2`` is a value of state alone: folded, and kept between calls."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 4))

    def forward(self, x):
        return x @ (self.weight * 2).t()


def _traced_and_loaded(model, x, tmp_path):
    traced = tracebridge.trace(model, x)
    path = tmp_path / "scaled.tb"
    traced.save(path)
    return traced, tracebridge.load(path)


def _fold_kept(module, x) -> None:
    """Call ``module`` twice without autograd: the second call reuses the kept values."""
    with torch.no_grad():
        module(x)
        module(x)


def test_a_source_whose_class_changes_in_place_runs_its_torch_function(tmp_path):
    # ``p.__class__ = Sub`` keeps the object, its version and its data: only its type
    # tells. Eager runs the subclass's torch function on ``weight * 2``; so must the call.
    torch.manual_seed(0)
    model = Scaled().eval()
    x = torch.randn(2, 4)
    for module in _traced_and_loaded(model, x, tmp_path):
        module.weight.__class__ = nn.Parameter
        _fold_kept(module, x)
        before = module(x)
        module.weight.__class__ = Negated
        with torch.no_grad():
            got = module(x)
            assert torch.allclose(got, -before)
            assert torch.allclose(module(x), -before)  # not kept: run again, as eager
        module.weight.__class__ = nn.Parameter  # plain again: kept again
        with torch.no_grad():
            assert torch.allclose(module(x), before)
            assert torch.allclose(module(x), before)


def test_a_source_swapped_with_another_tensor_is_seen(tmp_path):
    # torch.utils.swap_tensors keeps both Python objects and swaps what they hold: the
    # slot holds the same object, with another tensor's data (and version counter).
    torch.manual_seed(0)
    model = Scaled().eval()
    x = torch.randn(2, 4)
    for module in _traced_and_loaded(model, x, tmp_path):
        _fold_kept(module, x)
        other = nn.Parameter(torch.randn(4, 4))
        torch.utils.swap_tensors(module.weight, other)
        with torch.no_grad():
            assert torch.allclose(module(x), x @ (module.weight * 2).t())


def test_a_module_moved_by_swapping_its_tensors_is_seen(tmp_path):
    # ``.to()`` with swap_module_params_on_conversion keeps each parameter object and
    # swaps a converted tensor into it.
    torch.manual_seed(0)
    model = Scaled().eval()
    x = torch.randn(2, 4)
    before = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        for module in _traced_and_loaded(model, x, tmp_path):
            _fold_kept(module, x)
            weight = module.weight
            module.double()
            assert module.weight is weight and weight.dtype is torch.float64
            with torch.no_grad():
                got = module(x.double())
            assert got.dtype is torch.float64
            assert torch.allclose(got, x.double() @ (module.weight * 2).t())
    finally:
        torch.__future__.set_swap_module_params_on_conversion(before)


def test_a_requires_grad_flip_lets_gradients_reach_the_source(tmp_path):
    torch.manual_seed(0)
    model = Scaled().eval()
    x = torch.randn(2, 4)
    for module in _traced_and_loaded(model, x, tmp_path):
        module.weight.requires_grad_(False)
        _fold_kept(module, x)
        module.weight.requires_grad_(True)
        (grad,) = torch.autograd.grad(module(x).sum(), module.weight)
        assert torch.allclose(grad, 2 * x.sum(0).expand(4, 4))
        module.weight.requires_grad_(False)
        assert not module(x).requires_grad  # kept values again: made without autograd


class Rotary(nn.Module):
    """Angles from the input's length and a buffer: memoised by size, keyed on the
    buffer too (runtime/memo.py)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("inv_freq", torch.tensor([1.0, 0.5]))

    def forward(self, x):
        positions = torch.arange(x.shape[1], device=x.device)[None, :]
        angles = positions[..., None].float() * self.inv_freq
        return x * angles.cos() + x.flip(-1) * angles.sin()


def test_a_memo_key_whose_class_changes_in_place_runs_its_torch_function(tmp_path):
    model = Rotary()
    x = torch.randn(1, 5, 2)
    for module in _traced_and_loaded(model, x, tmp_path):
        assert "memoised by size" in module.code
        _fold_kept(module, x)
        before = model(x)
        for owner in (module, model):  # (the traced module shares the model's buffer)
            owner.inv_freq.__class__ = Negated
        with torch.no_grad():
            expected = model(x)
            assert not torch.allclose(expected, before)
            assert torch.allclose(module(x), expected)
            assert torch.allclose(module(x), expected)
        for owner in (module, model):
            owner.inv_freq.__class__ = torch.Tensor
        with torch.no_grad():
            assert torch.allclose(module(x), before)


@pytest.mark.parametrize(
    "replace",
    [
        lambda net: setattr(getattr(net, "1"), "running_var", torch.ones(1)),
        lambda net: setattr(getattr(net, "1"), "running_mean", torch.zeros(1)),
        lambda net: setattr(getattr(net, "1"), "weight", nn.Parameter(torch.ones(1))),
        lambda net: setattr(getattr(net, "1"), "bias", nn.Parameter(torch.zeros(1))),
        lambda net: setattr(getattr(net, "0"), "bias", nn.Parameter(torch.zeros(1))),
    ],
    ids=["running_var", "running_mean", "norm weight", "norm bias", "conv bias"],
)
def test_a_norm_folded_into_its_convolution_refuses_state_of_another_size(replace, tmp_path):
    # Eager's batch norm (or convolution) raises for a per-channel tensor of one element
    # where the convolution makes four channels; the folded weights would broadcast it.
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).eval()
    x = torch.randn(1, 3, 8, 8)
    for module in _traced_and_loaded(net, x, tmp_path):
        _fold_kept(module, x)
        replace(module)
        with torch.no_grad(), pytest.raises(Exception, match="invalid for input of size 1"):
            module(x)
    with torch.no_grad(), pytest.raises(RuntimeError):
        net(x)  # (the traced module shares the model's state: replaced there too)
