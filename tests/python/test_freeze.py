"""tracebridge.freeze: a frozen copy whose calls keep the values folded from its state
without checking the state again (runtime/frozen.py), right on every call it serves."""

from __future__ import annotations

import copy
import io
import pickle

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import GuardError, TraceError
from tracebridge.ir import pytree
from tracebridge.runtime import folding, lean
from tracebridge.runtime.frozen import runtime_methods

from .models import CASES, conv_bn_relus


def _loaded(traced):
    buffer = io.BytesIO()
    traced.save(buffer)
    return tracebridge.load(buffer.getvalue())


def _leaves(result) -> list:
    leaves, _ = pytree.flatten(result, pytree.is_tensor)
    return leaves


def _same_bits(a, b) -> bool:
    left, right = _leaves(a), _leaves(b)
    return len(left) == len(right) and all(
        torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y for x, y in zip(left, right)
    )


def _call(target, inputs):
    if isinstance(inputs, dict):
        return target(**inputs)
    return target(*inputs) if isinstance(inputs, tuple) else target(inputs)


def _conv_bn() -> nn.Module:
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 5)
    )
    with torch.no_grad():
        net[1].running_mean.uniform_(-1, 1)
        net[1].running_var.uniform_(0.5, 2)
    return net.eval()


def _folders(frozen) -> list:
    """The folded runners of the code of ``frozen``'s forward, without autograd."""
    methods = runtime_methods(frozen.__dict__["_tb_frozen"]._methods["forward"])
    functions = [m._compiled[(True, True)] for m in methods if (True, True) in m._compiled]
    return [
        v for f in functions for v in f.__kwdefaults__.values() if isinstance(v, folding.Folded)
    ]


EVAL_CASES = [name for name in CASES if name != "cnn_train"]


@pytest.mark.parametrize("name", EVAL_CASES)
def test_results_are_the_unfrozen_loaded_modules_bit_for_bit(name):
    case = CASES[name]()
    if case.model.training:
        pytest.skip("a case in training mode")
    loaded = _loaded(case.trace(check_trace=False))
    frozen = tracebridge.freeze(loaded)
    for inputs in case.all_inputs:
        with torch.no_grad():
            assert _same_bits(_call(frozen, inputs), _call(loaded, inputs))
            assert _same_bits(_call(frozen, inputs), _call(loaded, inputs))  # kept values
        assert _same_bits(_call(frozen, inputs), _call(loaded, inputs))  # with autograd
    for method, calls in case.methods.items():
        for inputs in calls:
            assert getattr(frozen, method).__self__ is frozen
            with torch.no_grad():
                got = _call(getattr(frozen, method), inputs)
                assert _same_bits(got, _call(getattr(loaded, method), inputs))


def test_convnet_and_transformer_block_fold_and_match():
    torch.manual_seed(0)
    block = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True).eval()
    cases = [(_conv_bn(), torch.rand(1, 3, 8, 8)), (block, torch.rand(2, 5, 16))]
    for model, x in cases:
        loaded = _loaded(tracebridge.trace(model, x))
        frozen = tracebridge.freeze(loaded)
        assert frozen.skips_state_checks
        with torch.no_grad():
            for _ in range(3):
                assert torch.equal(frozen(x), loaded(x))
            assert torch.equal(frozen(x * 2), loaded(x * 2))
        assert torch.equal(frozen(x), loaded(x))
        folders = _folders(frozen)  # (the block's fused path reads its weights unfolded)
        assert folders or model is block
        assert all(isinstance(f, folding.FixedFolded) for f in folders)


def test_a_change_to_the_original_does_not_reach_the_frozen_copy():
    net = _conv_bn()
    x = torch.rand(1, 3, 8, 8)
    traced = tracebridge.trace(net, x)
    frozen = tracebridge.freeze(traced)
    with torch.no_grad():
        before, original = frozen(x), traced(x)
        assert torch.equal(before, original)
        assert _folders(frozen) and all(
            isinstance(f, folding.FixedFolded) for f in _folders(frozen)
        )
        net[0].weight.mul_(2)  # in place, on the original's tensor
        net[1].running_var.add_(1)
        assert torch.equal(frozen(x), before)
        changed = traced(x)
        assert not torch.equal(changed, original)
        assert torch.allclose(changed, net(x), atol=1e-5)
        # and freezing again sees the change
        assert torch.equal(tracebridge.freeze(traced)(x), changed)


