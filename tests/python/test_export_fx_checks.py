"""The checks a GraphModule of to_graph_module makes at each call (export/fx_checks.py):
each finding of prober16 that was a silently wrong result, or an unclear error, of the
GraphModule or of what torch.compile / torch.export make of it.

F1: an input of another rank; F2: another dtype through deploy.md's torch.export recipe;
F3: the recipe at a size (1) its ranges assume away; F5: gm.train() on an eval graph;
F10: load_state_dict(assign=True) after to_graph_module; U1: pickling a GraphModule with
a guard; U4: a broken guard under torch.compile(fullgraph=True).
"""

from __future__ import annotations

import copy
import io
import pickle
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tracebridge
from tracebridge.export import fx


def _trace(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tracebridge.trace(fn, *args, **kwargs)


def _export(gm):
    """deploy.md's recipe."""
    return torch.export.export(
        gm, fx.example_inputs(gm), dynamic_shapes=fx.dynamic_shapes(gm), strict=False
    )


def _mean_over_rest(x):
    return x.mean(dim=tuple(range(1, x.dim()))), x.sum(-1)


def _finfo_mask(x):
    return x + torch.finfo(x.dtype).min


def _causal_when_long(q, k):
    return F.scaled_dot_product_attention(q, k, k, is_causal=q.shape[2] > 1)


def _branchy(x):
    return x * 2 if x.shape[1] > 2 else x - 1


# -- F1: rank ------------------------------------------------------------------------------


def test_another_rank_raises_guard_error_eagerly_and_compiled() -> None:
    traced = _trace(_mean_over_rest, torch.randn(2, 3, 4))
    gm = tracebridge.to_graph_module(traced)
    x = torch.randn(2, 3, 4, 5)
    with pytest.raises(tracebridge.GuardError, match="input x has 4 dimensions.*made with 3"):
        traced(x)
    with pytest.raises(tracebridge.GuardError, match="input x has 4 dimensions.*made with 3"):
        gm(x)
    compiled = torch.compile(gm, dynamic=True)
    y = torch.randn(5, 6, 7)
    torch.testing.assert_close(compiled(y), _mean_over_rest(y))
    with pytest.raises(tracebridge.GuardError, match="4 dimensions"):
        compiled(x)
    torch._dynamo.reset()


def test_another_kind_of_dtype_raises_as_the_runtime_does() -> None:
    gm = tracebridge.to_graph_module(_trace(lambda x: x * 2, torch.randn(3)))
    torch.testing.assert_close(
        gm(torch.ones(3, dtype=torch.float64))[0], torch.full((3,), 2.0, dtype=torch.float64)
    )
    with pytest.raises(tracebridge.GuardError, match="dtype int64.*floating-point"):
        gm(torch.ones(3, dtype=torch.int64))


def test_exported_program_refuses_another_rank() -> None:
    gm = tracebridge.to_graph_module(_trace(_mean_over_rest, torch.randn(2, 3, 4)))
    program = _export(gm).module()
    y = torch.randn(5, 6, 7)
    torch.testing.assert_close(program(y), _mean_over_rest(y))
    with pytest.raises(RuntimeError, match="number of dimensions"):
        program(torch.randn(2, 3, 4, 5))


# -- F2: dtype under export ----------------------------------------------------------------


def test_exported_program_refuses_another_dtype() -> None:
    traced = _trace(_finfo_mask, torch.zeros(2, 3))
    gm = tracebridge.to_graph_module(traced)
    x64 = torch.zeros(2, 3, dtype=torch.float64)
    with pytest.raises(tracebridge.GuardError, match="x.dtype"):
        fx.call(gm, x64)
    program = _export(gm).module()
    x = torch.zeros(4, 5)
    torch.testing.assert_close(program(x)[0], _finfo_mask(x))
    with pytest.raises(RuntimeError, match="dtype mismatch"):
        program(x64)
    # Exported from a float64 example, it serves float64 (the guard is checked at export).
    with pytest.raises(tracebridge.GuardError, match="x.dtype"):
        torch.export.export(gm, (x64,), dynamic_shapes=fx.dynamic_shapes(gm), strict=False)


# -- F3: size 1 under export ---------------------------------------------------------------


def test_exported_program_refuses_a_size_its_ranges_assume_away() -> None:
    q = torch.randn(1, 2, 4, 8)
    gm = tracebridge.to_graph_module(_trace(_causal_when_long, (q, q.clone())))
    program = _export(gm).module()
    q3, k5 = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 5, 8)
    torch.testing.assert_close(program(q3, k5)[0], _causal_when_long(q3, k5))
    with pytest.raises(RuntimeError, match=r"tracebridge guard.*q.shape\[2\] > 1"):
        program(torch.randn(1, 2, 1, 8), k5)


