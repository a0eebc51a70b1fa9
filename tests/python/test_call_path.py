"""The call of a traced module: the fast call (straight to the method ``forward`` runs, see
the note at ``TracedModule.__call__``) gives what nn.Module's call gives, and steps aside
whenever nn.Module's call has more to do (hooks, an instance's own ``forward``, a mode
that the routing must check, a torch.jit trace)."""

from __future__ import annotations

import io
import pickle
import threading

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import BindingError, GuardError, TraceError

RUNTIMES = ["codegen", "interpreter"]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.fc(x).relu())

    def encode(self, x):
        return self.fc(x) * 2


def _loaded(module: nn.Module, *args, runtime: str = "codegen", **kwargs):
    buf = io.BytesIO()
    tracebridge.trace(module, *args, **kwargs).save(buf)
    buf.seek(0)
    return tracebridge.load(buf, runtime=runtime)


@pytest.fixture(params=RUNTIMES)
def loaded(request):
    net = Net().eval()
    return net, _loaded(net, torch.rand(2, 4), runtime=request.param)


def test_a_plain_call_goes_straight_to_the_method(loaded):
    _, traced = loaded
    assert traced._tb_fast is traced._methods["forward"]


def test_forward_hooks_run_and_may_change_inputs_and_outputs(loaded):
    net, traced = loaded
    x = torch.rand(2, 4)
    seen = []
    pre = traced.register_forward_pre_hook(lambda mod, args: (args[0] * 2,))
    post = traced.register_forward_hook(lambda mod, args, out: seen.append(args) or out + 1)
    torch.testing.assert_close(traced(x), net(x * 2) + 1)
    assert len(seen) == 1 and torch.equal(seen[0][0], x * 2)
    pre.remove()
    post.remove()
    torch.testing.assert_close(traced(x), net(x))
    assert len(seen) == 1  # removed: not called again


def test_global_hooks_run(loaded):
    net, traced = loaded
    x = torch.rand(2, 4)
    calls = []
    handle = nn.modules.module.register_module_forward_hook(
        lambda mod, args, out: calls.append(type(mod).__name__)
    )
    try:
        traced(x)
    finally:
        handle.remove()
    assert "TracedModule" in calls  # the hook ran for the traced module itself
    calls.clear()
    traced(x)
    assert calls == []


def test_an_instance_forward_is_called(loaded):
    net, traced = loaded
    x = torch.rand(2, 4)
    traced.forward = lambda x: torch.zeros(1)
    assert torch.equal(traced(x), torch.zeros(1))
    del traced.forward
    torch.testing.assert_close(traced(x), net(x))
    assert traced._tb_fast is traced._methods["forward"]


def test_a_module_traced_in_one_mode_refuses_the_other_set_any_way():
    net = Net().eval()
    traced = _loaded(net, torch.rand(2, 4))
    x = torch.rand(2, 4)
    for set_training in (lambda: traced.train(), lambda: setattr(traced, "training", True)):
        set_training()
        with pytest.raises(GuardError, match=r"forward was traced in eval mode"):
            traced(x)
        with tracebridge.guards_disabled():
            torch.testing.assert_close(traced(x), net(x))  # the evaluation graph
        traced.eval()  # the module and its sub-modules (train() switched them)
        torch.testing.assert_close(traced(x), net(x))


def test_respect_mode_follows_the_mode():
    net = Net()
    traced = _loaded(net, torch.rand(2, 4), respect_mode=True)
    x = torch.rand(50, 4)
    torch.manual_seed(0)
    dropped = traced.train()(x)
    assert (dropped == 0).any()  # dropout ran
    torch.testing.assert_close(traced.eval()(x), net.eval()(x))
    traced.training = True  # set directly: its dropout stays in evaluation, as in eager
    with pytest.raises(TraceError, match="sub-module 'drop' is in evaluation mode"):
        traced(x)  # the training graph drops: refused rather than run
    traced.train()
    assert (traced(x) == 0).any()


def test_keywords_nesting_and_wrong_arguments_keep_their_paths():
    def f(x, y):
        return x + 2 * y

    class Wrap(nn.Module):
        def forward(self, x, y):
            return f(x, y)

    traced = _loaded(Wrap(), (torch.rand(3), torch.rand(3)))
    x, y = torch.rand(3), torch.rand(3)
    torch.testing.assert_close(traced(x, y), f(x, y))
    # traced with positional inputs: a keyword naming the parameter binds as in Python
    torch.testing.assert_close(traced(x, y=y), f(x, y))
    torch.testing.assert_close(traced(y=y, x=x), f(x, y))
    expected = r"expected \(\(Tensor, Tensor\), \{\}\), got \(\(Tensor,\), \{'z': Tensor\}\)"
    with pytest.raises(TraceError, match=expected):
        traced(x, z=y)  # no parameter z: refused, naming the traced ones
    # what Python refuses to bind, Python's TypeError (a BindingError, also a TraceError)
    with pytest.raises(BindingError, match=r"forward\(\) missing 1 required positional argu"):
        traced(x)
    with pytest.raises(BindingError, match=r"forward\(\) takes 2 positional arguments but 3"):
        traced(x, y, x)


