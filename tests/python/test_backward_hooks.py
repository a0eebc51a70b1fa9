"""A sub-module's backward hook present at trace time (full, pre, legacy, or a global module
backward hook): a trace never runs it, so a backward through a call of the trace raises,
naming the sub-module and the kind of hook, while it stays registered (api.py, note on
backward hooks; prober20b F4: the gradients were silently the hook-less ones). Calls
without autograd are served; a hook removed since gives the eager gradients again."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch.nn.modules import module as module_hooks

import tracebridge
from tracebridge.errors import TraceError


def _net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2))


def _clip(module, grad_output):
    return (grad_output[0].clamp(-0.01, 0.01),)


def _triple(module, grad_input, grad_output):
    return tuple(None if g is None else g * 3 for g in grad_input)


HOOKS = {
    "pre": (lambda m: m.register_full_backward_pre_hook(_clip), "backward pre-hook"),
    "full": (lambda m: m.register_full_backward_hook(_triple), "full backward hook"),
    "legacy": (
        lambda m: m.register_backward_hook(_triple),
        r"backward hook \(register_backward_hook\)",
    ),
}


def _grad(net, call, x) -> torch.Tensor:
    net.zero_grad(set_to_none=True)
    call(x).sum().mul(10).backward()
    return net[0].weight.grad.clone()


@pytest.mark.filterwarnings("ignore::FutureWarning")  # torch's own, on the legacy hook
@pytest.mark.parametrize("kind", list(HOOKS))
def test_a_backward_through_the_trace_raises_while_the_hook_is_registered(kind):
    net = _net()
    register, words = HOOKS[kind]
    handle = register(net[2])
    with pytest.warns(
        tracebridge.TracerWarning,
        match=rf"{words}.* of sub-module '2' was registered while tracing",
    ):
        traced = tracebridge.trace(net, (torch.randn(2, 4),))
    x = torch.randn(3, 4)
    hooked = _grad(net, net, x)
    torch.testing.assert_close(traced(x), net(x))  # forward is served
    with pytest.raises(TraceError, match=rf"would skip the {words}.* of sub-module '2'"):
        _grad(net, traced, x)
    for off in (torch.no_grad, torch.inference_mode):  # calls without autograd: served
        with off():
            torch.testing.assert_close(traced(x), net(x))
    handle.remove()
    plain = _grad(net, net, x)
    assert not torch.allclose(plain, hooked)  # the hook changed the gradients
    torch.testing.assert_close(_grad(net, traced, x), plain)


def test_calls_without_autograd_are_served_where_the_example_required_grad():
    # The recording no longer reads requires_grad for the hooks (they are set aside while
    # recording): an input that requires grad at trace time, none at call time, is served.
    net = _net()
    net[2].register_full_backward_hook(_triple)
    example = torch.randn(2, 4, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracebridge.trace(net, (example,))
    assert traced.guards == []
    x = torch.randn(5, 4)
    with torch.no_grad():
        torch.testing.assert_close(traced(x), net(x))
    torch.testing.assert_close(traced(x.requires_grad_()).detach(), net(x).detach())


def test_a_hook_added_after_tracing_is_still_refused_and_one_removed_is_not():
    net = _net()
    first = net[2].register_full_backward_pre_hook(_clip)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracebridge.trace(net, (torch.randn(2, 4),))
    x = torch.randn(3, 4)
    first.remove()
    torch.testing.assert_close(_grad(net, traced, x), _grad(net, net, x))
    second = net[2].register_full_backward_pre_hook(_clip)
    with pytest.raises(TraceError, match=r"sub-module '2' .* other hooks than when it was traced"):
        traced(x)
    second.remove()
    torch.testing.assert_close(_grad(net, traced, x), _grad(net, net, x))


def test_a_global_module_backward_hook_and_a_traced_function():
    net = _net()
    handle = module_hooks.register_module_full_backward_pre_hook(_clip)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            traced = tracebridge.trace(net, (torch.randn(2, 4),))
        with pytest.raises(
            TraceError, match=r"register_module_full_backward_pre_hook\) of every module"
        ):
            _grad(net, traced, torch.randn(3, 4))
    finally:
        handle.remove()
    x = torch.randn(3, 4)
    torch.testing.assert_close(_grad(net, traced, x), _grad(net, net, x))

    hook = net[0].register_full_backward_hook(_triple)

    def predict(x):
        return net(x) * 2

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced_function = tracebridge.trace(predict, (torch.randn(2, 4),))
    with pytest.raises(TraceError, match=r"full backward hook .* of the Linear it called"):
        traced_function(x).sum().backward()
    with torch.no_grad():
        torch.testing.assert_close(traced_function(x), predict(x))
    hook.remove()
    net.zero_grad(set_to_none=True)
    predict(x).sum().backward()
    eager = net[0].weight.grad.clone()
    net.zero_grad(set_to_none=True)
    traced_function(x).sum().backward()
    torch.testing.assert_close(net[0].weight.grad, eager)


def test_another_traced_method_refuses_the_backward_too():
    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x):
            return self.fc(x)

        def encode(self, x):
            return self.fc(x) * 2

    model = Encoder()
    model.fc.register_full_backward_hook(_triple)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracebridge.trace_module(
            model, {"forward": torch.randn(2, 3), "encode": torch.randn(2, 3)}
        )
    x = torch.randn(2, 3, requires_grad=True)
    with pytest.raises(TraceError, match="sub-module 'fc'"):
        traced.encode(x).sum().backward()
    with torch.no_grad():
        torch.testing.assert_close(traced.encode(x), model.encode(x))


def test_a_model_without_backward_hooks_keeps_the_fast_call():
    traced = tracebridge.trace(_net(), (torch.randn(2, 4),))
    assert traced._tb_fast is not None
    out = traced(torch.randn(3, 4))
    assert not getattr(out, "_tb_backward_refused", False)
