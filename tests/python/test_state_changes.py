"""A traced module whose buffer an eager call rebuilt since the trace (timm ConViT's
``rel_indices``, prober19 F10): the refusal names the buffer and what to do, not the
call's inputs (runtime/state_changes.py). The trace still reads the state as it is now:
writes in place after tracing are followed."""

from __future__ import annotations

import io

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import GuardError

pytestmark = pytest.mark.usefixtures("quiet_warnings")


class LazyTable(nn.Module):
    """A buffer rebuilt when the sequence length changes, as ConViT's rel_indices."""

    def __init__(self):
        super().__init__()
        self.register_buffer("rel", torch.zeros(1, 1), persistent=False)
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        n = x.shape[1]
        if self.rel.shape[1] != n:
            self.rel = torch.arange(n).float().unsqueeze(0)
        return self.lin(x) + self.rel.unsqueeze(-1)


def test_a_buffer_rebuilt_since_the_trace_is_named_in_the_refusal():
    model = LazyTable()
    x = torch.randn(2, 5, 4)
    traced = tracebridge.trace(model, x)
    buffer = io.BytesIO()
    traced.save(buffer)
    loaded = tracebridge.load(buffer.getvalue())
    expected = LazyTable()
    expected.load_state_dict(model.state_dict())
    for size in (5, 7, 5):
        y = torch.randn(2, size, 4)
        assert torch.allclose(traced(y), expected(y), atol=1e-6)
    model(x)  # an eager call rebuilds the buffer
    assert model.rel.shape == (1, 5)
    for call in (traced, traced.forward):
        with pytest.raises(GuardError) as info:
            call(x)
        message = str(info.value)
        assert "state changed since the trace: buffer 'rel'" in message
        assert "float32[1, 1] when traced, float32[1, 5] now" in message
        assert "inputs like this one" not in message
        assert "if self.rel.shape[1] != n:" in message
    assert torch.allclose(loaded(x), expected(x), atol=1e-6)  # the copy keeps its state
    model.rel = torch.zeros(1, 1)  # put back as traced: served again
    assert torch.allclose(traced(x), expected(x), atol=1e-6)


def test_a_refusal_for_the_inputs_keeps_its_advice():
    class Branch(nn.Module):
        def forward(self, x):
            return x * 2 if bool(x.sum() > 0) else -x

    traced = tracebridge.trace(Branch(), torch.ones(4))
    with pytest.raises(GuardError, match="inputs like this one"):
        traced(-torch.ones(4))


def test_state_written_in_place_after_tracing_is_still_read():
    model = LazyTable()
    x = torch.randn(2, 5, 4)
    traced = tracebridge.trace(model, x)
    with torch.no_grad():
        model.lin.weight.mul_(2)
    assert torch.allclose(traced(x), model(x), atol=1e-6)
