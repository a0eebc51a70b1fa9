"""Patterns found by the held-out sweep's eleventh round (benchmarks/heldout_eleventh.py),
on small hand-written modules: what the trace cannot hold is refused at the line that does
it, with the reason, instead of a trace check that only says the outputs differ."""

from __future__ import annotations

import functools
import inspect
import io
import warnings

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import GuardError, UnsupportedOpError


def _line_of(fn, text: str) -> str:
    """``file:line`` of the first line of ``fn``'s source that contains ``text``."""
    lines, first = inspect.getsourcelines(fn)
    for offset, line in enumerate(lines):
        if text in line:
            return f"{inspect.getsourcefile(fn)}:{first + offset}"
    raise AssertionError(f"{text!r} not in {fn.__qualname__}")


class SeededNoise(nn.Module):
    """Fixed noise drawn under fork_rng with its own seed."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        with torch.random.fork_rng():
            torch.manual_seed(1234)
            noise = torch.randn_like(x)
        return self.lin(x + 0.1 * noise)


class ForkedOnly(nn.Module):
    """fork_rng around code that draws nothing: its restore is no seeding."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        with torch.random.fork_rng():
            y = self.lin(x)
        return y.relu()


class Forces(nn.Module):
    """An energy and its gradient with torch.autograd.grad inside forward."""

    def __init__(self):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))

    def forward(self, pos):
        with torch.enable_grad():
            pos = pos.detach().requires_grad_(True)
            energy = self.mlp(pos).sum()
            (grad,) = torch.autograd.grad(energy, pos)
        return energy.detach(), -grad


class Backward(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 1)

    def forward(self, x):
        with torch.enable_grad():
            x = x.detach().requires_grad_(True)
            self.lin(x).sum().backward()
        return x.grad


@pytest.mark.parametrize("name", ["torch.manual_seed", "torch.random.manual_seed", "torch.seed"])
def test_seeding_the_global_generator_in_traced_code_is_refused_at_its_line(name):
    owner = torch.random if name.startswith("torch.random.") else torch
    attr = name.rsplit(".", 1)[1]

    def f(x):
        getattr(owner, attr)(*([7] if "manual" in attr else []))  # the seeding line
        return x + torch.randn_like(x)

    with pytest.raises(UnsupportedOpError) as info:
        tracebridge.trace(f, torch.randn(2, 3))
    message = str(info.value)
    assert f"cannot record {name} at {_line_of(f, 'the seeding line')}" in message
    assert "not recorded" in message and "generator" in message


def test_fork_rng_with_a_seed_inside_forward_is_refused_naming_the_seed():
    model = SeededNoise().eval()
    with pytest.raises(UnsupportedOpError) as info:
        tracebridge.trace(model, torch.randn(2, 4))
    assert _line_of(SeededNoise.forward, "torch.manual_seed(1234)") in str(info.value)


def test_seeding_outside_the_trace_and_a_bare_fork_rng_still_work():
    model = ForkedOnly().eval()
    torch.manual_seed(3)  # outside any trace: the real function
    state = torch.get_rng_state()
    traced = tracebridge.trace(model, torch.randn(2, 4))
    x = torch.randn(5, 4)
    assert torch.equal(traced(x), model(x))
    torch.manual_seed(3)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.manual_seed is not None and torch.manual_seed.__module__ == "torch.random"


def test_autograd_grad_in_forward_is_refused_at_its_line():
    with pytest.raises(UnsupportedOpError) as info:
        tracebridge.trace(Forces().eval(), torch.randn(2, 5, 3))
    message = str(info.value)
    where = _line_of(Forces.forward, "torch.autograd.grad(")
    assert f"cannot record torch.autograd.grad at {where}" in message
    assert "constant" in message and "forward operations only" in message


def test_backward_in_forward_is_refused_at_its_line():
    with pytest.raises(UnsupportedOpError) as info:
        tracebridge.trace(Backward().eval(), torch.randn(2, 3))
    where = _line_of(Backward.forward, ".backward()")
    assert f"cannot record Tensor.backward at {where}" in str(info.value)


def test_autograd_after_tracing_is_the_real_one():
    model = Forces().eval()
    with pytest.raises(UnsupportedOpError):
        tracebridge.trace(model, torch.randn(1, 2, 3))
    pos = torch.randn(1, 2, 3)
    energy, force = model(pos)  # eager, after the refused trace: autograd works
    pos2 = pos.clone().requires_grad_(True)
    (expected,) = torch.autograd.grad(model.mlp(pos2).sum(), pos2)
    assert torch.allclose(force, -expected)
    assert torch.autograd.grad.__module__ == "torch.autograd"


# --- sizes formatted by "literal %s" % (...): messages, not decisions ---------------------


def _message_in_a_local(x):
    msg = "expected (batch, dim), got %s of %s" % (x.shape[0], tuple(x.shape))  # noqa: UP031
    assert x.dim() == 2, msg
    return x.cumsum(1)


