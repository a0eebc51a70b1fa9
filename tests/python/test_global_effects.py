"""Calls that put back or reseed a random generator, and saved-tensor hooks, inside traced
code: refused at their line where they change the numbers (trace/global_effects.py)."""

import inspect

import pytest
import torch

import tracebridge
from tracebridge.errors import UnsupportedOpError


def _line(fn, text: str) -> str:
    lines, first = inspect.getsourcelines(fn)
    offset = next(i for i, line in enumerate(lines) if text in line)
    return f"{inspect.getsourcefile(fn)}:{first + offset}"


def forked_noise(x):
    with torch.random.fork_rng():  # the fork
        noise = torch.randn_like(x)
    return x + noise


def put_back(x):
    state = torch.get_rng_state()
    a = torch.rand_like(x)
    torch.set_rng_state(state)  # the put-back
    b = torch.rand_like(x)
    return x + (a - b)


def test_a_fork_whose_block_draws_is_refused_at_its_line_and_leaves_the_generator():
    torch.manual_seed(0)
    before = torch.get_rng_state()
    with pytest.raises(UnsupportedOpError) as info:
        tracebridge.trace(forked_noise, torch.zeros(3))
    assert f"torch.random.fork_rng at {_line(forked_noise, 'the fork')}" in str(info.value)
    assert "not recorded" in str(info.value)
    assert torch.equal(torch.get_rng_state(), before)


@pytest.mark.parametrize("check_trace", [True, False])
def test_a_state_put_back_where_the_code_draws_is_refused(check_trace):
    with pytest.raises(UnsupportedOpError) as info:
        tracebridge.trace(put_back, torch.zeros(3), check_trace=check_trace)
    assert f"torch.set_rng_state at {_line(put_back, 'the put-back')}" in str(info.value)
    assert "random generator" in str(info.value)


def test_a_disabled_fork_and_a_put_back_without_draws_trace_and_stay_right():
    def disabled(x):
        with torch.random.fork_rng(enabled=False):  # puts nothing back: eager draws go on
            return x + torch.rand_like(x)

    def restores_nothing_drawn(x):
        torch.set_rng_state(torch.get_rng_state())
        return x * 2

    x = torch.zeros(3)
    traced = tracebridge.trace(disabled, x)
    torch.manual_seed(5)
    eager = [disabled(x), disabled(x)]
    torch.manual_seed(5)
    assert all(torch.equal(traced(x), e) for e in eager)
    doubled = tracebridge.trace(restores_nothing_drawn, x)
    assert torch.equal(doubled(torch.ones(4)), torch.full((4,), 2.0))


@pytest.mark.parametrize("name", ["manual_seed", "manual_seed_all", "set_rng_state_all", "seed"])
def test_cuda_seeding_in_traced_code_is_refused_before_it_runs(name):
    args = {"manual_seed": (3,), "manual_seed_all": (3,), "set_rng_state_all": ([],)}

    def seeded(x):
        getattr(torch.cuda, name)(*args.get(name, ()))
        return x + 1

    with pytest.raises(UnsupportedOpError, match=f"torch.cuda.{name} at "):
        tracebridge.trace(seeded, torch.zeros(2))


class Compressed(torch.nn.Module):
    def __init__(self, hooks):
        super().__init__()
        self.hooks = hooks
        self.l1, self.l2 = torch.nn.Linear(4, 8), torch.nn.Linear(8, 2)

    def forward(self, x):
        with self.hooks():  # the hooks
            return self.l2(torch.tanh(self.l1(x)))


def test_saved_tensor_hooks_in_forward_are_refused_at_their_line():
    def doubled():
        return torch.autograd.graph.saved_tensors_hooks(lambda t: t * 2, lambda t: t)

    with pytest.raises(UnsupportedOpError) as info:
        tracebridge.trace(Compressed(doubled), torch.randn(3, 4))
    assert f"saved_tensors_hooks at {_line(Compressed.forward, 'the hooks')}" in str(info.value)
    assert "backward" in str(info.value)


def test_save_on_cpu_traces_and_gives_eagers_gradients():
    torch.manual_seed(0)
    model, x = Compressed(torch.autograd.graph.save_on_cpu), torch.randn(3, 4)
    traced = tracebridge.trace(model, x)
    traced(x).sum().backward()
    traced_grad = model.l1.weight.grad.clone()
    model.zero_grad()
    model(x).sum().backward()
    assert torch.allclose(traced_grad, model.l1.weight.grad)


class NoisyFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x + torch.rand_like(x)

    @staticmethod
    def backward(ctx, grad):
        return grad


def test_tracebridges_own_put_backs_around_an_autograd_function_are_not_the_codes():
    def f(x):
        return NoisyFunction.apply(x) * 2

    x = torch.zeros(3)
    traced = tracebridge.trace(f, x, check_trace=False)
    torch.manual_seed(1)
    eager = f(x)
    torch.manual_seed(1)
    assert torch.equal(traced(x), eager)


def test_the_global_generator_reseeded_through_its_object_is_refused_at_the_next_draw():
    def reseeded(x):
        torch.default_generator.manual_seed(1)
        return x + torch.rand_like(x)  # the draw

    with pytest.raises(UnsupportedOpError) as info:
        tracebridge.trace(reseeded, torch.zeros(3), check_trace=False)
    where = _line(reseeded, "the draw")
    assert f"global random generator before the draw at {where}" in str(info.value)


def test_a_state_set_where_it_already_stood_changes_nothing_and_traces():
    def kept(x):
        torch.default_generator.set_state(torch.default_generator.get_state())
        return x + torch.rand_like(x)

    x = torch.zeros(3)
    traced = tracebridge.trace(kept, x)
    torch.manual_seed(2)
    eager = kept(x)
    torch.manual_seed(2)
    assert torch.equal(traced(x), eager)


def test_attention_dropout_between_draws_is_a_draw_not_a_reseed():
    def noisy(q):
        a = torch.nn.functional.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
        return a + torch.rand_like(a)

    q = torch.rand(1, 2, 4, 8)
    traced = tracebridge.trace(noisy, q, check_trace=False)
    torch.manual_seed(3)
    eager = noisy(q)
    torch.manual_seed(3)
    assert torch.equal(traced(q), eager)
