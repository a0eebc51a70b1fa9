"""Known gap (runtime/folding.py, runtime/memo.py; found by benchmarks/snippet_trial.py's
probes): a call without autograd reuses values folded from the state (a convolution with
its evaluation-mode batch norm folded in) while the state tensors keep their identity,
version and data pointer. An in-place write through ``.data`` (``p.data.mul_(2)``, weight
clipping, old optimisers) changes none of the three -- PyTorch gives ``.data`` a version
counter of its own -- so the next call without autograd uses the old weights. Writes
through the tensor itself (optimisers, ``torch.no_grad()`` updates, ``load_state_dict``,
``.data = ...``) are seen. Strict xfail: it fails once the runtime sees these writes."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tracebridge

pytestmark = pytest.mark.usefixtures("quiet_warnings")


@pytest.mark.xfail(
    strict=True,
    reason="runtime: folded values are cached by identity, _version and data pointer, and "
    "an in-place write through .data changes none of them",
)
def test_a_write_through_data_reaches_the_next_call_without_autograd():
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()).eval()
    x = torch.randn(2, 3, 8, 8)
    traced = tracebridge.trace(net, x)
    with torch.no_grad():
        traced(x)
        for p in net.parameters():
            p.data.mul_(1.5)
        torch.testing.assert_close(traced(x), net(x))


def test_writes_through_the_tensor_are_seen():
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()).eval()
    x = torch.randn(2, 3, 8, 8)
    traced = tracebridge.trace(net, x)
    with torch.no_grad():
        traced(x)
        for p in net.parameters():
            p.mul_(1.5)
        torch.testing.assert_close(traced(x), net(x))
