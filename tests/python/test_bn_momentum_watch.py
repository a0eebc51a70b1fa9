"""A batch norm's momentum, held by a graph recorded in training mode, set anew after
tracing (torch.optim.swa_utils.update_bn sets None for its passes): the call is refused
(runtime/module_tree.py), where the statistics it wrote were silently other than eager's."""

import pytest
import torch
from torch import nn
from torch.optim.swa_utils import update_bn

import tracebridge
from tracebridge.errors import TraceError


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten())


def test_update_bn_through_a_training_trace_is_refused_naming_the_norm():
    net = _net().train()
    traced = tracebridge.trace(net, torch.randn(2, 3, 6, 6), respect_mode=True)
    with pytest.raises(TraceError, match="momentum of batch norm '1' is None now"):
        update_bn([torch.randn(8, 3, 6, 6)], traced)


def test_the_momentum_it_was_traced_with_serves_as_before():
    net = _net().train()
    reference = _net().train()
    traced = tracebridge.trace(net, torch.randn(2, 3, 6, 6))
    x = torch.randn(4, 3, 6, 6)
    net[1].momentum = 0.3
    with pytest.raises(TraceError, match="momentum"):
        traced(x)
    net[1].momentum = 0.1  # put back: served, the statistics as eager's
    net[1].reset_running_stats()
    traced(x)
    reference(x)
    torch.testing.assert_close(net[1].running_mean, reference[1].running_mean)


def test_the_changed_norm_is_named_and_guards_off_let_the_call_through():
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Conv2d(4, 4, 1), nn.BatchNorm2d(4)
    ).train()
    traced = tracebridge.trace(net, torch.randn(2, 3, 6, 6))
    x = torch.randn(2, 3, 6, 6)
    traced(x)
    net[3].momentum = 0.5  # the second norm: the first is as traced
    with pytest.raises(TraceError, match="momentum of batch norm '3' is 0.5 now"):
        traced(x)
    with tracebridge.guards_disabled():
        traced(x)  # the mode and momentum checks are guards: off, the call runs
    net[3].momentum = 0.1
    traced(x)