class DataGuard(nn.Module):
    def forward(self, x):
        if x.max() < 100:  # a guard on the data
            return x + 1
        return x - 1


def test_nested_guards_disabled_blocks_and_threads():
    traced = _loaded(DataGuard(), torch.rand(2, 4))
    large = torch.full((2, 4), 1000.0)  # the guard refuses it with guards on
    with pytest.raises(GuardError):
        traced(large)
    with tracebridge.guards_disabled():
        with tracebridge.guards_disabled():
            traced(large)
        traced(large)  # still off: the outer block

        refused = []

        def other_thread():
            try:
                traced(large)
            except GuardError as exc:
                refused.append(exc)

        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join(30)
        assert len(refused) == 1  # guards are off in this thread only
    with pytest.raises(GuardError):
        traced(large)


def test_other_methods_and_pickles_call_the_same(loaded):
    net, _ = loaded
    x = torch.rand(2, 4)
    traced = tracebridge.trace_module(net, {"forward": x, "encode": x})
    again = pickle.loads(pickle.dumps(traced))
    for module in (traced, again):
        torch.testing.assert_close(module(x), net(x))
        torch.testing.assert_close(module.encode(x), net.encode(x))
        assert module._tb_fast is module._methods["forward"]


def test_a_jit_trace_through_a_loaded_module_names_its_scope(loaded):
    net, traced = loaded

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = traced

        def forward(self, x):
            return self.inner(x) + 1

    x = torch.rand(2, 4)
    outer = torch.jit.trace(Outer(), x, check_trace=False)
    torch.testing.assert_close(outer(x), net(x) + 1)
    scopes = {node.scopeName() for node in outer.inlined_graph.nodes()}
    assert any("inner" in scope for scope in scopes)  # through nn.Module's _slow_forward


def test_module_compile_takes_the_call(loaded):
    """``Module.compile()`` sets ``_compiled_call_impl`` (to ``torch.compile(_call_impl)``),
    which nn.Module's call runs instead of ``forward``: so does the traced module's.
    (A recording stand-in here: compiling for real takes seconds.)"""
    _, traced = loaded
    x = torch.rand(2, 4)
    seen = []
    traced._compiled_call_impl = lambda *args, **kwargs: seen.append(args) or "compiled"
    assert traced(x) == "compiled" and seen[0][0] is x
    traced._compiled_call_impl = None
    assert isinstance(traced(x), torch.Tensor)


class BatchGuard(nn.Module):
    def forward(self, x):
        if x.shape[0] > 1:  # a guard on the batch size: batch 1 gets a specialisation
            return x * 2
        return x

    def encode(self, x):
        return x + 1


def test_methods_by_name_come_after_state_and_children():
    x = torch.rand(3, 4)
    traced = tracebridge.trace_module(BatchGuard(), {"forward": x, "encode": x})
    variants = [name for name in traced.program.methods if "__size1_" in name]
    assert variants  # the specialisation is there, reached through forward only
    assert not any(hasattr(traced, name) for name in variants)
    torch.testing.assert_close(traced.encode(x), x + 1)
    torch.testing.assert_close(traced(x[:1]), x[:1])
    with pytest.raises(AttributeError, match=r"'TracedModule' object has no attribute 'decode'"):
        traced.decode  # noqa: B018 - the lookup is the test
    traced.encode = nn.Identity()  # a child under a method's name wins, as state does
    assert isinstance(traced.encode, nn.Identity)
    del traced.encode
    torch.testing.assert_close(traced.encode(x), x + 1)


class _Doubled(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.fc2 = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc(x)))


def test_global_hooks_at_trace_time_run_once_and_their_change_is_refused(tmp_path):
    """A global forward hook present while tracing (prober17): its work on the sub-modules
    is in the graph, its work on the module itself is not (the traced module's call runs
    it, as eager does), so the result is eager's once, not twice; the trace warns, and a
    call after the hook is removed is refused in this process."""
    torch.manual_seed(0)
    net = _Doubled().eval()
    x = torch.rand(3, 4)
    handle = nn.modules.module.register_module_forward_hook(lambda mod, args, out: out * 2)
    try:
        with pytest.warns(tracebridge.TracerWarning, match="global module hooks"):
            traced = tracebridge.trace(net, torch.rand(2, 4))
        torch.testing.assert_close(traced(x), net(x))
        traced.save(tmp_path / "m.tb")
    finally:
        handle.remove()
    with pytest.raises(tracebridge.TraceError, match="global module hooks"):
        traced(x)
    # Another process has no such hook: the file holds the sub-modules' doubling only
    loaded = tracebridge.load(tmp_path / "m.tb")
    fc = net.fc(x) * 2
    torch.testing.assert_close(loaded(x), net.fc2(torch.relu(fc)) * 2)
