"""Tracing leaves the model and every RNG as they were (issue 20, item 4).

``trace`` runs the user's code many times: the recording, the other training mode,
check_trace and check_inputs, the size-1 specialisation probes, and ``compile`` traces and
checks again. None of it may change the global RNG state (CPU and every CUDA device), a
parameter, a buffer (BatchNorm statistics), a training flag, or an attribute the model's
code sets on itself (a cache rebuilt for a longer sequence).
"""

from __future__ import annotations

import contextlib
import random

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.backends import compile as tb_compile

# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


class DropPath(nn.Module):
    """timm's stochastic depth: a Bernoulli draw per sample in training."""

    def forward(self, x):
        if not self.training:
            return x
        keep = x.new_empty((x.shape[0],) + (1,) * (x.dim() - 1)).bernoulli_(0.8)
        return x * keep / 0.8


class Noisy(nn.Module):
    """BatchNorm, dropout, stochastic depth, a random draw and a size comparison (so that
    the size-1 specialisation probes run)."""

    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(4)
        self.lin = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.5)
        self.path = DropPath()

    def forward(self, x):
        h = self.lin(self.bn(x))
        if h.shape[0] > 1:
            h = h + 1
        return self.path(self.drop(h)) + 0.1 * torch.randn_like(h)


def _snapshot(module: nn.Module):
    state = {k: v.detach().clone() for k, v in module.state_dict().items()}
    modes = [m.training for m in module.modules()]
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []
    return state, modes, torch.get_rng_state(), cuda


def _assert_unchanged(before, module: nn.Module):
    state, modes, rng, cuda = before
    now = _snapshot(module)
    assert now[0].keys() == state.keys()
    for name, value in state.items():
        assert torch.equal(now[0][name], value), f"{name} changed"
    assert now[1] == modes, "a training flag changed"
    assert torch.equal(now[2], rng), "the CPU RNG state changed"
    assert len(now[3]) == len(cuda)
    for a, b in zip(now[3], cuda):
        assert torch.equal(a, b), "a CUDA RNG state changed"


TRACE_OPTIONS = [
    {},
    {"check_inputs": [(torch.randn(5, 4),), (torch.randn(2, 4),)]},
    {"check_trace": False},
    {"respect_mode": True, "check_inputs": [(torch.randn(5, 4),)]},
]


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("options", TRACE_OPTIONS, ids=["default", "check", "nocheck", "both"])
def test_trace_leaves_rng_and_model_as_they_were(training, options):
    torch.manual_seed(0)
    model = Noisy().train(training)
    x = torch.randn(3, 4)
    before = _snapshot(model)
    traced = tracebridge.trace(model, x, **options)
    _assert_unchanged(before, model)
    # The trace still draws its own random numbers on a call, as eager does.
    assert traced(x).shape == (3, 4)


def test_tracing_a_function_leaves_the_rng_as_it_was():
    def f(x):
        return torch.nn.functional.dropout(x, 0.5) + torch.rand_like(x)

    x, check = torch.randn(3, 4), torch.randn(2, 4)
    rng = torch.get_rng_state()
    tracebridge.trace(f, x, check_inputs=[(check,)])
    assert torch.equal(torch.get_rng_state(), rng)


@pytest.mark.parametrize("backend", ["reference", "inductor"])
def test_compile_leaves_rng_and_model_as_they_were(backend):
    model = Noisy().eval()
    x = torch.randn(3, 4)
    before = _snapshot(model)
    compiled = tb_compile(model, (x,), backend=backend)
    _assert_unchanged(before, model)
    assert compiled(x).shape == (3, 4)


class RotaryCache(nn.Module):
    """transformers' older rotary embedding: a cos table rebuilt (register_buffer again)
    when a longer sequence comes, and its length kept on ``self``."""

    def __init__(self):
        super().__init__()
        self._build(4)

    def _build(self, length):
        self.max_cached = length
        angles = torch.arange(length).float()
        self.register_buffer("cos_cached", angles.cos(), persistent=False)

    def forward(self, x):
        n = x.shape[1]
        if n > self.max_cached:
            self._build(n)
        self.last_input = x  # a debugging attribute set in forward
        return x * self.cos_cached[:n]


