"""Calls without autograd run in inference mode inside, and give eager's tensors out.

runtime/lean.py: the generated code for calls under ``torch.no_grad()`` enters
``torch.inference_mode()`` for the values that never leave the call, and leaves it for the
ops that make memory an output shares. What the caller sees must be what eager gives: the
same bits, normal tensors (writable in place, usable by autograd later), the same
aliasing between outputs, inputs and state, the caller's modes put back on every exit.
"""

from __future__ import annotations

import threading

import pytest
import torch
from torch import nn

from tracebridge.errors import GuardError
from tracebridge.runtime import folding, lean

from .graph_helpers import loaded_module as _loaded

pytestmark = pytest.mark.usefixtures("quiet_warnings", "lean_always")


class Block(nn.Module):
    """A gated residual block returning its result, a view of it and a view of its input
    (the gate runs inside inference mode, the rest reaches the outputs)."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 8)
        self.gate = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)

    def forward(self, x):
        gate = torch.sigmoid(self.gate(x).tanh() * 2)
        h = torch.relu(self.linear(x)) * gate + x
        out = self.norm(h)
        return out, h.view(-1), x[0], out.transpose(0, 1)


class Chain(nn.Module):
    def __init__(self, layers: int):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def test_the_code_for_calls_without_autograd_enters_inference_mode(tmp_path):
    loaded = _loaded(Chain(3), (torch.randn(3, 4),), tmp_path)
    code = loaded._methods["forward"].no_grad_code
    assert "_enter_lean(" in code and ", in0)" in code and "finally:" in code
    with torch.enable_grad():
        assert "_enter_lean" not in loaded.code  # a call with autograd keeps its books


@pytest.mark.usefixtures("no_copies")
def test_outputs_are_normal_tensors_with_eager_bits_and_aliasing(tmp_path):
    module = Block().eval()
    x = torch.randn(3, 8)
    loaded = _loaded(module, (x,), tmp_path)
    with torch.no_grad():
        got, expected = loaded(x), module(x)
        assert not torch.is_inference_mode_enabled()
    for a, b in zip(got, expected):
        assert torch.equal(a, b) and a.stride() == b.stride()
        assert not a.is_inference() and not a.requires_grad
    out, flat, row, transposed = got
    assert row._base is x  # a view of the input, as eager's
    assert _same_storage(out, transposed) and transposed._base is out
    out.add_(1)  # writable in place outside inference mode
    flat.mul_(2)
    assert torch.equal(transposed, out.t())


@pytest.mark.usefixtures("no_copies")
def test_a_caller_in_inference_mode_gets_inference_tensors_as_from_eager(tmp_path):
    module = Block().eval()
    x = torch.randn(3, 8)
    loaded = _loaded(module, (x,), tmp_path)
    with torch.inference_mode():
        got, expected = loaded(x), module(x)
        assert torch.is_inference_mode_enabled()
    assert [t.is_inference() for t in got] == [t.is_inference() for t in expected]
    assert all(torch.equal(a, b) for a, b in zip(got, expected))


class Counted(nn.Module):
    """Writes state under no_grad: batch norm's running statistics and a call counter."""

    def __init__(self):
        super().__init__()
        self.norm = nn.BatchNorm1d(4)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls.add_(1)
        return self.norm(x) * 2


@pytest.mark.usefixtures("no_copies")
def test_state_written_in_a_call_without_autograd_is_written_as_eager_writes_it(tmp_path):
    module, twin = Counted().train(), Counted().train()
    twin.load_state_dict(module.state_dict())
    x = torch.randn(6, 4)
    loaded = _loaded(module, (x,), tmp_path)
    loaded.load_state_dict(twin.state_dict())

    def versions(module):
        return {name: t._version for name, t in module.state_dict(keep_vars=True).items()}

    before, twin_before = versions(loaded), versions(twin)
    with torch.no_grad():
        for _ in range(3):
            got, expected = loaded(x), twin(x)
            assert torch.equal(got, expected)
    for name, value in twin.state_dict().items():
        kept = loaded.state_dict()[name]
        assert torch.equal(kept, value) and not kept.is_inference(), name
    # Versions move as eager moves them (caches of folded values key on them).
    after, twin_after = versions(loaded), versions(twin)
    moved = {name: after[name] - before[name] for name in after}
    assert moved == {name: twin_after[name] - twin_before[name] for name in twin_after}
    assert moved["calls"] == 3 and moved["norm.num_batches_tracked"] == 3


