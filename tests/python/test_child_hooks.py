"""A traced module refuses a call while one of its sub-modules has other hooks than when it
was traced (api.py, note on hooks of sub-modules): the graph holds what the hooks at trace
time did and never runs a hook itself, so a hook added or removed later would be ignored
silently. The traced module's own hooks run as before."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import TraceError

pytestmark = pytest.mark.usefixtures("quiet_warnings")


def _net() -> nn.Sequential:
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))


def test_a_hook_added_to_a_shared_sub_module_after_tracing_is_refused():
    net = _net()
    traced = tracebridge.trace(net, torch.rand(3, 4))
    x = torch.rand(2, 4)
    handle = net[1].register_forward_hook(lambda mod, args, out: out * 0)
    with pytest.raises(TraceError, match=r"sub-module '1' .* other hooks than when it was traced"):
        traced(x)
    handle.remove()
    torch.testing.assert_close(traced(x), net(x))


def test_a_hook_traced_then_removed_is_refused():
    net = _net()
    handle = net[1].register_forward_hook(lambda mod, args, out: out + 1)
    traced = tracebridge.trace(net, torch.rand(3, 4))
    x = torch.rand(2, 4)
    torch.testing.assert_close(traced(x), net(x))  # the hook's effect is in the graph
    handle.remove()
    with pytest.raises(TraceError, match="Trace again with the hooks in place"):
        traced(x)


def test_hooks_on_a_loaded_module_s_children_are_refused(tmp_path):
    tracebridge.trace(_net(), torch.rand(3, 4)).save(tmp_path / "n.tb")
    loaded = tracebridge.load(tmp_path / "n.tb")
    getattr(loaded, "2").register_forward_pre_hook(lambda mod, args: (args[0] * 2,))
    with pytest.raises(TraceError, match="sub-module '2'"):
        loaded(torch.rand(2, 4))


def test_the_traced_module_s_own_hooks_and_unrelated_hooks_still_work():
    net = _net()
    traced = tracebridge.trace(net, torch.rand(3, 4))
    other = nn.Linear(2, 2)
    other.register_forward_hook(lambda mod, args, out: out)  # elsewhere: moves the counter
    torch.rand(2, requires_grad=True).register_hook(lambda grad: grad)
    traced.register_forward_hook(lambda mod, args, out: out * 3)
    x = torch.rand(2, 4)
    torch.testing.assert_close(traced(x), net(x) * 3)


def test_a_hook_swapped_for_another_on_the_same_table_is_refused():
    net = _net()
    first = net[1].register_forward_hook(lambda mod, args, out: out + 1)
    traced = tracebridge.trace(net, torch.rand(3, 4))
    traced(torch.rand(2, 4))
    first.remove()  # the same length again, with another hook: at the start, then the end
    second = net[1].register_forward_hook(lambda mod, args, out: out * 0, prepend=True)
    with pytest.raises(TraceError, match="sub-module '1'"):
        traced(torch.rand(2, 4))
    second.remove()
    net[1].register_forward_hook(lambda mod, args, out: out * 0)
    with pytest.raises(TraceError, match="sub-module '1'"):
        traced(torch.rand(2, 4))


def test_hooks_registered_elsewhere_cost_no_walk_of_the_modules(monkeypatch):
    # Review 9: a full backward hook or torch.utils.checkpoint anywhere moves the hook
    # counter on every step; each traced call then walked every sub-module and built the
    # tuples of their hooks (686 us for 200 modules, a 2.8x slower call).
    from tracebridge import api

    net = nn.Sequential(*[nn.Sequential(nn.Linear(4, 4), nn.ReLU()) for _ in range(3)])
    traced = tracebridge.trace(net, torch.rand(3, 4))
    walks = []
    real = api._child_hooks
    monkeypatch.setattr(api, "_child_hooks", lambda root: walks.append(1) or real(root))
    weight = torch.zeros(1, requires_grad=True)
    x = torch.rand(2, 4)
    for _ in range(3):
        weight.register_hook(lambda grad: grad).remove()  # the counter moves
        torch.testing.assert_close(traced(x), net(x))
    assert walks == []
    net[0][1].register_forward_hook(lambda mod, args, out: out)
    with pytest.raises(TraceError, match=r"sub-module '0\.1'"):
        traced(x)
    assert walks == [1]  # the walk runs to name the sub-module


def test_a_parametrization_registered_after_tracing_is_named_as_the_cause():
    # Review 9: weight_norm (torch.nn.utils.parametrizations) moves the weight into
    # parametrizations.weight.original without a hook; the call failed with "the inputs
    # do not suit the traced program", which sent the user looking at the inputs.
    net = _net()
    traced = tracebridge.trace(net, torch.rand(3, 4))
    torch.nn.utils.parametrizations.weight_norm(net[0])
    # (since session 15 the module tree's watch sees the parametrization first)
    with pytest.raises(TraceError, match=r"sub-module '0' .* given a parametrization .* again"):
        traced(torch.rand(2, 4))


class LazilyHooked(nn.Module):
    """transformers' output capturing (``utils/output_capturing.py``): on its first call the
    model puts a forward hook on each layer and marks itself as hooked; the hooks append
    each layer's output to the call's collector, and ``forward`` returns what was
    collected. Installed twice, every output would be collected twice."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))
        self.head = nn.Linear(4, 2)
        self._collector = None

    def _install(self):
        def collect(module, args, output):
            if self._collector is not None:
                self._collector.append(output)

        for layer in self.layers:
            layer.register_forward_hook(collect)
        self._hooks_installed = True

    def forward(self, x):
        if not getattr(self, "_hooks_installed", False):
            self._install()
        self._collector = []
        try:
            for layer in self.layers:
                x = torch.relu(layer(x))
            collected = self._collector
        finally:
            self._collector = None
        # the head reads the collected outputs in pairs with the layers, as SegFormer's
        # decode head zips its hidden states with its projections
        return sum(self.head(h) for h, _ in zip(collected, self.layers, strict=True))


