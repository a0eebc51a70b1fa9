"""numpy random generators kept by the traced code (issue 20, items 3 and 4).

A ``np.random.Generator`` or ``np.random.RandomState`` the model keeps (an attribute, a
global of its code) draws outside torch: a trace would hold the example's draw as a
constant where eager draws anew on every call. Such a draw is refused with the
generator's name, and tracing leaves every generator's state as it found it.
"""

from __future__ import annotations

import functools
import random
import types

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


# Generators reached other ways than an attribute, a global or a closure variable
# (prober19b F4): before, a draw from one was refused only as "the trace is not stable"
# (naming nothing), with check_trace=False every call served one baked draw, and the
# generator was left advanced.
helper = types.ModuleType("rng_helper")  # a helper module whose global the code draws from
helper.rng = np.random.default_rng(20)
helper.legacy = np.random.RandomState(21)
helper.settings = {"rng": np.random.default_rng(22)}
_helper_code = """
import numpy as np
_RNG = np.random.default_rng(23)

def jitter(x):
    return x * float(_RNG.random())
"""
exec(_helper_code, vars(helper))
jitter = helper.jitter  # `from helper import jitter`: its module's global draws


class Settings:
    rng = np.random.default_rng(24)  # a class attribute
    rngs = (np.random.default_rng(34),)


SHARED_DRAW = {"draw": functools.partial(np.random.default_rng(25).normal, 0.0, 1.0)}


def _with_a_default(x, g=np.random.default_rng(26)):  # noqa: B008 (the case)
    return x * float(g.random())


def _with_a_keyword_default(x, *, g=np.random.default_rng(27)):  # noqa: B008 (the case)
    return x * float(g.random())


class Holder(nn.Module):
    """Draws from a generator kept as ``how`` says."""

    rng_on_class = np.random.default_rng(28)

    def __init__(self, how):
        super().__init__()
        self.how = how
        self.draw = functools.partial(np.random.default_rng(29).normal, 0.0, 1.0)
        self.normal = np.random.default_rng(30).normal  # a bound method
        self.bitgen = np.random.PCG64(31)
        self.rng = np.random.default_rng(32)

    def forward(self, x, g=np.random.default_rng(33)):  # noqa: B008 (the case)
        draws = {
            "partial": lambda: self.draw(),
            "bound method": lambda: self.normal(),
            "Generator(bitgen)": lambda: np.random.Generator(self.bitgen).random(),
            "bitgen.random_raw": lambda: self.bitgen.random_raw() % 100 / 100,
            "spawn": lambda: self.rng.spawn(1)[0].random(),
            "class attribute": lambda: self.rng_on_class.random(),
            "forward default": lambda: g.random(),
        }
        return x * float(draws[self.how]())


def _spawned(rng):
    return rng.bit_generator.seed_seq.n_children_spawned


FUNCTIONS = {  # traced function, the label the refusal names, generators to compare
    "helper.rng": (
        lambda x: x * float(helper.rng.random()),
        r"rng_helper\.rng",
        lambda: [helper.rng],
    ),
    "helper.legacy": (
        lambda x: x * float(helper.legacy.random_sample()),
        r"rng_helper\.legacy",
        lambda: [helper.legacy],
    ),
    "helper.settings['rng']": (
        lambda x: x * float(helper.settings["rng"].random()),
        r"rng_helper\.settings\['rng'\]",
        lambda: [helper.settings["rng"]],
    ),
    "Generator(helper.rng.bit_generator)": (
        lambda x: x * float(np.random.Generator(helper.rng.bit_generator).random()),
        r"rng_helper\.rng",
        lambda: [helper.rng],
    ),
    "imported function's global": (lambda x: jitter(x), r"rng_helper\._RNG", lambda: [helper._RNG]),
    "class attribute": (
        lambda x: x * float(Settings.rng.random()),
        r"Settings\.rng",
        lambda: [Settings.rng],
    ),
    "class attribute's tuple": (
        lambda x: x * float(Settings.rngs[0].random()),
        r"Settings\.rngs\[0\]",
        lambda: [Settings.rngs[0]],
    ),
    "partial in a global dict": (
        lambda x: x * float(SHARED_DRAW["draw"]()),
        r"SHARED_DRAW\['draw'\]",
        lambda: [SHARED_DRAW["draw"].func.__self__],
    ),
    "default": (_with_a_default, r"default argument g", lambda: [_with_a_default.__defaults__[0]]),
    "keyword default": (
        _with_a_keyword_default,
        r"default argument g",
        lambda: [_with_a_keyword_default.__kwdefaults__["g"]],
    ),
}