def test_attributes_the_traced_code_sets_are_put_back(tmp_path):
    model = RotaryCache()
    cache = model.cos_cached
    traced = tracebridge.trace(model, torch.randn(2, 8))
    # The module is as the user had it: the same buffer object, no new attribute, and no
    # traced size left on it for the next trace to trip on.
    assert model.cos_cached is cache and model.max_cached == 4
    assert type(model.max_cached) is int
    assert not hasattr(model, "last_input")
    path = tmp_path / "rotary.tb"
    traced.save(path)
    loaded = tracebridge.load(path)
    for length in (6, 8, 11):
        x = torch.randn(3, length)
        expected = RotaryCache()(x)
        assert torch.allclose(traced(x), expected)
        assert torch.equal(loaded(x), traced(x))


class PythonRandomDrop(nn.Module):
    """Draws from Python's generator and uses the draw only in training (as MusicGen's
    layer drop does in evaluation too): the trace refuses a use of the draw
    (trace/python_random.py), and tracing must not move the generator."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        drop = random.random()  # noqa: F841 - drawn as the library does, used in training only
        return self.lin(x)


def test_pythons_generator_is_left_as_it_was():
    model = PythonRandomDrop()
    x, check = torch.randn(3, 4), torch.randn(2, 4)
    random.seed(1)
    tracebridge.trace(model, x, check_inputs=[(check,)])
    after = random.random()
    random.seed(1)
    assert after == random.random()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_trace_leaves_every_cuda_rng_as_it_was():
    model = Noisy().cuda().train()
    x, check = torch.randn(3, 4, device="cuda"), torch.randn(5, 4, device="cuda")
    before = _snapshot(model)
    tracebridge.trace(model, x, check_inputs=[(check,)])
    _assert_unchanged(before, model)


class KeepsTensorsByHand(nn.Module):
    """State outside the buffer table, written in place by forward: a plain tensor
    attribute, a tensor in a dict attribute, one in a list."""

    def __init__(self):
        super().__init__()
        self.calls = torch.zeros(())
        self.stats = {"rows": torch.zeros(())}
        self.history = [torch.zeros(2)]
        self.register_buffer("seen", torch.zeros(()))

    def forward(self, x):
        self.calls.add_(1)
        self.stats["rows"].add_(x.shape[0])
        self.history[0].add_(1)
        self.seen.add_(1)
        return x * self.calls + self.stats["rows"]


@pytest.mark.parametrize("check_trace", [True, False])
def test_tensors_kept_by_hand_are_put_back_after_tracing(check_trace):
    # The trace is refused (it would write a constant on every call); tracing ran the code
    # several times meanwhile, and each write is undone.
    model = KeepsTensorsByHand()
    with pytest.raises(tracebridge.errors.ArtifactError, match="writes constant 'calls'"):
        tracebridge.trace(model, torch.ones(3, 4), check_trace=check_trace)
    for tensor in (model.calls, model.stats["rows"], model.history[0], model.seen):
        assert torch.count_nonzero(tensor) == 0


class MovingCenter(nn.Module):
    """DINO's center: a frozen parameter the forward moves in place."""

    def __init__(self):
        super().__init__()
        self.center = nn.Parameter(torch.zeros(3), requires_grad=False)

    def forward(self, x):
        with torch.no_grad():
            self.center.mul_(0.9).add_(0.1 * x.mean(0))
        return x - self.center


def test_a_frozen_parameter_moved_by_forward_is_put_back_after_tracing():
    model = MovingCenter()
    with contextlib.suppress(tracebridge.TraceError):  # refused or not: the model as it was
        tracebridge.trace(model, torch.ones(2, 3))
    assert torch.count_nonzero(model.center) == 0


def _scaled_by_numpy(x):
    import numpy as np

    return x * float(np.random.uniform(0.5, 1.5))  # augmentation drawn with numpy


def _rolled_by_numpy(x):
    from numpy.random import randint

    return torch.roll(x, int(randint(0, 3)), 1)


@pytest.mark.parametrize("fn", [_scaled_by_numpy, _rolled_by_numpy])
def test_a_number_drawn_from_numpys_generator_is_refused_at_its_line(fn):
    import numpy as np

    state = np.random.get_state()[1].copy()
    with pytest.raises(tracebridge.errors.UnsupportedOpError, match="numpy.random"):
        tracebridge.trace(fn, torch.ones(2, 3), check_trace=False)
    assert (np.random.get_state()[1] == state).all()  # nothing was drawn
    assert np.random.uniform.__module__ != "tracebridge.trace.python_random"
