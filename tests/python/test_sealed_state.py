"""Sealed state (runtime/sealed.py): a loaded artifact keeps its folded values without the
per-call check of their state until the state could have reached anyone; every path that
hands the state out (or puts a tensor in) breaks the seal, and a call after a change made
through it gives eager's result on the changed state."""

from __future__ import annotations

import copy
import io
import pickle

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.runtime import folding, lean, sealed


class Net(nn.Module):
    """Folded values of three kinds: a convolution with its batch norm, a transposed and
    scaled weight, a mask from a buffer."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.lin = nn.Linear(4, 5)
        self.register_buffer("mask", torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0]))

    def forward(self, x):
        y = self.bn(self.conv(x)).mean((2, 3))
        return (y @ (self.lin.weight.t() * 2) + self.lin.bias) * (self.mask > 0.5)


def made() -> nn.Module:
    torch.manual_seed(0)
    net = Net().eval()
    with torch.no_grad():
        for p in net.parameters():
            p.normal_()
        net.bn.running_mean.normal_()
        net.bn.running_var.uniform_(0.5, 2.0)
    return net


X = torch.randn(2, 3, 8, 8)


def loaded_pair(net: nn.Module | None = None, x: torch.Tensor = X):
    """A loaded artifact of ``net`` (default: :class:`Net`), called once on ``x`` without
    autograd (its values folded, its seal intact), and the eager module it was saved
    from."""
    net = made() if net is None else net
    buffer = io.BytesIO()
    tracebridge.trace(net, x).save(buffer)
    loaded = tracebridge.load(buffer.getvalue())
    with torch.no_grad():
        loaded(x)
    assert sealed.is_sealed(loaded)
    return loaded, net


def same_as_eager(loaded, net, x=X):
    with torch.no_grad():
        got, want = loaded(x), net(x)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def _in_place(m):
    with torch.no_grad():
        m.lin.weight.mul_(3)
        m.bn.running_var.add_(1)


def _data_assigned(m):
    m.lin.weight.data = torch.full_like(m.lin.weight, 0.5)


def _parameter_assigned(m):
    m.lin.weight = nn.Parameter(torch.full((5, 4), -0.25))


def _buffer_assigned(m):
    m.mask = torch.tensor([0.0, 1.0, 1.0, 0.0, 1.0])


def _state_dict_loaded(m):
    state = {k: v.clone() for k, v in made().state_dict().items()}
    state["conv.weight"] = state["conv.weight"] * 0.5
    state["mask"] = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0])
    m.load_state_dict(state)


def _state_dict_assigned(m):
    state = {k: v.clone() for k, v in made().state_dict().items()}
    state["lin.weight"] = torch.ones(5, 4)
    m.load_state_dict(state, assign=True)


def _state_dict_written(m):
    with torch.no_grad():
        m.state_dict()["conv.bias"].add_(1)


def _parameters_written(m):
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(0.5)


def _named_parameters_written(m):
    with torch.no_grad():
        dict(m.named_parameters())["bn.weight"].add_(2)


def _buffers_written(m):
    with torch.no_grad():
        for b in m.buffers():
            if b.shape == (5,):
                b.copy_(torch.tensor([0.0, 0.0, 1.0, 1.0, 1.0]))


def _named_buffers_written(m):
    with torch.no_grad():
        dict(m.named_buffers())["bn.running_mean"].add_(1)


def _applied(m):
    def bump(module):
        if isinstance(getattr(module, "weight", None), torch.Tensor):
            with torch.no_grad():
                module.weight.add_(0.5)

    m.apply(bump)


def _requires_grad_then_written(m):
    m.requires_grad_(False)
    m.lin.bias.add_(1)


def _zero_grad_then_written(m):
    m.zero_grad()
    with torch.no_grad():
        m.conv.weight.neg_()


def _sub_module_dict_read(m):
    with torch.no_grad():
        dict(m.lin._parameters)["weight"].add_(1)
        {**m._buffers}["mask"].zero_()


def _table_values(m):
    with torch.no_grad():
        for t in m.bn._buffers.values():
            if t.is_floating_point():
                t.mul_(2)


def _table_get(m):
    with torch.no_grad():
        m.conv._parameters.get("bias").sub_(1)


def _table_items(m):
    with torch.no_grad():
        for _, t in m.lin._parameters.items():
            t.mul_(-1)


def _table_set(m):
    m.lin._parameters["bias"] = nn.Parameter(torch.zeros(5))


def _table_update(m):
    m.lin._parameters.update(bias=nn.Parameter(torch.ones(5)))


def _table_or(m):
    new = m.lin._parameters | {}
    with torch.no_grad():
        new["weight"].add_(1)


def _table_copied(m):
    with torch.no_grad():
        copy.copy(m.lin._parameters)["weight"].add_(1)


PATHS = [
    _in_place,
    _data_assigned,
    _parameter_assigned,
    _buffer_assigned,
    _state_dict_loaded,
    _state_dict_assigned,
    _state_dict_written,
    _parameters_written,
    _named_parameters_written,
    _buffers_written,
    _named_buffers_written,
    _applied,
    _requires_grad_then_written,
    _zero_grad_then_written,
    _sub_module_dict_read,
    _table_values,
    _table_get,
    _table_items,
    _table_set,
    _table_update,
    _table_or,
    _table_copied,
]


@pytest.mark.parametrize("change", PATHS, ids=[p.__name__.strip("_") for p in PATHS])
def test_each_path_to_the_state_breaks_the_seal_and_the_call_follows_the_change(change):
    loaded, net = loaded_pair()
    change(loaded)
    change(net)
    assert not sealed.is_sealed(loaded)
    same_as_eager(loaded, net)
    same_as_eager(loaded, net)  # and again, from the values kept after the change


def test_moved_to_double_breaks_the_seal():
    loaded, net = loaded_pair()
    loaded.to(torch.float64)
    net.to(torch.float64)
    assert not sealed.is_sealed(loaded)
    same_as_eager(loaded, net, X.double())


def test_share_memory_breaks_the_seal():
    loaded, net = loaded_pair()
    loaded.share_memory()
    assert not sealed.is_sealed(loaded)
    with torch.no_grad():
        loaded.lin.weight.mul_(2)
        net.lin.weight.mul_(2)
    same_as_eager(loaded, net)


def test_program_breaks_the_seal_its_entries_are_the_state():
    loaded, net = loaded_pair()
    entry = loaded.program.state["lin.weight"].tensor
    assert not sealed.is_sealed(loaded)
    with torch.no_grad():
        entry.mul_(4)
        net.lin.weight.mul_(4)
    same_as_eager(loaded, net)


def test_a_hook_that_writes_the_state_breaks_the_seal():
    loaded, net = loaded_pair()

    def hook(module, args):
        with torch.no_grad():
            module.lin.weight.add_(0.1)

    loaded.register_forward_pre_hook(hook)
    net.register_forward_pre_hook(hook)
    same_as_eager(loaded, net)
    assert not sealed.is_sealed(loaded)
    same_as_eager(loaded, net)


def test_functional_call_breaks_the_seal_and_uses_the_tensors_given():
    loaded, net = loaded_pair()
    given = {"lin.weight": torch.ones(5, 4), "bn.running_mean": torch.zeros(4)}
    with torch.no_grad():
        got = torch.func.functional_call(loaded, given, (X,))
        want = torch.func.functional_call(net, given, (X,))
    assert not sealed.is_sealed(loaded)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    same_as_eager(loaded, net)  # its own state again


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(5, 4))

    def forward(self, x):
        return x @ (self.weight.t() * 2)


def test_parametrize_breaks_the_seal():
    buffer = io.BytesIO()
    tracebridge.trace(Scaled(), torch.randn(2, 4)).save(buffer)
    loaded = tracebridge.load(buffer.getvalue())
    with torch.no_grad():
        loaded(torch.randn(2, 4))
    assert sealed.is_sealed(loaded)

    class Doubled(nn.Module):
        def forward(self, w):
            return w * 2

    torch.nn.utils.parametrize.register_parametrization(loaded, "weight", Doubled())
    assert not sealed.is_sealed(loaded)
    with pytest.raises(tracebridge.TraceError, match="parametrization"), torch.no_grad():
        loaded(torch.randn(2, 4))  # refused, as for any traced module (not a stale value)


def test_a_call_with_autograd_breaks_the_seal_its_grad_fn_reaches_the_parameters():
    loaded, net = loaded_pair()
    out = loaded(X)
    assert not sealed.is_sealed(loaded)
    # the parameters, reached from the result as autograd reaches them
    found, stack = [], [out.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None:
            continue
        if hasattr(fn, "variable"):
            found.append(fn.variable)
        stack.extend(f for f, _ in fn.next_functions)
    weights = [t for t in found if t.shape == (5, 4)]
    assert weights and weights[0] is loaded.lin.weight
    with torch.no_grad():
        weights[0].mul_(-2)
        net.lin.weight.mul_(-2)
    same_as_eager(loaded, net)


def test_deepcopy_and_pickle_give_sealed_copies_of_their_own_and_a_copy_shares():
    loaded, net = loaded_pair()
    for copied in (copy.deepcopy(loaded), pickle.loads(pickle.dumps(loaded))):
        with torch.no_grad():
            copied(X)
        assert sealed.is_sealed(copied)
        with torch.no_grad():
            copied.lin.weight.mul_(5)  # its own state: not the original's
        assert sealed.is_sealed(loaded)
        same_as_eager(loaded, net)
    shallow = copy.copy(loaded)  # as a module's copy: the same state, under the same seal
    assert sealed.is_sealed(shallow)
    with torch.no_grad():
        shallow.lin.weight.mul_(5)
        net.lin.weight.mul_(5)
    assert not sealed.is_sealed(loaded)
    same_as_eager(loaded, net)


def test_deepcopy_of_a_sub_module_breaks_the_seal():
    loaded, net = loaded_pair()
    part = copy.deepcopy(loaded.lin)
    assert not sealed.is_sealed(loaded)
    assert part.weight.data_ptr() != loaded.lin.weight.data_ptr()
    same_as_eager(loaded, net)


def test_a_sealed_call_gives_what_the_unsealed_one_gives_bit_for_bit():
    loaded, _ = loaded_pair()
    buffer = io.BytesIO()
    loaded.save(buffer)  # saving reads the state without breaking the seal
    assert sealed.is_sealed(loaded)
    other = tracebridge.load(buffer.getvalue())
    other.program  # noqa: B018 - breaks its seal
    assert not sealed.is_sealed(other)
    x = torch.randn(3, 3, 8, 8)
    with torch.no_grad():
        for _ in range(2):
            assert torch.equal(loaded(x), other(x))
        with torch.inference_mode():
            assert torch.equal(loaded(x), other(x))
    assert sealed.is_sealed(loaded)


def test_the_sealed_code_keeps_no_checks_and_the_broken_seal_brings_them_back():
    loaded, net = loaded_pair()
    method = loaded._methods["forward"]
    made_code = method._compiled[(True, True)]
    kept = list((made_code.__kwdefaults__ or {}).values())
    assert any(isinstance(v, folding.SealedFolded) for v in kept)
    assert any(isinstance(v, lean.SealedTypes) for v in kept) or not any(
        isinstance(v, lean.StateTypes) for v in kept
    )
    # shown, printed, graphed and its code read: still sealed
    repr(loaded), loaded.graph, loaded.code, loaded.guards, str(loaded)  # noqa: B018
    assert sealed.is_sealed(loaded)
    with torch.no_grad():
        loaded.bn.bias.add_(3)
        net.bn.bias.add_(3)
    same_as_eager(loaded, net)


def test_writes_before_the_first_checked_call_are_seen():
    """The values kept while sealed are keyed on the state as it was: a change made through
    the path that broke the seal is seen at the next call, whichever call it is."""
    loaded, net = loaded_pair()
    weight = loaded.conv.weight  # breaks
    with torch.no_grad():
        weight.mul_(2)
        net.conv.weight.mul_(2)
    same_as_eager(loaded, net)


def test_a_fresh_trace_is_never_sealed():
    net = made()
    traced = tracebridge.trace(net, X)
    with torch.no_grad():
        traced(X)
    assert "_tb_seal" not in traced.__dict__
    with torch.no_grad():
        net.lin.weight.mul_(2)  # the user's own module: seen
    same_as_eager(traced, net)


def test_the_interpreter_runtime_is_not_sealed():
    net = made()
    buffer = io.BytesIO()
    tracebridge.trace(net, X).save(buffer)
    loaded = tracebridge.load(buffer.getvalue(), runtime="interpreter")
    assert "_tb_seal" not in loaded.__dict__
    same_as_eager(loaded, net)


class Counting(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        self.calls += 1
        return self.lin(x) * self.lin.weight.sum()


class Returning(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        return self.lin(x) * self.lin.weight.sum(), self.lin.weight


@pytest.mark.parametrize("kind", [Counting, Returning])
def test_a_program_that_writes_or_returns_its_state_is_never_sealed(kind):
    net = kind().eval()
    x = torch.randn(2, 3)
    buffer = io.BytesIO()
    tracebridge.trace(net, x).save(buffer)
    loaded = tracebridge.load(buffer.getvalue())
    assert "_tb_seal" not in loaded.__dict__


def test_a_loaded_function_is_sealed_until_its_program_is_read():
    table = torch.randn(4, 4)

    def f(x):
        return x @ (table.t() * 2)

    buffer = io.BytesIO()
    with pytest.warns(Warning):
        tracebridge.trace(f, torch.randn(2, 4)).save(buffer)
    loaded = tracebridge.load(buffer.getvalue())
    x = torch.randn(2, 4)
    with torch.no_grad():
        first = loaded(x)
    assert sealed.is_sealed(loaded)
    torch.testing.assert_close(first, f(x))
    entry = loaded.program.state["const0"].tensor
    assert not sealed.is_sealed(loaded)
    with torch.no_grad():
        entry.mul_(3)
        torch.testing.assert_close(loaded(x), x @ (table.t() * 6))


def test_the_default_dtype_and_invalidate_caches_still_key_the_sealed_values():
    loaded, net = loaded_pair()
    tracebridge.invalidate_caches()
    same_as_eager(loaded, net)
    assert sealed.is_sealed(loaded)


def test_a_broken_table_reads_as_a_plain_dict():
    loaded, _ = loaded_pair()
    table = loaded.lin.__dict__["_parameters"]
    assert type(table) is sealed.SealedDict
    loaded.lin.weight  # noqa: B018
    assert type(table) is sealed.OpenDict
    assert dict(table).keys() == {"weight", "bias"}
    assert pickle.loads(pickle.dumps(table)).keys() == {"weight", "bias"}


def test_state_loaded_in_inference_mode_is_made_on_every_call():
    """Inference tensors have no version to key on once the seal breaks: nothing is kept
    (as unsealed), and the calls are right."""
    net = made()
    buffer = io.BytesIO()
    tracebridge.trace(net, X).save(buffer)
    with torch.inference_mode():
        loaded = tracebridge.load(buffer.getvalue())
        for _ in range(2):
            torch.testing.assert_close(loaded(X), net(X), rtol=1e-5, atol=1e-5)


def test_a_size_checked_and_memoised_model_stays_sealed_and_right():
    """Calls of other sizes (the size checks' and memos' own reads of the state) keep the
    seal; a write after the seal breaks reaches every call."""
    loaded, net = loaded_pair()
    for size in (5, 8, 11):
        same_as_eager(loaded, net, torch.randn(1, 3, size, size))
    assert sealed.is_sealed(loaded)
    with torch.no_grad():
        loaded.conv.weight.mul_(0.5)
        net.conv.weight.mul_(0.5)
    for size in (5, 8, 11):
        same_as_eager(loaded, net, torch.randn(1, 3, size, size))


def test_a_sub_module_replaced_keeps_the_seal_and_the_call_is_refused():
    """Replacing a sub-module reaches no state table (the tree watch refuses the call, as
    for any traced module): the new module's tensors are never read by the graphs."""
    loaded, _ = loaded_pair()
    loaded.lin = nn.Linear(4, 5)
    with pytest.raises(tracebridge.TraceError, match="lin"), torch.no_grad():
        loaded(X)


class _Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.randn(4))

    def forward(self, x):
        return x * self.scale + (self.scale * 2.0).exp()  # (scale * 2).exp() folded


def test_a_call_with_autograd_over_state_without_grad_breaks_the_seal():
    """prober23a F5: state that needs no grad is still saved for backward where an input
    requires grad (``x * buffer``: ``grad_fn._saved_other`` is the buffer itself); a
    write through it, then a call without autograd, served the old folded value."""
    torch.manual_seed(0)
    x = torch.randn(2, 4)
    loaded, net = loaded_pair(_Scaled().eval(), x)
    out = loaded(x.clone().requires_grad_(True))
    assert not sealed.is_sealed(loaded)
    saved = out.grad_fn.next_functions[0][0]._saved_other
    assert saved.data_ptr() == loaded.scale.data_ptr()  # the buffer itself
    with torch.no_grad():
        saved.add_(1.0)
        net.scale.add_(1.0)
        torch.testing.assert_close(loaded(x), net(x))