def test_the_frozen_state_is_not_handed_out_for_writing():
    net = _conv_bn()
    x = torch.rand(1, 3, 8, 8)
    frozen = tracebridge.freeze(tracebridge.trace(net, x))
    with torch.no_grad():
        expected = frozen(x)
        state = frozen.state_dict()
        assert set(state) == set(net.state_dict())
        for tensor in state.values():
            tensor.zero_()  # copies
        assert torch.equal(frozen(x), expected)
    assert list(frozen.parameters()) == [] and list(frozen.buffers()) == []
    assert not hasattr(frozen, "weight")
    refused = [
        lambda: frozen.to(torch.float64),
        lambda: frozen.double(),
        lambda: frozen.train(),
        lambda: frozen.load_state_dict(net.state_dict()),
        lambda: frozen.requires_grad_(),
        lambda: nn.Sequential(frozen).load_state_dict({"0.0.weight": net[0].weight}),
    ]
    for attempt in refused:
        with pytest.raises(TraceError, match="freeze"):
            attempt()
    assert frozen.eval() is frozen and not frozen.training


def test_freeze_asks_for_evaluation_mode_and_a_traced_object():
    net = _conv_bn().train()
    traced = tracebridge.trace(net, torch.rand(2, 3, 8, 8))
    with pytest.raises(TraceError, match=r"\.eval\(\)"):
        tracebridge.freeze(traced)
    with pytest.raises(TraceError, match="trace it first"):
        tracebridge.freeze(net)
    with pytest.raises(TraceError, match="no traced method"):
        tracebridge.freeze(traced.eval(), preserved_attrs=["weight"])


