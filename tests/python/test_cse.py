"""The generated code computes a repeated value once (issue 20, item 5; runtime/cse.py).

BigBird slices the same block of keys in several places and builds the same mask twice per
layer; ``torch.jit`` computes each once, and so does the generated code. Results stay bit
for bit the interpreter's (which runs every node); nothing is shared across a write, a
grad-mode switch, a random op or a returned value.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.runtime import cse

from .graph_helpers import loaded, no_grad_code

# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


def _forward(traced):
    return traced.program.methods["forward"]


def _count(graph, op: str) -> int:
    return sum(1 for n in graph.nodes if n.op == op)


def _same_as_interpreter(traced, tmp_path, *inputs):
    fast = loaded(traced, tmp_path)
    plain = tracebridge.load(tmp_path / "m.tb", runtime="interpreter")
    with torch.no_grad():  # where repeated nodes run once
        a, b = fast(*inputs), plain(*inputs)
    a, b = (a, b) if isinstance(a, tuple) else ((a,), (b,))
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x, y) and x.dtype == y.dtype and x.requires_grad == y.requires_grad
    return a


class Repeats(nn.Module):
    """BigBird's pattern: the same slices and the same mask, made again where used."""

    def forward(self, x, mask):
        first = torch.cat([x[:, :, 0], x[:, :, -1]], dim=-1)
        again = torch.cat([x[:, :, 0], mask.new_ones(x.shape[0], x.shape[1], 4)], dim=-1)
        blocks = x.shape[2] // 2
        scale = (x.shape[2] // 2) * 2.0
        ones = mask.new_ones(x.shape[0], x.shape[1], 4).sum()
        return first.sum(-1) + again.sum(-1) * scale + blocks + ones


def test_repeated_nodes_run_once(tmp_path):
    x, mask = torch.randn(2, 3, 6, 4), torch.ones(2, 6)
    traced = tracebridge.trace(Repeats(), (x, mask))
    full = _forward(traced)
    kept = cse.eliminate(full)
    assert _count(full, "getitem") == 3 and _count(kept, "getitem") == 2
    assert _count(full, "Tensor.new_ones") == 2 and _count(kept, "Tensor.new_ones") == 1
    assert _count(kept, "scalar.floordiv") == 1
    assert no_grad_code(traced).count("= op_Tensor_new_ones") == 1
    # with autograd every node runs: one inline, the other (whose sum only the sizes and
    # the mask's dtype and device decide) in a memo of its own (runtime/memo.py)
    assert traced.code.count("= op_Tensor_new_ones") == 1 and "memoised by size" in traced.code
    for shape in [(2, 3, 6, 4), (1, 2, 8, 4)]:
        _same_as_interpreter(traced, tmp_path, torch.randn(shape), torch.ones(shape[0], 6))


class WritesBetween(nn.Module):
    def forward(self, x):
        view = x[:, 0]
        before = view * 2
        x.add_(1)  # writes the view's memory too
        after = view * 2  # the same node as above, on another value
        scratch = torch.zeros(3)
        head = scratch[:1]
        a = head + 1
        scratch.add_(5)
        b = head + 1
        return before, after, a + b


def test_nothing_is_shared_across_a_write(tmp_path):
    x = torch.randn(3, 4)
    traced = tracebridge.trace(WritesBetween(), x.clone())
    kept = cse.eliminate(_forward(traced))
    assert _count(_forward(traced), "mul") == _count(kept, "mul") == 2
    assert _count(kept, "add") == _count(_forward(traced), "add") == 3
    fast = loaded(traced, tmp_path)
    plain = tracebridge.load(tmp_path / "m.tb", runtime="interpreter")
    x1, x2 = x.clone(), x.clone()
    with torch.no_grad():
        for got, want in zip(fast(x1), plain(x2), strict=True):
            assert torch.equal(got, want)
    assert torch.equal(x1, x2) and torch.equal(x1, x + 1)


class Returned(nn.Module):
    def forward(self, x):
        return x + 1, x + 1  # two tensors, as traced: a caller may write one


def test_returned_values_stay_distinct(tmp_path):
    traced = tracebridge.trace(Returned(), torch.randn(3))
    with torch.no_grad():
        a, b = loaded(traced, tmp_path)(torch.randn(3))
    assert torch.equal(a, b) and a.data_ptr() != b.data_ptr()


class GradSwitch(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3))

    def forward(self, x):
        with torch.no_grad():
            frozen = self.w * 2
        tracked = self.w * 2  # the same op after a switch of grad mode: another value
        noise = torch.rand(3) + torch.rand(3)  # random: two draws, never one
        return x * frozen, x * tracked, noise


def test_grad_mode_switches_and_random_ops_are_never_shared(tmp_path):
    x = torch.randn(3)
    traced = tracebridge.trace(GradSwitch(), x)
    kept = cse.eliminate(_forward(traced))
    assert _count(kept, "rand") == 2
    frozen, tracked, _ = loaded(traced, tmp_path)(x)
    assert not frozen.requires_grad and tracked.requires_grad
    torch.manual_seed(3)
    _, _, noise = loaded(traced, tmp_path)(x)
    torch.manual_seed(3)
    assert torch.equal(noise, torch.rand(3) + torch.rand(3))


