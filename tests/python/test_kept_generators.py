"""torch generators kept by the traced code: a random op's ``generator=`` (gen20).

``torch.rand(n, generator=self.g)`` in a module's forward draws from ``self.g``; the
trace draws from that very generator, so a reseed reaches it and every call gives eager's
numbers; tracing leaves the generator's state as it found it. A generator the trace
cannot keep (made in the call, passed in, reseeded inside the call) is refused.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import TraceError, UnsupportedOpError

pytestmark = pytest.mark.usefixtures("quiet_warnings")

GLOBAL_GENERATOR = torch.Generator().manual_seed(11)


class Noisy(nn.Module):
    def __init__(self):
        super().__init__()
        self.g = torch.Generator().manual_seed(3)

    def forward(self, x):
        return x + torch.rand(x.shape, generator=self.g)


class EveryDraw(nn.Module):
    """Each random op that takes a generator, drawing from a sub-module's and a global."""

    def __init__(self):
        super().__init__()
        self.noise = torch.Generator().manual_seed(4)

    def forward(self, x):
        g = self.noise
        y = torch.empty_like(x).uniform_(-1, 1, generator=g)
        y = y + torch.randn(x.shape, generator=g) + torch.normal(x, 1.0, generator=g)
        y = y + torch.bernoulli(torch.full_like(x, 0.5), generator=g)
        z = x.clone()
        z.normal_(generator=g)
        z.exponential_(generator=g)
        z.bernoulli_(0.3, generator=g)
        w = torch.randint(0, 10, x.shape, generator=g).float()
        p = torch.poisson(x.abs() + 1, g)
        r = torch.rand_like(x, generator=g) + torch.randn_like(x, generator=g)
        m = torch.multinomial(x.abs() + 0.1, 2, generator=g).float().sum()
        q = torch.randperm(5, generator=g).float().sum()
        rr = x.clone().random_(0, 5, generator=g)
        return y + z + w + p + r + m + q + rr + torch.rand(x.shape, generator=GLOBAL_GENERATOR)


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = EveryDraw()

    def forward(self, x):
        return self.inner(x) * 2


def _calls(fn, x, n=3):
    return [fn(x.clone()) for _ in range(n)]