# -- F5: mode ------------------------------------------------------------------------------


def _bn_dropout():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Dropout(0.5)).eval()


def test_a_graph_of_one_mode_refuses_a_call_in_the_other() -> None:
    net = _bn_dropout()
    gm = tracebridge.to_graph_module(_trace(net, torch.randn(8, 4)))
    x = torch.randn(8, 4)
    torch.testing.assert_close(fx.call(gm, x), net(x))
    gm.train()
    with pytest.raises(tracebridge.GuardError, match="eval-mode graph of forward.*training"):
        gm(x)
    compiled = torch.compile(gm)
    with pytest.raises(tracebridge.GuardError, match="eval-mode graph"):
        compiled(x)
    gm.eval()
    torch.testing.assert_close(compiled(x)[0], net(x))
    torch._dynamo.reset()


def test_respect_mode_graph_module_refuses_the_other_mode() -> None:
    net = _bn_dropout()
    traced = _trace(net, torch.randn(8, 4), respect_mode=True)
    gm = tracebridge.to_graph_module(traced)
    gm.train()
    with pytest.raises(tracebridge.GuardError, match=r"call .train\(\).*again"):
        gm(torch.randn(8, 4))


def test_a_graph_that_is_the_same_in_both_modes_serves_both() -> None:
    net = nn.Sequential(nn.Linear(4, 4), nn.ReLU()).eval()
    gm = tracebridge.to_graph_module(_trace(net, torch.randn(8, 4)))
    gm.train()
    x = torch.randn(3, 4)
    torch.testing.assert_close(gm(x)[0], net(x))


# -- F10: state rebound --------------------------------------------------------------------


@pytest.mark.parametrize("where", ["traced", "original"])
def test_state_loaded_with_assign_is_seen(where: str) -> None:
    torch.manual_seed(0)
    net = nn.Linear(4, 2).eval()
    traced = _trace(net, torch.randn(3, 4))
    gm = tracebridge.to_graph_module(traced)
    other = nn.Linear(4, 2)
    target = traced if where == "traced" else net
    target.load_state_dict(copy.deepcopy(other.state_dict()), assign=True)
    x = torch.randn(5, 4)
    torch.testing.assert_close(fx.call(gm, x), other(x))
    assert gm.get_parameter("weight") is net.weight
    net.bias = nn.Parameter(torch.zeros(2))  # set anew
    torch.testing.assert_close(fx.call(gm, x), F.linear(x, other.weight))


def _two_layers():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2)).eval()
    with torch.no_grad():
        net[1].running_mean.uniform_(-1, 1)
        net[1].running_var.uniform_(0.5, 2)
    return net


def test_state_set_on_the_graph_module_itself_stays() -> None:
    """prober23a F4: a tensor set on the GraphModule (an assignment, ``functional_call``,
    ``.double()``) was put back to the traced module's at the next call, silently; only a
    tensor set anew on the traced module is installed."""
    net = _two_layers()
    x = torch.randn(3, 4)
    gm = tracebridge.to_graph_module(_trace(net, x))
    given = {"0.weight": torch.full((4, 4), 0.3)}
    reference = copy.deepcopy(net)
    with torch.no_grad():
        want = torch.func.functional_call(reference, dict(given), (x,))
        got = torch.func.functional_call(gm, given, (x,))  # the flat outputs: one here
    torch.testing.assert_close(got, (want,))
    assert given["0.weight"] is not net[0].weight  # the caller's dict holds what it gave
    new = nn.Parameter(torch.full((2, 4), -0.5))
    gm.get_submodule("3").weight = new
    reference[3].weight = nn.Parameter(new.detach().clone())
    with torch.no_grad():
        torch.testing.assert_close(fx.call(gm, x), reference(x))
    assert gm.get_submodule("3").weight is new
    gm.double()
    reference.double()
    with torch.no_grad():
        torch.testing.assert_close(fx.call(gm, x.double()), reference(x.double()))
    assert gm.get_buffer("1.running_mean").dtype == torch.float64


