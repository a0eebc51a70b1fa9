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