def _assert_same(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("runtime", ["codegen", "interpreter"])
def test_trace_draws_from_the_module_generator(runtime):
    m = Noisy()
    traced = tracebridge.trace(m, torch.zeros(2), runtime=runtime)
    m.g.manual_seed(5)
    got = _calls(traced, torch.zeros(3))
    m.g.manual_seed(5)
    want = _calls(m, torch.zeros(3))
    _assert_same(got, want)
    assert not torch.equal(got[0], got[1])  # each call draws on


@pytest.mark.parametrize("runtime", ["codegen", "interpreter"])
def test_every_random_op_takes_a_kept_generator(runtime):
    m = Outer()
    noise, kept_global = m.inner.noise.get_state(), GLOBAL_GENERATOR.get_state()
    traced = tracebridge.trace(m, torch.ones(3), check_inputs=[(torch.ones(5),)], runtime=runtime)
    # the recording, the checks and the size probes left both generators as they were
    assert torch.equal(m.inner.noise.get_state(), noise)
    assert torch.equal(GLOBAL_GENERATOR.get_state(), kept_global)
    assert sorted(traced.program.generators) == ["generator0", "inner.noise"]
    assert traced.program.generators["inner.noise"] is m.inner.noise
    m.inner.noise.manual_seed(7)
    GLOBAL_GENERATOR.manual_seed(8)
    got = _calls(traced, torch.ones(4))
    m.inner.noise.manual_seed(7)
    GLOBAL_GENERATOR.manual_seed(8)
    want = _calls(m, torch.ones(4))
    _assert_same(got, want)
    GLOBAL_GENERATOR.set_state(kept_global)


def test_a_closure_generator_of_a_traced_function():
    g = torch.Generator().manual_seed(1)

    def f(x):
        return x * torch.randn(x.shape, generator=g)

    traced = tracebridge.trace(f, torch.ones(2))
    assert list(traced.program.generators.values()) == [g]
    g.manual_seed(2)
    got = _calls(traced, torch.ones(3))
    g.manual_seed(2)
    _assert_same(got, _calls(f, torch.ones(3)))


def test_the_graph_names_the_generator():
    traced = tracebridge.trace(Noisy(), torch.zeros(2))
    assert "rand(" in traced.graph and "generator=generator('g')" in traced.graph


def test_the_global_generator_passed_by_name_is_the_global_generator():
    class Default(nn.Module):
        def forward(self, x):
            return x + torch.rand(x.shape, generator=torch.default_generator)

    m = Default()
    traced = tracebridge.trace(m, torch.zeros(2))
    assert traced.program.generators == {}
    torch.manual_seed(0)
    got = _calls(traced, torch.zeros(2))
    torch.manual_seed(0)
    _assert_same(got, _calls(m, torch.zeros(2)))


def test_a_generator_set_anew_on_the_module_is_the_one_drawn_from():
    m = Noisy()
    traced = tracebridge.trace(m, torch.zeros(2))
    m.g = torch.Generator().manual_seed(9)  # what eager code reads from now on
    got = _calls(traced, torch.zeros(2))
    m.g = torch.Generator().manual_seed(9)
    _assert_same(got, _calls(m, torch.zeros(2)))
    m.g = None  # eager then draws from the global generator
    torch.manual_seed(1)
    got = _calls(traced, torch.zeros(2))
    torch.manual_seed(1)
    _assert_same(got, _calls(m, torch.zeros(2)))


def test_a_refused_specialisation_puts_the_generator_back():
    class Squeeze(nn.Module):
        def __init__(self):
            super().__init__()
            self.g = torch.Generator().manual_seed(0)

        def forward(self, x):
            r = torch.rand(x.shape, generator=self.g)
            return (x + r).squeeze(0)  # a size-1 batch takes another graph

    m = Squeeze()
    traced = tracebridge.trace(m, torch.zeros(3, 2))
    for batch in (1, 4, 1):
        m.g.manual_seed(batch)
        got = _calls(traced, torch.zeros(batch, 2), 2)
        m.g.manual_seed(batch)
        _assert_same(got, _calls(m, torch.zeros(batch, 2), 2))


def test_a_generator_made_in_the_call_is_refused():
    class Made(nn.Module):
        def forward(self, x):
            g = torch.Generator().manual_seed(0)
            return x + torch.rand(x.shape, generator=g)

    with pytest.raises(UnsupportedOpError, match=r"cannot keep \(at .*test_kept_generators"):
        tracebridge.trace(Made(), torch.zeros(2))


def test_a_generator_passed_in_is_refused():
    class Given(nn.Module):
        def forward(self, x, g):
            return x + torch.rand(x.shape, generator=g)

    with pytest.raises(TraceError, match="type Generator"):
        tracebridge.trace(Given(), (torch.zeros(2), torch.Generator()))


class ReseedBefore(Noisy):
    def forward(self, x):
        self.g.manual_seed(0)  # the same noise on every call
        return x + torch.rand(x.shape, generator=self.g)


class ReseedAfter(Noisy):
    def forward(self, x):
        y = x + torch.rand(x.shape, generator=self.g)
        self.g.manual_seed(3)
        return y


@pytest.mark.parametrize(
    ("cls", "when"), [(ReseedBefore, "before the draw at"), (ReseedAfter, "after its last draw")]
)
def test_a_state_set_in_the_call_is_refused(cls, when):
    m = cls()
    state = m.g.get_state()
    with pytest.raises(UnsupportedOpError, match=f"generator self.g {when}"):
        tracebridge.trace(m, torch.zeros(2))
    assert torch.equal(m.g.get_state(), state)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_cuda_generator():
    class CudaNoisy(nn.Module):
        def __init__(self):
            super().__init__()
            self.g = torch.Generator(device="cuda").manual_seed(3)

        def forward(self, x):
            return x + torch.randn(x.shape, generator=self.g, device=x.device)

    m = CudaNoisy()
    state = m.g.get_state()
    traced = tracebridge.trace(m, torch.zeros(2, device="cuda"))
    assert torch.equal(m.g.get_state(), state)
    m.g.manual_seed(5)
    got = _calls(traced, torch.zeros(3, device="cuda"))
    m.g.manual_seed(5)
    _assert_same(got, _calls(m, torch.zeros(3, device="cuda")))