def _forward_hooks(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) for m in model.modules())


def test_hooks_the_model_installs_on_its_first_call_are_taken_away_with_their_flag():
    model = LazilyHooked()  # never called: tracing makes its first call
    x = torch.rand(3, 4)
    traced = tracebridge.trace(model, x)  # the check records it again: hooks once only
    assert _forward_hooks(model) == 0 and not hasattr(model, "_hooks_installed")
    expected = model(x)  # eager: installs its hooks again, once
    assert _forward_hooks(model) == 3
    torch.testing.assert_close(traced(x), expected)
    y = torch.rand(5, 4)
    torch.testing.assert_close(traced(y), model(y))
    assert _forward_hooks(model) == 3


def test_a_user_hook_on_a_lazily_hooked_model_is_still_refused():
    model = LazilyHooked()
    model(torch.rand(2, 4))  # hooked before tracing
    traced = tracebridge.trace(model, torch.rand(3, 4))
    handle = model.layers[1].register_forward_hook(lambda mod, args, out: out * 0)
    with pytest.raises(TraceError, match=r"sub-module 'layers.1' .* other hooks"):
        traced(torch.rand(3, 4))
    handle.remove()
    x = torch.rand(3, 4)
    torch.testing.assert_close(traced(x), model(x))


@pytest.mark.parametrize("kind", ["pre", "post"])
def test_a_hook_of_the_module_traced_removed_after_tracing_is_refused(kind):
    """The root's hooks ran inside the recording (prober20b F10): removing one, the trace
    went on applying it where the model no longer does."""
    net = _net()
    if kind == "pre":
        handle = net.register_forward_pre_hook(lambda mod, args: (args[0] / 255.0,))
    else:
        handle = net.register_forward_hook(lambda mod, args, out: out * 3)
    traced = tracebridge.trace(net, torch.rand(3, 4))
    x = torch.rand(2, 4)
    torch.testing.assert_close(traced(x), net(x))  # the hook's effect is in the graph
    handle.remove()
    with pytest.raises(TraceError, match=r"module this was traced from \(Sequential\)"):
        traced(x)
    net.register_forward_hook(lambda mod, args, out: out * 5)
    with pytest.raises(TraceError, match="other hooks than when it was traced"):
        traced(x)


@pytest.mark.parametrize("kind", ["pre", "post", "backward"])
def test_a_hook_added_to_the_module_traced_without_any_is_refused(kind):
    """The trace stands for the traced module's call: a hook registered on it afterwards
    is one the graph never runs (prober21b F1: it was silently left out, where one
    removed was refused), so the call is refused until it is removed again."""
    net = _net()
    traced = tracebridge.trace(net, torch.rand(3, 4))
    x = torch.rand(2, 4)
    if kind == "pre":
        handle = net.register_forward_pre_hook(lambda mod, args: (args[0] * 2,))
    elif kind == "post":
        handle = net.register_forward_hook(lambda mod, args, out: out * 0)
    else:
        handle = net.register_full_backward_hook(lambda mod, gin, gout: gin)
    with pytest.raises(TraceError, match=r"module this was traced from \(Sequential\)"):
        traced(x)
    handle.remove()
    torch.testing.assert_close(traced(x), net(x))


def test_a_backward_hook_of_the_module_traced_raises_at_backward_naming_it():
    net = _net()
    net.register_full_backward_pre_hook(lambda mod, grad: (grad[0].clamp(-0.01, 0.01),))
    traced = tracebridge.trace(net, torch.rand(3, 4))
    x = torch.rand(2, 4)
    with torch.no_grad():
        torch.testing.assert_close(traced(x), net(x))  # served without autograd
    with pytest.raises(TraceError, match=r"module it was traced from \(Sequential\)"):
        traced(x).sum().backward()


def test_a_traced_function_refuses_once_a_module_it_called_changed():
    """A function calling a model holds the model's forward hooks' and children's work
    (prober20b F13): a change there is refused, as on a traced module's sub-modules."""
    net = _net()
    traced = tracebridge.trace(lambda x: net(x).softmax(-1), torch.rand(3, 4))
    x = torch.rand(2, 4)
    torch.testing.assert_close(traced(x), net(x).softmax(-1))
    handle = net[0].register_forward_hook(lambda mod, args, out: out * 2)
    with pytest.raises(TraceError, match="called a Linear whose forward hooks changed"):
        traced(x)
    handle.remove()
    torch.testing.assert_close(traced(x), net(x).softmax(-1))  # as traced again
    net[1] = nn.Tanh()
    with pytest.raises(TraceError, match="called a Sequential whose sub-modules changed"):
        traced(x)