class SharedWeight(nn.Module):
    """The same product of a parameter twice: one gradient either way, but summed in
    another order when the node runs once."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))

    def forward(self, x):
        return (x @ self.w).tanh().sum() + (x @ self.w).sin().sum()


def test_calls_with_autograd_run_every_node_and_give_the_interpreters_gradients(tmp_path):
    x = torch.randn(3, 4)
    traced = tracebridge.trace(SharedWeight(), x)
    assert traced.code.count("= op_matmul") == 2
    assert no_grad_code(traced).count("= op_matmul") == 1
    fast = loaded(traced, tmp_path)
    plain = tracebridge.load(tmp_path / "m.tb", runtime="interpreter")
    grads = []
    for module in (fast, plain):
        module.zero_grad()
        module(x).backward()
        grads.append(dict(module.named_parameters())["w"].grad.clone())
    assert torch.equal(grads[0], grads[1])


class WritesThroughAView(nn.Module):
    """``reshape_as`` returns a view of ``x``: a write through it changes ``x``."""

    def forward(self, x, like):
        before = x * 2
        x.reshape_as(like).add_(1)
        return before.sum(), (x * 2).sum()


def test_a_write_through_any_view_keeps_the_nodes_apart(tmp_path):
    x, like = torch.randn(2, 6), torch.randn(3, 4)
    traced = tracebridge.trace(WritesThroughAView(), (x.clone(), like))
    assert _count(cse.eliminate(_forward(traced)), "mul") == 2
    x1, x2 = x.clone(), x.clone()
    fast = loaded(traced, tmp_path)
    plain = tracebridge.load(tmp_path / "m.tb", runtime="interpreter")
    with torch.no_grad():
        for got, want in zip(fast(x1, like), plain(x2, like), strict=True):
            assert torch.equal(got, want)
    assert not torch.equal(fast(x.clone(), like)[0], fast(x.clone(), like)[1])


class RotaryUnderNoGrad(nn.Module):
    """Llama's pattern: the rotary table under ``torch.no_grad()``, then the same half
    sizes read for q and for k."""

    def forward(self, q, k):
        with torch.no_grad():
            table = torch.arange(q.shape[-1], dtype=q.dtype).cos()
        q = torch.cat([q[..., q.shape[-1] // 2 :], q[..., : q.shape[-1] // 2]], dim=-1)
        k = torch.cat([k[..., q.shape[-1] // 2 :], k[..., : q.shape[-1] // 2]], dim=-1)
        return (q * table).sum() + (k * table).sum() + (q * table).sum()


class TurnsGradOn(nn.Module):
    def forward(self, x):
        with torch.enable_grad():
            y = x * 2
        return (x * 2).sum() + (x * 2).sum() + y.sum()


def test_graphs_that_switch_grad_off_still_share_and_those_that_turn_it_on_do_not(tmp_path):
    q, k = torch.randn(2, 8), torch.randn(2, 8)
    traced = tracebridge.trace(RotaryUnderNoGrad(), (q, k))
    assert cse.grad_stays_off(_forward(traced))
    code = no_grad_code(traced)
    # mul nodes, by the comment each node's line has (a mul written in place, runtime/
    # inplace.py, names op_mul twice on its line and once more in its fallback)
    assert code.count("# mul,") < traced.code.count("# mul,")
    _same_as_interpreter(traced, tmp_path, q, k)

    traced = tracebridge.trace(TurnsGradOn(), torch.randn(3))
    assert not cse.grad_stays_off(_forward(traced))
    assert no_grad_code(traced).count("# mul,") == traced.code.count("# mul,") == 3


class _AttentionDropouts(nn.Module):
    """Two attentions with dropout on the same inputs draw two masks; one without
    dropout (``dropout_p=0.0``) draws none."""

    def forward(self, q):
        f = torch.nn.functional.scaled_dot_product_attention
        a = f(q, q, q, dropout_p=0.5)
        b = f(q, q, q, None, 0.5)
        c = f(q, q, q, dropout_p=0.0) - f(q, q, q, dropout_p=0.0)
        return a - b, c


def test_attention_with_dropout_draws_each_call(tmp_path):
    # scaled_dot_product_attention draws its dropout mask, though no op-table flag says
    # so: the two calls were one under no_grad (a - b was 0, silently wrong)
    q = torch.randn(1, 2, 4, 8)
    model = _AttentionDropouts()
    traced = tracebridge.trace(model, q)
    for fn in (traced, loaded(traced, tmp_path)):
        with torch.no_grad():
            torch.manual_seed(0)
            expected, after = model(q), torch.rand(1)
            torch.manual_seed(0)
            got = fn(q)
            assert torch.equal(got[0], expected[0]) and got[0].abs().sum() > 0
            assert torch.equal(torch.rand(1), after)  # as many draws as eager
    with torch.no_grad():
        assert no_grad_code(traced).count("= op_scaled_dot_product_attention") == 3