def _printed(x):
    print("tokens: %s" % (x.shape[0] * x.shape[1],), file=io.StringIO())  # noqa: UP031
    return x.cumsum(1)


def _decides(x):
    if "%s" % (x.shape[1],) == "4":  # noqa: UP031
        return x * 2
    return x * 3


@pytest.mark.parametrize("fn", [_message_in_a_local, _printed], ids=["assert msg", "print"])
def test_percent_formatted_sizes_in_messages_keep_the_trace_general(fn):
    # "literal %s" % (args,) is compiled as an f-string whose formatting instruction sits
    # at the argument inside the tuple: it used to be taken as text going elsewhere and
    # fixed the sizes (GuardError at another batch).
    traced = tracebridge.trace(fn, torch.randn(2, 4))
    for shape in [(2, 4), (3, 5), (1, 1)]:
        x = torch.randn(*shape)
        assert torch.equal(traced(x), fn(x))


def test_percent_formatted_size_that_decides_is_still_guarded():
    traced = tracebridge.trace(_decides, torch.randn(2, 4))
    assert torch.equal(traced(torch.ones(3, 4)), torch.full((3, 4), 2.0))
    with pytest.raises(GuardError) as info:
        traced(torch.ones(3, 5))
    assert _line_of(_decides, 'if "%s"') in str(info.value)


# --- a tensor in the key of a functools cache ---------------------------------------------