def test_guards_and_input_checks_still_fire():
    class Branchy(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            y = self.lin(x)
            if x.sum() > 0:
                return y * 2
            return y - 1

    model = Branchy().eval()
    frozen = tracebridge.freeze(tracebridge.trace(model, torch.ones(2, 4)))
    with torch.no_grad():
        assert torch.equal(frozen(torch.ones(3, 4)), model(torch.ones(3, 4)))
        with pytest.raises(GuardError):
            frozen(-torch.ones(2, 4))
        with pytest.raises(TraceError):
            frozen(torch.ones(2, 4), torch.ones(2, 4))


def test_with_autograd_gradients_reach_the_inputs_as_unfrozen():
    net = _conv_bn()
    x = torch.rand(1, 3, 8, 8, requires_grad=True)
    loaded = _loaded(tracebridge.trace(net, x.detach()))
    frozen = tracebridge.freeze(loaded)
    frozen(x).sum().backward()
    got = x.grad.clone()
    x.grad = None
    loaded(x).sum().backward()
    assert torch.equal(got, x.grad)
    assert all(p.grad is not None for p in loaded.parameters())


def test_a_graph_that_writes_or_returns_its_state_keeps_the_checks():
    class Counting(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)
            self.register_buffer("calls", torch.zeros(()))

        def forward(self, x):
            self.calls += 1
            return self.lin(x) * self.calls

    class Returning(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x):
            return self.lin(x), self.lin.weight.t()

    x = torch.rand(2, 3)
    model = Counting().eval()
    traced = tracebridge.trace(model, x, check_trace=False)
    frozen = tracebridge.freeze(traced)
    assert not frozen.skips_state_checks
    with torch.no_grad():
        expected = [model(x) for _ in range(3)]
        model.calls.zero_()
        got = [frozen(x) for _ in range(3)]
    assert all(torch.allclose(a, b) for a, b in zip(got, expected))
    returning = tracebridge.freeze(tracebridge.trace(Returning().eval(), x))
    assert not returning.skips_state_checks
    with torch.no_grad():
        out, weight_t = returning(x)
        weight_t.zero_()  # the caller writes what it was given: the next call sees it
        again, _ = returning(x)
    assert not torch.equal(out, again)


def test_a_frozen_object_is_not_saved_and_copies_are_independent():
    net = _conv_bn()
    x = torch.rand(1, 3, 8, 8)
    frozen = tracebridge.freeze(tracebridge.trace(net, x))
    for attempt in (
        lambda: frozen.save(io.BytesIO()),
        lambda: tracebridge.save(frozen, io.BytesIO()),
        lambda: pickle.dumps(frozen),
    ):
        with pytest.raises(TraceError, match="save the unfrozen trace"):
            attempt()
    copied = copy.deepcopy(frozen)
    copied.check_guards = False
    assert frozen.check_guards
    with torch.no_grad():
        assert torch.equal(copied(x), frozen(x))


def test_a_frozen_function_and_the_default_dtype():
    table = torch.rand(4, 4)

    def masked(x):
        mask = torch.ones(4, 4).tril() * table.t()
        return x @ mask

    traced = tracebridge.trace(masked, torch.rand(2, 4))
    frozen = tracebridge.freeze(traced)
    assert isinstance(frozen, tracebridge.FrozenFunction) and frozen.skips_state_checks
    x = torch.rand(2, 4)
    with torch.no_grad():
        before = frozen(x)
        assert torch.equal(before, traced(x))
        table.mul_(3)  # the traced function's constant: its own, not the frozen copy's
        assert torch.equal(frozen(x), before)
        assert torch.allclose(traced(x), masked(x))
    with pytest.raises(TraceError, match="save the unfrozen trace"):
        pickle.dumps(frozen)


def test_hooks_of_the_frozen_module_run():
    net = _conv_bn()
    x = torch.rand(1, 3, 8, 8)
    frozen = tracebridge.freeze(tracebridge.trace(net, x))
    seen = []
    handle = frozen.register_forward_hook(lambda module, args, out: seen.append(out.shape))
    with torch.no_grad():
        expected = frozen(x)
        assert seen == [expected.shape]
        handle.remove()
        assert torch.equal(nn.Sequential(frozen, nn.ReLU()).eval()(x), expected.relu())
    assert len(seen) == 1


def test_a_training_graph_kept_beside_the_evaluation_one_never_runs_frozen():
    net = _conv_bn().train()
    x = torch.rand(2, 3, 8, 8)
    traced = tracebridge.trace(net, x, respect_mode=True).eval()
    net.eval()
    frozen = tracebridge.freeze(traced)
    assert frozen.skips_state_checks  # the graph that writes the statistics is training's
    with torch.no_grad():
        assert torch.equal(frozen(x), traced(x))
        assert torch.allclose(frozen(x), net(x), atol=1e-5)
    with pytest.raises(TraceError, match="freeze"):
        frozen.train()


def test_the_frozen_code_checks_neither_the_folded_state_nor_its_types():
    model = conv_bn_relus(12)
    x = torch.randn(1, 4, 8, 8)
    loaded = _loaded(tracebridge.trace(model, x))
    frozen = tracebridge.freeze(loaded)
    with torch.no_grad():
        assert torch.equal(frozen(x), loaded(x))
    method = runtime_methods(frozen.__dict__["_tb_frozen"]._methods["forward"])[0]
    kept = method._compiled[(True, True)].__kwdefaults__.values()
    assert any(isinstance(v, folding.FixedFolded) for v in kept)
    assert not any(type(v) is folding.Folded for v in kept)
    assert any(isinstance(v, lean.FixedTypes) for v in kept)
    assert not any(type(v) is lean.StateTypes for v in kept)
    # the unfrozen loaded module keeps its live checks: skipped while its state is sealed
    # (runtime/sealed.py), made once it breaks, and from the first call on where the
    # seal broke before the code was made
    unfrozen = runtime_methods(loaded._methods["forward"])[0]._compiled[(True, True)]
    assert any(type(v) is folding.SealedFolded for v in unfrozen.__kwdefaults__.values())
    broken = _loaded(tracebridge.trace(model, x))
    broken.program  # noqa: B018 - breaks its seal
    with torch.no_grad():
        broken(x)
    checked = runtime_methods(broken._methods["forward"])[0]._compiled[(True, True)]
    assert any(type(v) is folding.Folded for v in checked.__kwdefaults__.values())


def test_the_benchmark_compares_the_four_contenders():
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
    frozen_speed = pytest.importorskip("frozen_speed")
    entry = frozen_speed.measure(conv_bn_relus(12), (torch.randn(1, 4, 8, 8),), 2, 1e-5)
    assert entry["frozen_bits_equal"]
    assert all(entry[f"{tool}_right"] for tool in frozen_speed.TOOLS)
    assert all(entry[f"{tool}_min_us"] > 0 for tool in frozen_speed.TOOLS)


def test_the_default_dtype_still_keys_the_frozen_values():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("w", torch.rand(4))

        def forward(self, x):
            return x + (self.w * torch.ones(4)).exp()  # a factory: the default dtype's

    model = Scaled().eval()
    x = torch.rand(2, 4)
    loaded = _loaded(tracebridge.trace(model, x))
    frozen = tracebridge.freeze(loaded)
    previous = torch.get_default_dtype()
    with torch.no_grad():
        assert torch.equal(frozen(x), loaded(x))
        try:
            torch.set_default_dtype(torch.float64)
            got, expected = frozen(x), loaded(x)
        finally:
            torch.set_default_dtype(previous)
        assert got.dtype == expected.dtype == torch.float64 and torch.equal(got, expected)
        assert frozen(x).dtype == torch.float32
    assert any(isinstance(f, folding.FixedFolded) for f in _folders(frozen))
