"""State that the graph itself writes without moving its version (a batch norm's running
statistics in training, written inside ATen's kernel) is never kept across calls: a value
folded (runtime/folding.py) or memoised (runtime/memo.py) from it, keyed on its version,
would be the first call's on every later call (runtime/caller_memory.unversioned_state)."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tracebridge
from tracebridge.runtime import caller_memory


class RenormBN(nn.Module):
    """Running statistics of its own (no num_batches_tracked), read before the batch norm
    that updates them: a renorm-style correction."""

    def __init__(self, n):
        super().__init__()
        self.register_buffer("rmean", torch.zeros(n))
        self.register_buffer("rvar", torch.ones(n))

    def forward(self, x):
        r = (x.var(0, unbiased=False) / self.rvar).clamp(1 / 3, 3).sqrt()
        d = ((x.mean(0) - self.rmean) / self.rvar.sqrt()).clamp(-5, 5)
        y = F.batch_norm(x, self.rmean, self.rvar, training=True, momentum=0.1)
        return y * r + d


class SizedScale(nn.Module):
    """A value of sizes and a buffer (a memo's kind), the buffer then written by the batch
    norm."""

    def __init__(self, n):
        super().__init__()
        self.register_buffer("rmean", torch.zeros(n))
        self.register_buffer("rvar", torch.ones(n))

    def forward(self, x):
        scale = torch.arange(x.shape[1], dtype=x.dtype) + 1 / self.rvar
        y = F.batch_norm(x, self.rmean, self.rvar, training=True, momentum=0.5)
        return y * scale


def _loaded(traced, tmp_path, module):
    path = tmp_path / "m.tb"
    traced.save(path)
    loaded = tracebridge.load(path)
    loaded.load_state_dict(module.state_dict())
    return loaded


@pytest.mark.parametrize(
    ("cls", "shape"), [(RenormBN, (8, 3)), (SizedScale, (4, 3))], ids=["fold", "memo"]
)
def test_kernel_written_buffer_is_read_afresh_on_every_call(tmp_path, cls, shape):
    torch.manual_seed(0)
    eager = cls(3).train()
    source = copy.deepcopy(eager)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tracebridge.TracerWarning)
        traced = tracebridge.trace(source, torch.randn(*shape))
    loaded = _loaded(traced, tmp_path, source)
    runs = [(traced, source), (loaded, loaded)]
    for step in range(4):
        x = torch.randn(*shape) * 2 + step
        with torch.no_grad():
            expected = eager(x)
            for run, holder in runs:
                assert torch.allclose(run(x), expected, atol=1e-5), (step, run)
                assert torch.allclose(holder.rvar, eager.rvar, atol=1e-6), (step, run)


def test_unversioned_state_names_the_written_statistics():
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tracebridge.TracerWarning)
        traced = tracebridge.trace(RenormBN(3).train(), torch.randn(8, 3))
        frozen = tracebridge.trace(nn.BatchNorm1d(3).eval(), torch.randn(8, 3))
    graph = traced.program.methods["forward"]
    reads = {n.outputs[0].id: n.args[0] for n in graph.nodes if n.op == "prim.state"}
    found = caller_memory.unversioned_state(graph)
    assert sorted(reads[i] for i in found) == ["rmean", "rvar"]
    # in evaluation mode a batch norm writes nothing: its statistics may be kept
    assert caller_memory.unversioned_state(frozen.program.methods["forward"]) == set()
