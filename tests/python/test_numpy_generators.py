"""numpy random generators kept by the traced code (issue 20, items 3 and 4).

A ``np.random.Generator`` or ``np.random.RandomState`` the model keeps (an attribute, a
global of its code) draws outside torch: a trace would hold the example's draw as a
constant where eager draws anew on every call. Such a draw is refused with the
generator's name, and tracing leaves every generator's state as it found it.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import UnsupportedOpError

pytestmark = pytest.mark.usefixtures("quiet_warnings")

GLOBAL_RNG = np.random.default_rng(0)


class KeptGenerator(nn.Module):
    def __init__(self, rng, draw):
        super().__init__()
        self.rng, self.draw = rng, draw

    def forward(self, x):
        return self.draw(self.rng, x)


DRAWS = {
    "random": lambda rng, x: x * float(rng.random()),
    "integers": lambda rng, x: torch.roll(x, int(rng.integers(0, 3)), 1),
    "normal_array": lambda rng, x: x + torch.from_numpy(rng.normal(size=x.shape[1])).float(),
}
# RandomState's names for the first two
LEGACY_DRAWS = {
    **DRAWS,
    "random": lambda rng, x: x * float(rng.random_sample()),
    "integers": lambda rng, x: torch.roll(x, int(rng.randint(0, 3)), 1),
}
MAKERS = {
    "Generator": (lambda: np.random.default_rng(0), DRAWS),
    "RandomState": (lambda: np.random.RandomState(0), LEGACY_DRAWS),
}


def _state(rng):
    if isinstance(rng, np.random.RandomState):
        kind, keys, pos, *_ = rng.get_state()
        return kind, keys.tolist(), pos
    return rng.bit_generator.state


@pytest.mark.parametrize("kind", sorted(MAKERS))
@pytest.mark.parametrize("draw", sorted(DRAWS))
@pytest.mark.parametrize("check", [True, False])
def test_a_draw_from_a_kept_numpy_generator_is_refused_and_its_state_kept(kind, draw, check):
    make, draws = MAKERS[kind]
    rng = make()
    model = KeptGenerator(rng, draws[draw])
    before = _state(rng)
    with pytest.raises(
        UnsupportedOpError, match=rf"drew random numbers from self\.rng \(a numpy {kind}"
    ):
        tracebridge.trace(model, torch.ones(2, 3), check_trace=check)
    assert _state(rng) == before


def _from_a_global_generator(x):
    return x * float(GLOBAL_RNG.random())


def test_a_draw_from_a_global_numpy_generator_is_refused_naming_it():
    before = GLOBAL_RNG.bit_generator.state
    with pytest.raises(UnsupportedOpError, match="GLOBAL_RNG"):
        tracebridge.trace(_from_a_global_generator, torch.ones(2, 3))
    assert GLOBAL_RNG.bit_generator.state == before


def test_a_generator_made_in_forward_from_a_fixed_seed_draws_alike_every_call():
    def fixed(x):  # the same number on every call: a trace holds it rightly
        return x * float(np.random.default_rng(7).random())

    traced = tracebridge.trace(fixed, torch.ones(2, 3))
    assert torch.allclose(traced(torch.ones(4, 3)), fixed(torch.ones(4, 3)))


def test_a_kept_generator_left_unused_is_traced_and_kept():
    rng = np.random.default_rng(3)
    model = KeptGenerator(rng, lambda r, x: x * 2)
    before = _state(rng)
    traced = tracebridge.trace(model, torch.ones(2, 3), check_inputs=[torch.ones(5, 3)])
    assert torch.equal(traced(torch.ones(4, 3)), torch.full((4, 3), 2.0))
    assert _state(rng) == before


def test_a_python_random_instance_kept_by_the_model_is_refused_and_left_as_it_was():
    rng = random.Random(5)
    model = KeptGenerator(rng, lambda r, x: x * r.uniform(0.5, 1.5))
    before = rng.getstate()
    with pytest.raises(UnsupportedOpError, match=r"random\.uniform"):
        tracebridge.trace(model, torch.ones(2, 3))
    assert rng.getstate() == before


class Augment:
    """A plain object (no module) whose method draws from the generator it keeps."""

    def __init__(self):
        self.rng = np.random.default_rng(1)

    def apply(self, x):
        return x * float(self.rng.uniform(0.5, 1.5))


def test_a_draw_from_a_generator_kept_by_a_traced_methods_object_is_refused():
    augment = Augment()
    before = augment.rng.bit_generator.state
    with pytest.raises(UnsupportedOpError, match=r"self\.rng \(a numpy Generator"):
        tracebridge.trace(augment.apply, torch.ones(2, 3))
    assert augment.rng.bit_generator.state == before


def _draws_outside_tracing(rng, x):
    if not torch.jit.is_tracing():  # only the eager calls of the trace's checks draw
        rng.random()
    return x * 2


def test_a_generator_the_checks_eager_calls_draw_from_is_put_back():
    rng = np.random.default_rng(11)
    model = KeptGenerator(rng, _draws_outside_tracing)
    before = _state(rng)
    traced = tracebridge.trace(model, torch.ones(2, 3), check_inputs=[torch.ones(4, 3)])
    assert _state(rng) == before
    assert torch.equal(traced(torch.ones(3, 3)), torch.full((3, 3), 2.0))


class EveryState(nn.Module):
    """Dropout (torch's generator), a parameter moved in place, and a kept numpy generator
    that only eager calls draw from."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.center = nn.Parameter(torch.zeros(3))
        self.rng = np.random.default_rng(0)

    def forward(self, x):
        with torch.no_grad():
            self.center.add_(x.mean(0))
        if not torch.jit.is_tracing():
            self.rng.random()
        return torch.nn.functional.dropout(self.lin(x), 0.5, training=True) + self.center


def _every_state(model):
    return (
        torch.get_rng_state(),
        random.getstate(),
        np.random.get_state()[1].tolist(),
        model.rng.bit_generator.state,
        {k: v.clone() for k, v in model.state_dict().items()},
    )


def _same_states(a, b):
    tensors_a, tensors_b = a[4], b[4]
    return (
        torch.equal(a[0], b[0])
        and a[1:4] == b[1:4]
        and all(torch.equal(tensors_a[k], tensors_b[k]) for k in tensors_a)
    )


@pytest.mark.usefixtures("unchecked_programs")  # (the file checker refuses a parameter write)
@pytest.mark.parametrize("how", ["check", "no_check", "check_inputs", "compile"])
def test_tracing_and_compiling_leave_every_generator_and_the_model_as_they_were(how):
    model = EveryState()
    before = _every_state(model)
    x = torch.ones(2, 3)
    if how == "compile":
        tracebridge.compile(model, x, backend="reference")
    else:
        options = {"no_check": {"check_trace": False}, "check_inputs": {"check_inputs": [x]}}
        tracebridge.trace(model, x, **options.get(how, {}))
    assert _same_states(before, _every_state(model))


class HoldsAnAugment(nn.Module):
    def __init__(self):
        super().__init__()
        self.augment = Augment()  # a plain object keeping its own generator

    def forward(self, x):
        return self.augment.apply(x)


def test_a_draw_from_a_generator_of_a_plain_object_the_model_holds_is_refused():
    model = HoldsAnAugment()
    before = model.augment.rng.bit_generator.state
    with pytest.raises(UnsupportedOpError, match=r"self\.augment\.rng \(a numpy Generator"):
        tracebridge.trace(model, torch.ones(2, 3))
    assert model.augment.rng.bit_generator.state == before