class _NormFirst(nn.Module):
    """Registers its projections before the norm its forward runs first."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.ln = nn.Linear(4, 4), nn.Linear(4, 4), nn.LayerNorm(4)

    def forward(self, x):
        x = self.ln(x)
        return self.q(x) + self.k(x)


@pytest.mark.parametrize("loaded", [False, True])
def test_graph_module_parameters_come_in_the_modules_order(loaded) -> None:
    """prober23a: the GraphModule listed the state in the order the graph reads it (the
    norm first), so an optimizer's state or ``vector_to_parameters`` carried across paired
    the q and k weights (one shape) with each other's values."""
    torch.manual_seed(0)
    net = _NormFirst().eval()
    x = torch.randn(2, 4)
    traced = _trace(net, x)
    if loaded:
        buffer = io.BytesIO()
        tracebridge.save(traced, buffer)
        traced = tracebridge.load(buffer.getvalue())
    gm = tracebridge.to_graph_module(traced)
    assert [n for n, _ in gm.named_parameters()] == [n for n, _ in net.named_parameters()]
    vector = torch.nn.utils.parameters_to_vector(net.parameters()) * 2
    with torch.no_grad():
        torch.nn.utils.vector_to_parameters(vector, gm.parameters())
        torch.nn.utils.vector_to_parameters(vector, net.parameters())
        torch.testing.assert_close(fx.call(gm, x), net(x))


# -- U1: pickling --------------------------------------------------------------------------


def test_graph_module_with_guards_pickles() -> None:
    gm = tracebridge.to_graph_module(_trace(_branchy, torch.randn(3, 4)))
    back = pickle.loads(pickle.dumps(gm))
    x = torch.randn(5, 6)
    torch.testing.assert_close(back(x)[0], _branchy(x))
    with pytest.raises(tracebridge.GuardError, match=r"x.shape\[1\] > 2"):
        back(torch.randn(5, 2))
    buffer = io.BytesIO()
    torch.save(gm, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    with pytest.raises(tracebridge.GuardError, match="3 dimensions"):
        loaded(torch.randn(5, 6, 2))


# -- U4: fullgraph -------------------------------------------------------------------------


def test_fullgraph_compile_names_the_traces_guard() -> None:
    gm = tracebridge.to_graph_module(_trace(_branchy, torch.randn(3, 4)))
    compiled = torch.compile(gm, fullgraph=True, dynamic=True)
    x = torch.randn(5, 6)
    torch.testing.assert_close(compiled(x)[0], _branchy(x))
    with pytest.raises(Exception, match="a check of the tracebridge trace failed"):
        compiled(torch.randn(5, 2))
    torch._dynamo.reset()


def test_graph_module_that_cannot_pickle_says_what_to_do() -> None:
    def pair_sum(x):
        a, b = x.unbind(0)
        return a + b

    gm = tracebridge.to_graph_module(_trace(pair_sum, torch.randn(2, 3)))
    with pytest.raises(tracebridge.TraceError, match=r"cannot be pickled.*tracebridge.save"):
        torch.save(gm, io.BytesIO())


def test_state_loaded_with_assign_is_seen_under_torch_compile() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3)).eval()
    gm = tracebridge.to_graph_module(_trace(net, torch.randn(5, 4)))
    compiled = torch.compile(gm)
    x = torch.randn(6, 4)
    torch.testing.assert_close(compiled(x)[0], net(x))
    other = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3)).eval()
    other[1].running_mean.add_(1.0)
    net.load_state_dict(copy.deepcopy(other.state_dict()), assign=True)
    torch.testing.assert_close(compiled(x)[0], other(x))
    torch.testing.assert_close(compiled(x)[0], other(x))
    torch._dynamo.reset()
