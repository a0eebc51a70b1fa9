"""The trace check compares the recording with the code (runtime/method.py, ``as_recorded``):
calls without autograd fold each evaluation-mode batch norm into its convolution, which
agrees with eager only to rounding (through timm's efficientnetv2_rw_t at one thread, 4.5e-5
relative: the check refused a right trace), so the check's calls run the graph as recorded."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.runtime.method import as_recorded

pytestmark = pytest.mark.usefixtures("quiet_warnings")


def _conv_bn() -> nn.Module:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 3))
    with torch.no_grad():
        net[1].running_mean.uniform_(-1, 1)
        net[1].running_var.uniform_(0.5, 2)
    return net.eval()


def test_the_check_of_a_trace_made_without_autograd_runs_the_recorded_graph():
    with torch.no_grad():
        traced = tracebridge.trace(_conv_bn(), torch.randn(2, 3, 9, 9))
    method = traced._methods["forward"]
    # (guards on, without autograd's code): only the recorded graph's code was made
    assert set(method._compiled) == {(True, False)}
    x = torch.randn(2, 3, 11, 11)
    with torch.no_grad():
        folded = traced(x)
        with as_recorded():
            recorded = traced(x)
    assert set(method._compiled) == {(True, False), (True, True)}
    with torch.enable_grad():
        assert torch.equal(recorded, traced(x).detach())  # the code calls with autograd run
    torch.testing.assert_close(folded, recorded)  # folded: the same to rounding


def test_as_recorded_is_per_thread_and_nests():
    import threading

    traced = tracebridge.trace(_conv_bn(), torch.randn(2, 3, 9, 9))
    method = traced._methods["forward"]
    seen = []

    def other_thread():
        with torch.no_grad():
            traced(torch.randn(1, 3, 9, 9))
        seen.append(set(method._compiled))

    with as_recorded(), torch.no_grad():
        with as_recorded():
            traced(torch.randn(1, 3, 9, 9))
        traced(torch.randn(1, 3, 9, 9))  # still inside the outer block
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
    assert (True, True) in seen[0]  # the other thread folded
    with torch.no_grad():
        traced(torch.randn(1, 3, 9, 9))
    assert (True, True) in method._compiled