def _states(rngs):
    return [(_state(r), _spawned(r) if isinstance(r, np.random.Generator) else None) for r in rngs]


@pytest.mark.parametrize("check", [True, False])
@pytest.mark.parametrize("case", sorted(FUNCTIONS))
def test_a_draw_from_a_generator_the_code_reaches_another_way_is_refused_and_put_back(case, check):
    func, label, rngs = FUNCTIONS[case]
    before = _states(rngs())
    with pytest.raises(UnsupportedOpError, match=rf"drew random numbers from .*{label}"):
        tracebridge.trace(func, torch.ones(2, 3), check_trace=check)
    assert _states(rngs()) == before


HOLDER_LABELS = {
    "partial": r"self\.draw",
    "bound method": r"self\.normal",
    "Generator(bitgen)": r"self\.bitgen",
    "bitgen.random_raw": r"self\.bitgen",
    "spawn": r"self\.rng",
    "class attribute": r"rng_on_class",
    "forward default": r"default argument g",
}


def _holder_generators(model):
    return [
        model.draw.func.__self__,
        model.normal.__self__,
        np.random.Generator(model.bitgen),  # (its state is the bit generator's)
        model.rng,
        model.rng_on_class,
        type(model).forward.__defaults__[0],
    ]


@pytest.mark.parametrize("check", [True, False])
@pytest.mark.parametrize("how", sorted(HOLDER_LABELS))
def test_a_draw_from_a_generator_a_module_keeps_another_way_is_refused_and_put_back(how, check):
    model = Holder(how)
    before = _states(_holder_generators(model))
    with pytest.raises(
        UnsupportedOpError, match=rf"drew random numbers from .*{HOLDER_LABELS[how]}"
    ):
        tracebridge.trace(model, torch.ones(2, 3), check_trace=check)
    assert _states(_holder_generators(model)) == before


def test_generators_kept_other_ways_but_unused_are_traced_and_kept():
    model = Holder("partial")
    model.forward = lambda x: x * 2  # (the instance's forward: draws from none)
    before = _states(_holder_generators(model))
    traced = tracebridge.trace(model, torch.ones(2, 3), check_inputs=[torch.ones(5, 3)])
    assert torch.equal(traced(torch.ones(4, 3)), torch.full((4, 3), 2.0))
    assert _states(_holder_generators(model)) == before


class _Proxy:
    """Like reticulate's ``r`` object: any attribute asked of it runs code that may fail."""

    def __getattr__(self, name):
        raise RuntimeError(f"<text>:1:2: unexpected input ({name})")


def test_a_proxy_among_the_globals_or_attributes_is_not_asked_anything():
    """The search for generators (and the state kept around a recording) reads objects'
    own dicts without their classes' code: reticulate's ``r`` among a script's globals
    answered ``__name__`` by parsing it as R, and the trace failed. (The script's globals
    are made here: a proxy among this file's would meet pytest's own collection.)"""
    script = {"__name__": "__main__", "PROXY": _Proxy()}
    exec("def beside_a_proxy(x):\n    return x * 2 if PROXY is not None else x\n", script)  # noqa: S102
    traced = tracebridge.trace(script["beside_a_proxy"], torch.ones(3))
    assert torch.equal(traced(torch.ones(3)), torch.ones(3) * 2)

    class Holds(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proxy = _Proxy()

        def forward(self, x):
            return x + 1

    module = tracebridge.trace(Holds(), torch.ones(3))
    assert torch.equal(module(torch.ones(3)), torch.ones(3) + 1)
