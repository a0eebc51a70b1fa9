"""Calls under a torch dispatch mode: the mode sees the ops eager runs, and nothing made
under it is kept.

A traced or loaded object keeps values made from its state alone (folds, memos, fused
convolutions and linears: runtime/folding.py, memo.py, concat_linear.py). A dispatch
mode (``FakeTensorMode`` for shape propagation, a mode that counts or changes ops) makes
other values from the same state: a fold made under it was a fake tensor served to every
later plain call, and a fold made before it hid its ops from the mode (prober24a F1).
Under a dispatch mode, as under a torch function mode or autocast, kept values are
neither read nor written, and the call runs the graph as traced, unfused.
"""

from __future__ import annotations

import copy
import io

import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

import tracebridge


class Doubling(TorchDispatchMode):
    """Doubles the first result of every op whose name holds one of ``names``."""

    def __init__(self, *names: str) -> None:
        super().__init__()
        self.names = names

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if any(name in func.__name__ for name in self.names):
            if isinstance(out, tuple):
                return (out[0] * 2, *out[1:])
            return out * 2
        return out


class ScaledByBuffer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.randn(4))

    def forward(self, x):
        return x * (self.scale * 2.0).sigmoid()  # a value of state alone: folded


class ConvBn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-1, 1)
            self.bn.running_var.uniform_(0.5, 2)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))  # folded into one convolution


class ThreeProjections(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 4)

    def forward(self, x):
        return self.q(x).sigmoid() + self.k(x), self.v(x)  # one concatenated linear


class CausalMask(nn.Module):
    def forward(self, x):
        n = x.shape[1]
        mask = torch.ones(n, n).tril().sigmoid()  # a value of sizes alone: memoised
        return x @ mask


def _both(module: nn.Module, example: tuple):
    """The fresh trace and the loaded artifact of ``module``."""
    traced = tracebridge.trace(copy.deepcopy(module), example)
    buffer = io.BytesIO()
    tracebridge.save(traced, buffer)
    return {"traced": traced, "loaded": tracebridge.load(buffer.getvalue())}


def _same(a, b) -> bool:
    if isinstance(a, tuple):
        return all(_same(p, q) for p, q in zip(a, b, strict=True))
    return type(a) is type(b) and torch.allclose(a, b, atol=1e-6)


CASES = {
    "fold": (ScaledByBuffer, (torch.randn(3, 4),), ("sigmoid",)),
    "conv_bn": (ConvBn, (torch.randn(1, 3, 6, 6),), ("batch_norm",)),
    "concat_linear": (ThreeProjections, (torch.randn(2, 8),), ("sigmoid", "addmm")),
    "memo": (CausalMask, (torch.randn(2, 5),), ("sigmoid",)),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("kind", ["traced", "loaded"])
def test_a_dispatch_mode_sees_eagers_ops_before_and_after_plain_calls(case, kind):
    make, example, names = CASES[case]
    torch.manual_seed(0)
    eager = make().eval()
    runner = _both(eager, example)[kind].eval()
    with torch.no_grad():
        for round_ in range(2):  # in the mode first, then plain, then in it again
            with Doubling(*names):
                expected = eager(*example)
                got = runner(*example)
            assert _same(got, expected), f"{case}, {kind}, round {round_}, in the mode"
            assert _same(runner(*example), eager(*example)), f"{case}, {kind}: plain call"


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_call_under_fake_tensor_mode_keeps_no_fake_value(case):
    make, example, _ = CASES[case]
    torch.manual_seed(0)
    eager = make().eval()
    for kind, runner in _both(eager, example).items():
        with torch.no_grad():
            with FakeTensorMode(allow_non_fake_inputs=True) as mode:
                fake = runner(*(mode.from_tensor(x) for x in example))
            leaves = fake if isinstance(fake, tuple) else (fake,)
            assert all(isinstance(t, FakeTensor) for t in leaves)
            for _ in range(2):
                got = runner(*example)
                leaves = got if isinstance(got, tuple) else (got,)
                assert not any(isinstance(t, FakeTensor) for t in leaves), f"{case}, {kind}"
                assert _same(got, eager(*example)), f"{case}, {kind}"
