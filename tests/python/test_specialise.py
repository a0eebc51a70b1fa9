"""Size specialisation where sizes decide together (issue 12, item 4; check/specialise.py).

An encoder-decoder asks ``q_len > 1`` of the source and of the target (transformers'
sdpa_attention, T5 and BART): a trace made with both lengths above 1 must serve a call with
both at 1, which neither graph cut at one length serves. Every test asserts results
against eager, in process and after save/load.
"""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tracebridge
from tracebridge import GuardError
from tracebridge.check import specialise
from tracebridge.trace.capture import capture

# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


def close(a, b):
    return torch.allclose(a, b, atol=1e-5, rtol=1e-5)


def attend(x):
    # transformers/integrations/sdpa_attention.py: is_causal = q_length > 1 and ...
    return F.scaled_dot_product_attention(x, x, x, is_causal=x.shape[1] > 1)


class EncoderDecoder(nn.Module):
    """Two sequence inputs, each branching on its length; with ``positions``, a branch on
    the batch size too (transformers: ``if emb.shape[0] != position_ids.shape[0]``)."""

    def __init__(self, positions: bool = True):
        super().__init__()
        self.positions = positions
        self.enc = nn.Linear(8, 8)
        self.dec = nn.Linear(8, 8)

    def forward(self, src, tgt):
        memory = attend(self.enc(src))
        out = attend(self.dec(tgt))
        out = F.scaled_dot_product_attention(out, memory, memory)
        if self.positions:
            where = torch.arange(tgt.shape[1], dtype=out.dtype)[None, :, None]
            if where.shape[0] != out.shape[0]:
                where = where.expand(out.shape[0], -1, -1)
            out = out + where
        return out


def size_one_heads(graph) -> int:
    """How many size-1 guards a specialisation starts with."""
    what = "(a graph specialised for size 1)"
    return sum(1 for n in graph.nodes if n.op == "prim.guard" and what in n.kwargs["what"])


def every_shape():
    for batch, src, tgt in itertools.product((1, 2, 3), (1, 6, 5), (1, 4, 3)):
        yield torch.randn(batch, src, 8), torch.randn(batch, tgt, 8)


def test_both_lengths_at_1_are_served_after_save_and_load(tmp_path):
    m = EncoderDecoder(positions=False).eval()
    traced = tracebridge.trace(m, (torch.randn(2, 6, 8), torch.randn(2, 4, 8)))
    variants = traced.program.specialised["forward"]
    # The source alone, the target alone, and both: the batch decides nothing here.
    assert len(variants) == 3
    assert size_one_heads(traced.program.methods[variants[0]]) == 2
    traced.save(tmp_path / "m.tb")
    loaded = tracebridge.load(tmp_path / "m.tb")
    assert loaded.program.specialised == traced.program.specialised
    for src, tgt in every_shape():
        want = m(src, tgt)
        assert close(traced(src, tgt), want), (src.shape, tgt.shape)
        assert close(loaded(src, tgt), want), (src.shape, tgt.shape)


def test_three_sizes_combine_and_the_most_specific_graph_comes_first(tmp_path):
    m = EncoderDecoder().eval()
    traced = tracebridge.trace(m, (torch.randn(2, 6, 8), torch.randn(2, 4, 8)))
    graphs = [traced.program.methods[v] for v in traced.program.specialised["forward"]]
    heads = [size_one_heads(g) for g in graphs]
    # Each size-1 guard checks one dimension: the batch is two (src and tgt).
    assert heads == sorted(heads, reverse=True) and heads[0] == 4, heads
    traced.save(tmp_path / "m.tb")
    loaded = tracebridge.load(tmp_path / "m.tb")
    for src, tgt in every_shape():
        want = m(src, tgt)
        assert close(traced(src, tgt), want), (src.shape, tgt.shape)
        assert close(loaded(src, tgt), want), (src.shape, tgt.shape)


class DataGuard(nn.Module):
    """Both lengths decide, and so does the data: no specialisation covers the data."""

    def forward(self, a, b):
        x = attend(a) + attend(b).mean(1, keepdim=True)
        if x.sum() > 1e6:
            return x * 0
        return x


@pytest.mark.parametrize("runtime", ["codegen", "interpreter"])
def test_a_call_that_no_graph_serves_still_raises_guard_error(runtime):
    m = DataGuard()
    traced = tracebridge.trace(m, (torch.randn(2, 5, 4), torch.randn(2, 3, 4)), runtime=runtime)
    assert len(traced.program.specialised["forward"]) == 3
    a, b = torch.randn(1, 1, 4), torch.randn(1, 1, 4)
    assert close(traced(a, b), m(a, b))
    # The refusal is the data guard of the graph made for these sizes, not a size guard.
    with pytest.raises(GuardError, match="x.sum"):
        traced(a + 1e7, b)
    with pytest.raises(GuardError, match="x.sum"):
        traced(torch.randn(2, 5, 4) + 1e7, torch.randn(2, 3, 4))


