"""runtime/linear_scale.py: a linear whose output is scaled per feature by state (layer
scale) runs, in calls without autograd, as one linear of scaled weights, kept while the
state is the same; results agree with eager to rounding and follow the state."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tracebridge

pytestmark = pytest.mark.usefixtures("quiet_warnings")


class LayerScaled(nn.Module):
    """Two residual branches, each a linear (one through an evaluation dropout, one
    without bias) scaled by a vector parameter, on either side of the product."""

    def __init__(self, scale_shape=(8,), dtype=torch.float32):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.1)
        self.gamma = nn.Parameter(torch.rand(scale_shape, dtype=dtype))
        self.fc2 = nn.Linear(8, 8, bias=False)
        self.gamma2 = nn.Parameter(torch.rand(8))

    def forward(self, x):
        x = x + self.drop(self.fc(x)) * self.gamma
        return x + self.gamma2 * self.fc2(x)


def _both(model, x, tmp_path):
    traced = tracebridge.trace(model, x)
    path = tmp_path / "scaled.tb"
    traced.save(path)
    return traced, tracebridge.load(path)


def _products(module) -> int:
    with torch.no_grad():
        code = module._methods["forward"].no_grad_code
    return code.count("# mul,")


def test_a_scaled_linear_runs_as_one_linear_of_scaled_weights(tmp_path):
    torch.manual_seed(0)
    model = LayerScaled().eval()
    x = torch.randn(2, 5, 8)
    for module in _both(model, x, tmp_path):
        assert _products(module) == 0
        with torch.no_grad():
            torch.testing.assert_close(module(x), model(x), rtol=1e-6, atol=1e-6)
            frozen = tracebridge.freeze(module)
            assert torch.equal(frozen(x), module(x))
        # with autograd the graph runs as recorded: eager's results and gradients
        assert torch.equal(module(x), model(x))
        (grad,) = torch.autograd.grad(module(x).sum(), module.gamma)
        (expected,) = torch.autograd.grad(model(x).sum(), model.gamma)
        if module.gamma is model.gamma:
            torch.testing.assert_close(grad, expected)


def test_the_scaled_weights_follow_the_state(tmp_path):
    torch.manual_seed(0)
    model = LayerScaled().eval()
    x = torch.randn(2, 5, 8)
    for module in _both(model, x, tmp_path):
        reference = LayerScaled().eval()
        reference.load_state_dict(module.state_dict())
        with torch.no_grad():
            module(x)
            for owner in (module, reference):
                owner.gamma.mul_(3.0)  # in place: a new version
            torch.testing.assert_close(module(x), reference(x), rtol=1e-6, atol=1e-6)
            for owner in (module, reference):  # one element: eager broadcasts it
                owner.gamma2 = nn.Parameter(torch.tensor([0.5]))
            torch.testing.assert_close(module(x), reference(x), rtol=1e-6, atol=1e-6)
            for owner in (module, reference):  # three: eager's product raises
                owner.gamma2 = nn.Parameter(torch.ones(3))
            with pytest.raises(RuntimeError):
                reference(x)
            with pytest.raises(Exception, match="broadcast|expanded size|size"):
                module(x)


class Scaled(nn.Module):
    def __init__(self, scale_shape, dtype=torch.float32):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.gamma = nn.Parameter(torch.rand(scale_shape, dtype=dtype))

    def forward(self, x):
        return self.fc(x) * self.gamma


@pytest.mark.parametrize(
    "model",
    [
        lambda: Scaled((1, 1, 8)),  # a product of another rank may follow
        lambda: Scaled((8,), torch.float64),  # a product of another dtype
    ],
    ids=["scale of three dimensions", "scale of another dtype"],
)
def test_no_fusion_where_the_product_could_differ_from_the_linears_shape_or_dtype(model):
    torch.manual_seed(0)
    module = model().eval()
    x = torch.randn(2, 5, 8)
    traced = tracebridge.trace(module, x)
    assert _products(traced) == 1
    with torch.no_grad():
        assert torch.equal(traced(x), module(x))


class ReadTwice(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.gamma = nn.Parameter(torch.rand(8))

    def forward(self, x):
        y = self.fc(x)
        return y * self.gamma + y


class Decides(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.gamma = nn.Parameter(torch.rand(8))

    def forward(self, x):
        return (self.fc(x) * self.gamma).argmax(-1)


@pytest.mark.parametrize("cls", [ReadTwice, Decides])
def test_no_fusion_where_the_linear_is_read_elsewhere_or_the_product_decides(cls):
    torch.manual_seed(0)
    module = cls().eval()
    x = torch.randn(2, 5, 8)
    traced = tracebridge.trace(module, x)
    assert _products(traced) == 1
    with torch.no_grad():
        assert torch.equal(traced(x), module(x))