class CachedNorm(nn.Module):
    """A weight normalised once per weight object by an lru_cache'd method."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 4))

    @functools.cache  # noqa: B019 - the pattern under test
    def normed(self, weight):
        return weight / weight.norm()

    def forward(self, x):
        return x @ self.normed(self.weight)


@pytest.mark.parametrize("eager_first", [False, True], ids=["fresh", "after an eager call"])
def test_a_tensor_keyed_functools_cache_is_traced_through(eager_first):
    # A hit handed the trace a stored tensor: one computed by an earlier eager call (a
    # constant), or by the trace's first recording, so that the check's second recording
    # differed and the model was refused as "not stable".
    model = CachedNorm()
    if eager_first:
        model(torch.randn(1, 4))
    traced = tracebridge.trace(model, torch.randn(2, 4))
    x = torch.randn(3, 4)
    assert torch.allclose(traced(x), x @ (model.weight / model.weight.norm()))
    assert torch.allclose(model(x), traced(x))  # the model's own cache still serves eager
    with torch.no_grad():
        model.weight.add_(1.0)  # the graph reads the weight, it holds no copy of it
    assert torch.allclose(traced(x), x @ (model.weight / model.weight.norm()))


# --- "%d" % size: text Python makes without asking the traced number ------------------------


class PercentKeyedHeads(nn.Module):
    """One head per length, picked by a key made with "%d" (read in C: no guard possible)."""

    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({"4": nn.Linear(3, 2), "6": nn.Linear(3, 2)})

    def forward(self, x):
        b, n, _ = x.shape
        key = "%d" % n  # noqa: UP031 - the pattern under test
        return self.heads[key](x.mean(1))


class PercentInMessages(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2)

    def forward(self, x):
        n = x.shape[1]
        assert n > 0, "length %d" % n  # noqa: UP031
        print("length %5d" % (n,), file=io.StringIO())  # noqa: UP031
        return self.lin(x).sum(1) * n


def test_a_size_formatted_with_percent_d_into_a_key_is_guarded_at_the_size_read():
    # Was silently wrong: the key was the example's ("4"), and a call of length 6 ran the
    # head of length 4 without an error. Then refused; now the size is guarded where it
    # is read, naming the format's line (Python reads the number in C there).
    model = PercentKeyedHeads().eval()
    traced = tracebridge.trace(model, torch.randn(2, 4, 3))
    x = torch.randn(3, 4, 3)
    assert torch.equal(traced(x), model(x))
    with pytest.raises(GuardError) as info:
        traced(torch.randn(2, 6, 3))
    assert _line_of(PercentKeyedHeads.forward, 'key = "%d" % n') in str(info.value)


def test_a_size_formatted_with_percent_d_into_messages_stays_general():
    model = PercentInMessages().eval()
    traced = tracebridge.trace(model, torch.randn(2, 4, 3))
    for shape in [(3, 6, 3), (1, 1, 3)]:
        x = torch.randn(*shape)
        assert torch.allclose(traced(x), model(x))


def _compared(x):
    if "%d" % x.shape[1] == "4":  # noqa: UP031
        return x * 2
    return x


def _looked_up(x):
    table = {"4": 2.0, "6": 3.0}
    return x * table.get("%d" % (x.shape[1],), 1.0)  # noqa: UP031


def _measured(x):
    return x * (5.0 if len("%*d" % (x.shape[1], 7)) == 6 else 1.0)  # noqa: UP031 - a width


@pytest.mark.parametrize(
    "fn", [_compared, _looked_up, _measured], ids=["compared", "dict.get", "len of a width"]
)
def test_percent_d_text_that_picks_is_guarded(fn):
    traced = tracebridge.trace(fn, torch.randn(2, 4))
    x = torch.randn(3, 4)
    assert torch.equal(traced(x), fn(x))
    with pytest.raises(GuardError, match=r"x.shape\[1\] == 4"):
        traced(torch.randn(2, 6))


def test_percent_d_of_plain_numbers_is_not_refused():
    class Blocks(nn.Module):
        def __init__(self):
            super().__init__()
            self.block0, self.block1 = nn.Linear(3, 3), nn.Linear(3, 3)

        def forward(self, x):
            for i in range(2):
                x = getattr(self, "block%d" % i)(x)  # noqa: UP031
            return x * x.shape[0]

    model = Blocks().eval()
    traced = tracebridge.trace(model, torch.randn(2, 3))
    x = torch.randn(5, 3)
    assert torch.allclose(traced(x), model(x))


# --- state names with parts that are reserved words ----------------------------------------


class ReservedWordBlocks(nn.Module):
    """timm's Inception-ResNet keeps blocks in ``self.repeat`` (an R reserved word); other
    code names sub-modules ``next``, or ``in`` through add_module (a Python keyword)."""

    def __init__(self):
        super().__init__()
        self.repeat = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
        self.add_module("next", nn.Linear(3, 3))
        self.add_module("in", nn.Linear(3, 2))

    def forward(self, x):
        return getattr(self, "in")(self.next(self.repeat(x)))


def test_state_names_with_reserved_words_as_parts_save_and_load(tmp_path):
    # Was refused at save ("state name 'repeat.0.weight' has the part 'repeat', which every
    # loaded module already has as an attribute"): reserved words are refused as method
    # names, which are called by name, not as parts of a state name.
    model = ReservedWordBlocks().eval()
    traced = tracebridge.trace(model, torch.randn(2, 3))
    path = tmp_path / "blocks.tb"
    traced.save(path)
    loaded = tracebridge.load(path)
    x = torch.randn(5, 3)
    assert torch.equal(loaded(x), traced(x)) and torch.allclose(loaded(x), model(x))
    assert {"repeat.0.weight", "next.weight", "in.bias"} <= set(loaded.state_dict())


class PercentPlainNextToSizes(nn.Module):
    """``%d`` of plain ints (a module list's length, a rank) in a function that reads sizes
    elsewhere: nothing traced is formatted (was refused at the format's line)."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])
        self.scale = {"blocks_2/2d": 2.0}

    def forward(self, x):
        key = "blocks_%d/%dd" % (len(self.blocks), x.dim())  # noqa: UP031
        return x.reshape(x.shape[0], -1) * self.scale[key]


class PercentOfASizeThroughLocals(nn.Module):
    def forward(self, x):
        n = x.shape[0]
        m = n * 2
        key = "n%d" % m  # noqa: UP031 - the pattern under test
        return x * {"n4": 1.0, "n6": 3.0}[key]


def test_percent_d_of_plain_ints_next_to_size_reads_is_not_refused():
    model = PercentPlainNextToSizes().eval()
    traced = tracebridge.trace(model, torch.randn(2, 4))
    x = torch.randn(5, 4)
    assert torch.equal(traced(x), model(x))


def test_a_size_reaching_a_percent_d_key_through_locals_is_guarded_at_the_format():
    traced = tracebridge.trace(PercentOfASizeThroughLocals().eval(), torch.randn(2, 4))
    with pytest.raises(GuardError) as info:
        traced(torch.randn(3, 4))
    assert _line_of(PercentOfASizeThroughLocals.forward, 'key = "n%d" % m') in str(info.value)


def _key_of(n) -> str:
    return "h%d" % n  # noqa: UP031 - the pattern under test: formatted in another function


class HeadByHelperKey(nn.Module):
    """A head picked by a key a helper formats with ``%d``: Python reads the size in C, in
    another function; the number is followed there and guarded at the format."""

    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({"h3": nn.Linear(4, 4), "h5": nn.Linear(4, 4)})

    def forward(self, x):
        return self.heads[_key_of(x.shape[0])](x)


def test_a_size_formatted_with_percent_d_by_a_helper_is_guarded_there():
    model = HeadByHelperKey()
    traced = tracebridge.trace(model, torch.randn(3, 4))
    assert torch.equal(traced(torch.ones(3, 4)), model(torch.ones(3, 4)))
    with pytest.raises(GuardError) as info:
        traced(torch.randn(5, 4))
    assert _line_of(_key_of, 'return "h%d" % n') in str(info.value)


def test_a_size_the_trace_refuses_as_the_code_does_is_not_warned_of():
    class Even(nn.Module):
        def forward(self, x):
            assert x.shape[0] % 2 == 0, "even batches only"
            return x * 2

    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        traced = tracebridge.trace(Even(), torch.randn(4, 3))
    assert not [w for w in rec if "the trace answers that call" in str(w.message)]
    with pytest.raises(GuardError):
        traced(torch.randn(5, 3))