class Rotary(nn.Module):
    """A table of positions made from sizes and state (memoised and folded values)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, 8, 2).float() / 8)))
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        positions = torch.arange(x.shape[1], dtype=torch.float32)
        angles = torch.outer(positions, self.inv_freq)
        table = torch.cat([angles.cos(), angles.sin()], dim=-1)
        return self.proj(x) * table


@pytest.mark.usefixtures("no_copies")
def test_values_kept_from_a_call_without_autograd_serve_a_call_with_it(tmp_path):
    module = Rotary()
    loaded = _loaded(module, (torch.randn(2, 5, 8),), tmp_path)
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        assert torch.equal(loaded(x), module(x))
    assert "memoised by size" in loaded._methods["forward"].no_grad_code
    x.requires_grad_(True)
    loaded(x).sum().backward()  # an inference tensor saved for backward would raise
    expected = x.grad.clone()
    x.grad = None
    module(x).sum().backward()
    assert torch.equal(x.grad, expected)


class Guarded(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x - 1


def test_a_refused_call_leaves_the_callers_modes_as_they_were(tmp_path):
    x = torch.ones(2, 3)
    loaded = _loaded(Guarded(), (x,), tmp_path)
    with torch.no_grad():
        with pytest.raises(GuardError):
            loaded(-x)
        assert not torch.is_inference_mode_enabled()
        assert not torch.is_grad_enabled()
        assert torch.equal(loaded(x), x * 2)
    assert torch.is_grad_enabled()
    y = torch.ones(2, requires_grad=True)
    (y * 3).sum().backward()  # autograd still works after the refused call
    assert torch.equal(y.grad, torch.full((2,), 3.0))


class Tagged(torch.Tensor):
    """A tensor subclass with a torch function of its own."""


def test_calls_that_something_could_tell_apart_run_as_before(tmp_path):
    x = torch.randn(3, 8)
    state = {"weight": torch.nn.Parameter(torch.ones(2)), "running_mean": torch.zeros(2)}
    plain = lean.StateTypes([(state, "weight"), (state, "running_mean")])
    assert lean.enter(plain, x) is not None  # a plain call: entered (released with the guard)
    assert not torch.is_inference_mode_enabled()
    with torch.inference_mode():
        assert lean.enter(plain, x) is None
        inference_x = torch.randn(3, 8)
    assert lean.enter(plain, inference_x) is None
    assert lean.enter(plain, x.as_subclass(Tagged)) is None
    state["running_mean"] = state["running_mean"].as_subclass(Tagged)
    assert lean.enter(plain, x) is None  # state of a subclass too
    assert lean.enter(lean.StateTypes([(state, "missing")]), x) is None
    with torch.overrides.TorchFunctionMode():
        assert lean.enter(lean.StateTypes([]), x) is None
    assert torch.vmap(lambda t: torch.tensor(lean.enter(lean.StateTypes([]), t) is None))(x).all()
    module = Block().eval()
    loaded = _loaded(module, (x,), tmp_path)
    with torch.no_grad():
        got = loaded(x.as_subclass(Tagged))
        expected = module(x.as_subclass(Tagged))
        assert [type(t) for t in got] == [type(t) for t in expected]
        assert torch.equal(loaded(inference_x)[0], module(inference_x)[0])
        batched = torch.vmap(lambda t: loaded(t)[0])(torch.randn(4, 3, 8))
        assert not batched.is_inference()


def test_threads_keep_their_own_modes(tmp_path):
    module = Block().eval()
    loaded = _loaded(module, (torch.randn(3, 8),), tmp_path)
    errors = []

    def run(inference: bool) -> None:
        try:
            for seed in range(50):
                x = torch.randn(3, 8, generator=torch.Generator().manual_seed(seed))
                mode = torch.inference_mode() if inference else torch.no_grad()
                with mode:
                    got = loaded(x)
                    if got[0].is_inference() is not inference:
                        errors.append(("flavour", inference))
                    if torch.is_inference_mode_enabled() is not inference:
                        errors.append(("mode", inference))
                if not torch.equal(got[0], module(x)[0]):
                    errors.append(("value", inference))
        except Exception as exc:  # reported below, with the thread's mode
            errors.append((repr(exc), inference))

    threads = [threading.Thread(target=run, args=(i % 2 == 0,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_the_safety_copy_keeps_values_strides_and_shared_storage():
    with torch.inference_mode():
        base = torch.arange(12.0).reshape(3, 4)
        view = base.t()
        other = torch.ones(2)
    plain = torch.zeros(2)
    before = lean.COPIES[0]
    a, b, c, d = lean.normal_copies(base, view, other, plain)
    assert lean.COPIES[0] - before == 3
    assert d is plain
    for got, was in ((a, base), (b, view), (c, other)):
        assert not got.is_inference() and torch.equal(got, was) and got.stride() == was.stride()
    assert _same_storage(a, b) and not _same_storage(a, base)
    a.add_(1)  # writable, and the views of one storage see each other's writes
    assert torch.equal(b, a.t())


class Doubled(torch.autograd.Function):
    """A custom autograd function whose forward writes what it is given in place."""

    @staticmethod
    def forward(ctx, x):
        y = x.clone()
        y.mul_(2)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


class WithFunction(nn.Module):
    def __init__(self, last: bool):
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.last = last

    def forward(self, x):
        if self.last:
            return Doubled.apply(self.linear(x))
        return torch.tanh(Doubled.apply(self.linear(x)) + 1)


@pytest.mark.parametrize("last", [False, True])
@pytest.mark.usefixtures("no_copies")
def test_a_custom_autograd_function_runs_inside_unless_its_results_leave(last, tmp_path):
    module = WithFunction(last)
    x = torch.randn(3, 4)
    loaded = _loaded(module, (x,), tmp_path)
    code = loaded._methods["forward"].no_grad_code
    assert ("_enter_lean" in code) is not last
    with torch.no_grad():
        got, expected = loaded(x), module(x)
    assert torch.equal(got, expected) and not got.is_inference()
    got.add_(1)  # a normal tensor
    x.requires_grad_(True)
    loaded(x).sum().backward()  # and with autograd, the function's backward
    expected_grad = x.grad.clone()
    x.grad = None
    module(x).sum().backward()
    assert torch.equal(x.grad, expected_grad)


class WritesItsInput(nn.Module):
    def forward(self, x, y):
        x[0].mul_(2)  # through a view made inside: written inside, as eager writes it
        y.add_(1)
        return x.sum(0), y[1:]


@pytest.mark.usefixtures("no_copies")
def test_inputs_written_in_place_are_written_and_versioned_as_by_eager(tmp_path):
    example = (torch.randn(3, 4), torch.randn(3))
    loaded = _loaded(WritesItsInput(), tuple(t.clone() for t in example), tmp_path)
    mine = tuple(t.clone() for t in example)
    theirs = tuple(t.clone() for t in example)
    before = [t._version for t in mine], [t._version for t in theirs]
    with torch.no_grad():
        got, expected = loaded(*mine), WritesItsInput()(*theirs)
    assert all(torch.equal(a, b) for a, b in zip(mine, theirs))
    assert all(torch.equal(a, b) for a, b in zip(got, expected))
    moved = [t._version - v for t, v in zip(mine, before[0])]
    assert moved == [t._version - v for t, v in zip(theirs, before[1])] and all(moved)
    assert got[1]._base is mine[1]
    got[1].zero_()  # a view of the input, writable outside as eager's is
    assert torch.equal(mine[1][1:], torch.zeros(2))


def test_a_graph_of_few_ops_runs_as_it_is(monkeypatch, tmp_path):
    """Entering costs a call more than a few ops inside save (lean.MIN_OPS)."""
    monkeypatch.setattr(lean, "MIN_OPS", 24)
    x = torch.randn(2, 4)
    few, many = Chain(2), Chain(16)  # 4 ops inside (the last two reach the output), 28
    assert "_enter_lean" not in _loaded(few, (x,), tmp_path)._methods["forward"].no_grad_code
    loaded = _loaded(many, (x,), tmp_path)
    assert "_enter_lean" in loaded._methods["forward"].no_grad_code
    with torch.no_grad():
        assert torch.equal(loaded(x), many(x))


def test_the_block_of_these_tests_runs_its_gate_inside(tmp_path):
    """The modules above do enter inference mode (the gate's ops run inside)."""
    loaded = _loaded(Block().eval(), (torch.randn(3, 8),), tmp_path)
    code = loaded._methods["forward"].no_grad_code
    inside = code.split("_enter_lean(")[1].split("leave inference mode")[0]
    assert "op_sigmoid" in inside or "sigmoid" in inside


class Watched(torch.Tensor):
    """A tensor subclass that notes, for each op it takes part in, whether the op ran in
    inference mode."""

    modes: list = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        Watched.modes.append(torch.is_inference_mode_enabled())
        return super().__torch_function__(func, types, args, kwargs or {})


class FoldedScale(nn.Module):
    """A value made of state alone (folded: runtime/folding.py), read by the code inside."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 8)
        self.register_buffer("scale", torch.full((8,), 0.5))

    def forward(self, x):
        gate = torch.sigmoid(self.linear(x) * (self.scale * 2).exp())  # inside
        return x * gate


def _state_types(loaded) -> lean.StateTypes:
    function = loaded._methods["forward"]._function((True, True))
    (types,) = [v for v in function.__kwdefaults__.values() if isinstance(v, lean.StateTypes)]
    return types


def test_state_only_folded_is_checked_through_the_folded_values(tmp_path):
    # The code checks the types of the state it reads and of the folded values, not of
    # the state only the folded function reads (it runs before, in the caller's mode).
    torch.manual_seed(0)
    module = FoldedScale().eval()
    x = torch.randn(3, 8)
    loaded = _loaded(module, (x,), tmp_path)
    with torch.no_grad():
        assert torch.equal(loaded(x), module(x))
        code = loaded._methods["forward"].no_grad_code
        assert "folded_plain=_folded_plain" in code
        assert "scale" not in _state_types(loaded).keys
        # The state changes after load to a subclass: its folded value is one too, and
        # the call runs in the caller's mode, where eager runs it.
        for owner in (loaded, module):
            owner.scale = owner.scale.as_subclass(Watched)
        Watched.modes.clear()
        got = loaded(x)
        assert Watched.modes and not any(Watched.modes)
        assert torch.equal(got, module(x))
        assert not got.is_inference()


class DecoderSizeCheck(nn.Module):
    """A decoder read only for its size (runtime/size_checks.py): its weights are read by
    the check itself, which runs where the code stands, inside inference mode."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.Conv1d(1, 4, 3, padding=1)
        self.decoder = nn.ConvTranspose1d(4, 1, 4, stride=2)

    def forward(self, x):
        codes = torch.tanh(self.encoder(x))  # inside
        audio = torch.tanh(self.decoder(torch.relu(codes)))
        if audio.shape[-1] % 4 == 0:
            return codes * 2
        return codes * 3


def test_state_read_by_size_checks_keeps_a_subclass_out_of_inference_mode(tmp_path):
    torch.manual_seed(0)
    module = DecoderSizeCheck().eval()
    x = torch.randn(1, 1, 6)
    loaded = _loaded(module, (x,), tmp_path)
    with torch.no_grad():
        assert torch.equal(loaded(x), module(x))
        assert "size checks" in loaded._methods["forward"].no_grad_code
        types = _state_types(loaded)
        read = {(id(owner), key) for owner, key in zip(types.owners, types.keys)}
        assert (id(loaded.decoder._parameters), "weight") in read
        for owner in (loaded, module):
            owner.decoder.weight = nn.Parameter(owner.decoder.weight.detach().as_subclass(Watched))
        Watched.modes.clear()
        y = torch.randn(1, 1, 8)  # a new key: the checks run
        assert torch.equal(loaded(y), module(y))
        assert Watched.modes and not any(Watched.modes)


def test_enter_takes_the_folded_values_types_from_the_fold():
    x = torch.randn(3, 8)
    plain = lean.StateTypes([])
    assert lean.enter(plain, x, folded_plain=True) is not None
    assert not torch.is_inference_mode_enabled()
    assert lean.enter(plain, x, folded_plain=False) is None
    # the flag the fold gives with its values: whether every tensor among them is plain
    made = (torch.ones(2), torch.nn.Parameter(torch.ones(2)), 3)
    assert folding.with_their_types(made)[-1] is True
    assert all(a is b for a, b in zip(folding.with_their_types(made), made))
    assert folding.with_their_types((torch.ones(2).as_subclass(Tagged),))[-1] is False
