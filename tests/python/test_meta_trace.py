"""Tracing on the meta device with the default checks (check_trace=True): every check that
needs values skips meta tensors, the rest (graphs traced again, guards, output shapes and
dtypes, other sizes) still runs, and one warning says which checks could not run."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import tracebridge
from tracebridge.errors import TracerWarning, TracingCheckError


class Block(nn.Module):
    """A small transformer block: layer norm, attention, MLP."""

    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(16)
        self.attn = nn.MultiheadAttention(16, 4, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16))

    def forward(self, x):
        h = self.norm(x)
        a, _ = self.attn(h, h, h, need_weights=False)
        x = x + a
        return x + self.mlp(x)


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        return self.fc(F.adaptive_avg_pool2d(F.relu(self.bn(self.conv(x))), 1).flatten(1))


class SizeBranch(nn.Module):
    """Buffers (one non-persistent) and control flow on a size."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.register_buffer("scale", torch.ones(8))
        self.register_buffer("pos", torch.arange(32.0), persistent=False)

    def forward(self, x):
        if x.size(1) > 4:
            x = x[:, :4]
        y = self.lin(x) * self.scale
        return y + self.pos[: y.size(1)].unsqueeze(-1)


class Counter(nn.Module):
    """Python state changed by each call (check/repeated.py's case)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.lin(x)


CASES = [
    ("linear", lambda: nn.Linear(4, 2), lambda: (torch.randn(3, 4),)),
    ("embedding", lambda: nn.Embedding(10, 4), lambda: (torch.randint(0, 10, (2, 3)),)),
    ("block", Block, lambda: (torch.randn(2, 5, 16),)),
    ("conv", ConvNet, lambda: (torch.randn(2, 3, 8, 8),)),
    ("size branch", SizeBranch, lambda: (torch.randn(2, 6, 8),)),
    ("counter", Counter, lambda: (torch.randn(2, 4),)),
]


def _meta_warnings(record) -> list[str]:
    return [str(w.message) for w in record if "on the meta device: meta tensors" in str(w.message)]


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("name,make,inputs", CASES, ids=[c[0] for c in CASES])
def test_meta_trace_with_default_checks(name, make, inputs, training):
    torch.manual_seed(0)
    real = make().train(training)
    with torch.device("meta"):
        meta = make().train(training)
    example = inputs()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        traced = tracebridge.trace(meta, tuple(t.to("meta") for t in example))
    told = _meta_warnings(record)
    assert len(told) == 1, told  # once per trace, not once per check
    assert "Not run: the comparison of output values" in told[0]
    # The trace serves real weights: the meta trace given the real module's state.
    out = traced(*(t.to("meta") for t in example))
    expected = real(*example)
    assert out.shape == expected.shape and out.dtype == expected.dtype and out.is_meta
    traced.load_state_dict(real.state_dict(), assign=True)
    for buffer_name, buffer in real.named_buffers():
        owner, _, leaf = buffer_name.rpartition(".")
        target = traced.get_submodule(owner) if owner else traced
        setattr(target, leaf, buffer)  # non-persistent buffers too
    torch.testing.assert_close(traced(*example), real(*example))


def _unit():
    return 1.0


def _first_rows(x):
    # float arithmetic on a size, the float made by a call: baked without a guard (a float
    # the source shows is guarded: trace/unseen_reads.py), so only the check finds it
    return x[: int(_unit() * x.shape[0]) - 1]


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_meta_checks_still_catch_a_baked_size(device):
    """On meta the outputs' shapes are still compared at another batch size: a size baked
    by Python arithmetic is refused as on the CPU."""
    with pytest.raises(TracingCheckError, match="does not generalise from batch size 3 to 4"):
        tracebridge.trace(_first_rows, torch.randn(3, 4, device=device))


def test_meta_function_with_a_meta_constant():
    """A kept constant would be checked with moved input values: not on meta."""
    kept = torch.ones(3, device="meta")

    def f(x):
        return x * kept

    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        traced = tracebridge.trace(f, torch.randn(2, 3, device="meta"))
    assert len(_meta_warnings(record)) == 1
    assert traced(torch.randn(5, 3, device="meta")).shape == (5, 3)


def test_a_model_whose_code_reads_values_outside_the_tracer():
    """Library code may read values when no tracer runs (transformers' masks): the check
    cannot run the code on meta, compares the graphs traced again only, and says so."""

    class ReadsWhenEager(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            if not torch.jit.is_tracing() and bool((x > 0).all()):
                x = x * 2
            return self.lin(x)

    with torch.device("meta"):
        meta = ReadsWhenEager().eval()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        traced = tracebridge.trace(meta, torch.randn(2, 4, device="meta"))
    told = _meta_warnings(record)
    assert len(told) == 1
    assert "does not run on meta tensors outside the tracer" in told[0]
    assert "compared each graph traced again" in told[0]
    assert traced(torch.randn(3, 4, device="meta")).shape == (3, 4)


def test_no_meta_warning_on_the_cpu():
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        tracebridge.trace(nn.Linear(4, 2), torch.randn(3, 4))
    assert not _meta_warnings(record)
    assert not [w for w in record if issubclass(w.category, TracerWarning)]


class BatchOneBranch(nn.Module):
    """Reads values when no tracer runs (as transformers' masks do) and decides on the
    batch size: a trace at batch 2 gets a size-1 graph (check/specialise.py)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        if not torch.jit.is_tracing() and bool((x != 0).all()):
            pass  # a value read: impossible on meta outside the tracer
        if x.shape[0] > 1:
            x = x - x.mean(0, keepdim=True)
        return self.lin(x)


def test_size_one_graphs_of_code_that_runs_on_meta_only_when_traced(tmp_path):
    """No eager run on meta can say the model serves batch 1: the recording at batch 1,
    which runs the code on its traced path, decides, so batch 1 is served after loading."""
    from safetensors.torch import save_file

    torch.manual_seed(0)
    real = BatchOneBranch().eval()
    save_file(dict(real.state_dict()), tmp_path / "w.safetensors")
    with torch.device("meta"):
        meta = BatchOneBranch().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracebridge.trace(meta, torch.randn(2, 4, device="meta"))
    assert traced.program.specialised  # a graph for batch 1 beside the first
    traced.save(tmp_path / "m.tb")
    loaded = tracebridge.load(tmp_path / "m.tb", weights=tmp_path / "w.safetensors")
    for batch in (1, 2, 3):
        x = torch.randn(batch, 4)
        torch.testing.assert_close(loaded(x), real(x))
