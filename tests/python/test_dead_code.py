"""The generated code leaves out what nothing needs, writes into unseen tensors included
(issue 20, item 5; runtime/dead_code.py).

BigBird builds a full attention-probability matrix in every layer (a ``zeros``, slice
writes, ``scatter_``) that its caller drops: ``torch.jit`` removes it, and so does the
generated code. Every result stays bit for bit the interpreter's (which runs every node),
and every write that anything may see, every guard and every random op stays.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.ir import Graph, Node, Ref, Value
from tracebridge.runtime import dead_code

from .graph_helpers import loaded

# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


def _same_as_interpreter(traced, tmp_path, *inputs):
    fast = loaded(traced, tmp_path)
    plain = tracebridge.load(tmp_path / "m.tb", runtime="interpreter")
    a, b = fast(*inputs), plain(*inputs)
    a = a if isinstance(a, tuple) else (a,)
    b = b if isinstance(b, tuple) else (b,)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert torch.equal(x, y)
    return fast


class DroppedProbabilities(nn.Module):
    """BigBird's pattern: a matrix assembled by writes into ``zeros``, returned by a helper
    whose caller keeps only the context."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def attend(self, x):
        scores = (self.proj(x) @ x.transpose(1, 2)).softmax(-1)
        probs = torch.zeros(x.shape[0], x.shape[1], x.shape[1] * 2)
        probs[:, :, : x.shape[1]] = scores
        view = probs.view(x.shape[0], x.shape[1], 2, x.shape[1])
        view[:, :, 1].copy_(scores * 2)
        probs.mul_(0.5)
        return scores @ x, probs

    def forward(self, x):
        context, _probs = self.attend(x)
        return context.relu()


def test_writes_into_a_dropped_tensor_are_left_out(tmp_path):
    x = torch.randn(2, 5, 8)
    traced = tracebridge.trace(DroppedProbabilities(), x)
    full = traced.program.methods["forward"]
    assert any(n.op == "setitem" for n in full.nodes)  # the trace records them
    kept = dead_code.prune(full)
    left = {n.op for n in kept.nodes}
    assert not left & {"zeros", "setitem", "Tensor.copy_", "Tensor.mul_"}
    assert "setitem" not in traced.code and "zeros" not in traced.code
    _same_as_interpreter(traced, tmp_path, x)
    _same_as_interpreter(traced, tmp_path, torch.randn(3, 7, 8))


class ReturnedThroughAView(nn.Module):
    def forward(self, x):
        out = torch.zeros(x.shape[0], 4)
        shown = out[:, :2]  # a view of the written tensor is what the graph returns
        out[:, 1] = x.sum(1)
        out.add_(1)
        return shown


class WritesItsInput(nn.Module):
    def forward(self, x):
        y = x * 2
        x.add_(1)  # the caller sees its input change
        return y


class StatsUpdate(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(()))
        self.bn = nn.BatchNorm1d(3)

    def forward(self, x):
        self.count.add_(1)  # a write into state, whose result nothing reads
        self.bn(x)  # running statistics updated, the result dropped
        return x + 1


class ReadBeforeTheWrite(nn.Module):
    def forward(self, x):
        buf = torch.zeros(x.shape)
        first = buf + x  # reads buf before the write below: the write is kept
        buf.add_(x)
        return first, buf.sum()


def test_writes_anything_may_see_stay(tmp_path):
    x = torch.randn(3, 5)
    traced = tracebridge.trace(ReturnedThroughAView(), x)
    assert "setitem" in traced.code and "add_" in traced.code
    _same_as_interpreter(traced, tmp_path, x)

    traced = tracebridge.trace(ReadBeforeTheWrite(), x)
    assert "add_" in traced.code
    _same_as_interpreter(traced, tmp_path, x)

    traced = tracebridge.trace(WritesItsInput(), x.clone())
    x1, x2 = x.clone(), x.clone()
    loaded(traced, tmp_path)(x1)
    traced(x2)
    assert torch.equal(x1, x + 1) and torch.equal(x2, x + 1)

    model = StatsUpdate().train()
    traced = tracebridge.trace(model, torch.randn(4, 3), respect_mode=False)
    again = loaded(traced, tmp_path).train()
    before = again.state_dict()["count"].clone(), again.state_dict()["bn.running_mean"].clone()
    again(torch.randn(4, 3))
    assert torch.equal(again.state_dict()["count"], before[0] + 1)
    assert not torch.equal(again.state_dict()["bn.running_mean"], before[1])