class ManyLengths(nn.Module):
    """Six sequence inputs, each branching on its own length."""

    def forward(self, *xs):
        return sum(attend(x).sum(1) for x in xs)


def test_the_number_of_traces_is_bounded():
    m = ManyLengths()
    xs = tuple(torch.randn(1, n, 1) for n in range(2, 8))
    calls = {"eager": 0, "trace": 0}

    def run_eager(a, k):
        calls["eager"] += 1
        return m(*a, **k)

    def retrace(a, k):
        calls["trace"] += 1
        return capture(m, a, k)

    graph = capture(m, xs, {})
    found = specialise.specialisations(graph, xs, {}, run_eager, retrace)
    bound = specialise.PROBES + 2**specialise.JOINT - specialise.JOINT - 1
    assert calls["trace"] <= bound and calls["eager"] <= bound
    # Every length decides, so each single cut and each combination of JOINT gives a graph.
    assert len(found) == bound
    assert [size_one_heads(g) for g in found][0] == specialise.JOINT


def test_a_refused_graph_hands_the_call_to_the_next_whose_guards_hold():
    m = EncoderDecoder(positions=False).eval()
    traced = tracebridge.trace(m, (torch.randn(2, 6, 8), torch.randn(2, 4, 8)))
    chain = traced._methods["forward"].methods
    src, tgt = torch.randn(2, 1, 8), torch.randn(2, 4, 8)
    served = []
    for method in chain:
        try:
            out = method(src, tgt)
        except GuardError:
            continue
        served.append(method.name)
        assert close(out, m(src, tgt))
    # Only the graph cut at the source length holds on this call.
    assert len(served) == 1
    assert close(traced(src, tgt), m(src, tgt))


def test_specialisations_stop_at_the_budget_and_what_is_dropped_is_refused(monkeypatch):
    m = EncoderDecoder(positions=False).eval()
    example = (torch.randn(2, 6, 8), torch.randn(2, 4, 8))
    base = capture(m, example, {})
    # Room for the first graph and one more: the source cut (probed first) is kept.
    monkeypatch.setattr(specialise, "BUDGET", 2 * specialise._containers(base) + 100)
    traced = tracebridge.trace(m, example)
    assert len(traced.program.specialised["forward"]) == 1
    src = torch.randn(1, 1, 8), torch.randn(1, 4, 8)
    assert close(traced(*src), m(*src))
    with pytest.raises(GuardError, match=r"shape\[1\] > 1 is True, but now it is False"):
        traced(torch.randn(1, 6, 8), torch.randn(1, 1, 8))


def test_save_refuses_a_program_that_no_reader_would_load(tmp_path, monkeypatch):
    from tracebridge.check.program import LIMITS

    traced = tracebridge.trace(
        EncoderDecoder().eval(), (torch.randn(2, 6, 8), torch.randn(2, 4, 8))
    )
    monkeypatch.setitem(LIMITS, "containers", 50)
    path = tmp_path / "m.tb"
    with pytest.raises(tracebridge.ArtifactError, match="not saved.*resource limits"):
        traced.save(path)
    assert not path.exists()


class _Counting:
    """A graph of a chain that counts its calls and its refusals."""

    def __init__(self, method):
        self.method, self.calls, self.refused = method, 0, 0

    def __getattr__(self, name):
        return getattr(self.method, name)

    def __call__(self, *args, **kwargs):
        self.calls += 1
        try:
            return self.method(*args, **kwargs)
        except GuardError:
            self.refused += 1
            raise


@pytest.mark.parametrize("loaded", [False, True])
def test_sizes_a_specialisation_served_go_to_it_first_next_time(loaded, tmp_path):
    """prober24b F2: a call the first graph refuses late (a batch-1 call after a vision
    tower) ran the first graph up to its refusal on every call, then the specialisation
    from the start. Sizes a specialisation served go to it first; a call it refuses then
    goes the whole way, and every answer is eager's."""
    m = EncoderDecoder(positions=False).eval()
    traced = tracebridge.trace(m, (torch.randn(2, 6, 8), torch.randn(2, 4, 8)))
    if loaded:
        traced.save(tmp_path / "ed.tb")
        traced = tracebridge.load(tmp_path / "ed.tb")
    chained = traced._methods["forward"]
    chained.methods = [_Counting(each) for each in chained.methods]
    chained._with_grad = chained.methods[1:]
    first = chained.methods[0]
    with torch.no_grad():
        for round_ in range(3):
            src, tgt = torch.randn(2, 1, 8), torch.randn(2, 4, 8)
            assert close(traced(src, tgt), m(src, tgt))
            assert first.calls == 1, round_  # refused once, then never tried again
        src, tgt = torch.randn(2, 6, 8), torch.randn(2, 4, 8)  # the first graph's own sizes
        assert close(traced(src, tgt), m(src, tgt))
        assert first.calls == 2 and first.refused == 1
        for src, tgt in every_shape():
            assert close(traced(src, tgt), m(src, tgt))
    served = chained._served
    assert served and all(method is not first for method in served.values())