class DroppedNoise(nn.Module):
    def forward(self, x):
        _noise = torch.rand(x.shape)  # unused, but it moves the generator
        return x + torch.rand(x.shape)


def test_random_ops_and_guards_stay(tmp_path):
    x = torch.randn(2, 3)
    traced = tracebridge.trace(DroppedNoise(), x)
    assert traced.code.count("rand") >= 2
    fast = loaded(traced, tmp_path)
    torch.manual_seed(5)
    torch.rand(2, 3)  # what the dropped draw takes from the generator
    expected = x + torch.rand(2, 3)
    torch.manual_seed(5)
    assert torch.equal(fast(x), expected)


def test_prune_keeps_guards_and_unknown_effects():
    x = Value(0, "Tensor", "float32", [2])
    n = Value(1, "int", None, None)
    b = Value(2, "bool", None, None)
    dead = Value(3, "Tensor", "float32", [2])
    graph = Graph(
        inputs=[x],
        nodes=[
            Node("prim.size", [Ref(0), 0], {}, [n], {"t": "leaf"}),
            Node("scalar.eq", [Ref(1), 2], {}, [b], {"t": "leaf"}),
            Node("prim.guard", [Ref(2)], {"expect": True}, [], None),
            Node("relu", [Ref(0)], {}, [dead], {"t": "leaf"}),
        ],
        outputs=[Ref(0)],
        out_spec={"t": "leaf"},
    )
    kept = dead_code.prune(graph)
    assert [node.op for node in kept.nodes] == ["prim.size", "scalar.eq", "prim.guard"]


# A count of results is an assumption of the trace, also where nothing reads the results
# (prober17): pruning the node took the count's check with it, and every later call was
# the empty loop's, or the traced count's, silently.


def pool_hits(scores, feats):
    """Detection post-processing: the features of the boxes over a threshold, summed."""
    out = torch.zeros(feats.shape[1])
    for i in (scores > 0.5).nonzero()[:, 0]:
        out = out + feats[i]
    return out


def count_valid(x, m):
    return x * sum(1 for _ in m[m > 0])


def total(x):
    return sum(x.unbind(0)) + x.sum(0)


@pytest.mark.parametrize(
    ("fn", "traced_on", "called_on", "count"),
    [
        # traced where no box passed: a loop of no iterations, a node of no results
        (
            pool_hits,
            (torch.tensor([0.1, 0.2]), torch.ones(2, 3)),
            (torch.tensor([0.9, 0.7]), torch.ones(2, 3)),
            "0 results, but now it gives 2",
        ),
        (total, (torch.ones(0, 3),), (torch.ones(4, 3),), "0 results, but now it gives 4"),
        # only the number of iterations is used
        (
            count_valid,
            (torch.ones(3), torch.tensor([1.0, -1.0])),
            (torch.ones(3), torch.tensor([1.0, 1.0])),
            "1 results, but now it gives 2",
        ),
    ],
)
def test_a_count_nothing_reads_is_still_checked(tmp_path, fn, traced_on, called_on, count):
    traced = tracebridge.trace(fn, traced_on, check_trace=False)
    traced.save(tmp_path / "f.tb")
    for runtime in ("codegen", "interpreter"):
        again = tracebridge.load(tmp_path / "f.tb", runtime=runtime)
        assert torch.equal(again(*traced_on), fn(*traced_on))  # the traced count: runs
    gm = tracebridge.to_graph_module(traced)
    for obj in (traced, tracebridge.load(tmp_path / "f.tb"), gm):
        with pytest.raises(tracebridge.GuardError, match=count):
            obj(*called_on)
    kept = dead_code.prune(traced.program.methods["forward"])
    assert any(dead_code.counts_results(n) for n in kept.nodes)
