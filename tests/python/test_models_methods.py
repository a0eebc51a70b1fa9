"""Calls the zoo found refused (issue 20, follow-up): Tensor methods that take their dims
as varargs, and the private softmax backward kernel of a custom autograd function.

Longformer and LED build their band mask with ``new_ones(...).tril().flip(dims=[0])``:
``Tensor.flip`` folds into the op ``flip``, and the method's other forms (``x.flip(0, 1)``,
``x.flip(2)``), which ``torch.flip`` itself refuses, are recorded as the function's list.
SEW-D's ``XSoftmax`` (transformers) calls ``torch._softmax_backward_data`` in its backward:
the tracer records the public ops that kernel computes, so the function keeps its own
gradient with no private op in the graph.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.trace.autograd_function import UnsupportedFunctionError

from .graph_helpers import loaded as graph_loaded

# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


def forward_nodes(traced, method: str = "forward") -> list:
    return traced.program.methods[method].nodes


# --- Tensor methods with varargs ------------------------------------------------------------

METHOD_CASES = {
    "flip varargs": (lambda x: x.flip(0, 1), "flip", [0, 1]),
    "flip one int": (lambda x: x.flip(2), "flip", [2]),
    "flip tuple": (lambda x: x.flip((1, 2)), "flip", (1, 2)),
    "flip list": (lambda x: x.flip([0]), "flip", [0]),
    "flip keyword": (lambda x: x.flip(dims=[1]), "flip", None),
    "flip traced dims": (lambda x: x.flip(x.dim() - 1, 1), "flip", [2, 1]),
    "squeeze varargs": (lambda x: x[:1, :1].squeeze(0, 1), "squeeze", [0, 1]),
    "squeeze one int": (lambda x: x[:1].squeeze(0), "squeeze", 0),
    "count_nonzero varargs": (lambda x: x.gt(0).count_nonzero(0, 2), "count_nonzero", [0, 2]),
    "broadcast_to traced sizes": (
        lambda x: x[:, :1].broadcast_to(x.shape[0], 3, x.shape[2]),
        "broadcast_to",
        None,
    ),
}


@pytest.mark.parametrize("runtime", ["codegen", "interpreter"])
@pytest.mark.parametrize("case", list(METHOD_CASES))
def test_a_tensor_method_with_varargs_records_the_functions_list(case, runtime, tmp_path):
    fn, op, recorded = METHOD_CASES[case]
    traced = tracebridge.trace(fn, (torch.randn(2, 3, 4),), runtime=runtime)
    nodes = [n for n in forward_nodes(traced) if n.op == op]
    assert len(nodes) == 1, [n.op for n in forward_nodes(traced)]
    assert not any(n.op.startswith("Tensor.") and n.op.endswith(op) for n in forward_nodes(traced))
    if recorded is not None:
        assert nodes[0].args[1] == recorded
        assert len(nodes[0].args) == 2
    loaded = graph_loaded(traced, tmp_path, runtime=runtime)
    for shape in [(2, 3, 4), (1, 3, 5), (3, 3, 2)]:
        x = torch.randn(*shape)
        assert torch.equal(traced(x), fn(x))
        assert torch.equal(loaded(x), fn(x))


def test_broadcast_to_by_traced_sizes_stays_general():
    fn = METHOD_CASES["broadcast_to traced sizes"][0]
    traced = tracebridge.trace(fn, (torch.randn(2, 3, 4),))
    node = next(n for n in forward_nodes(traced) if n.op == "broadcast_to")
    assert isinstance(node.args[1], list) and len(node.args[1]) == 3
    assert not traced.guards
    x = torch.randn(5, 3, 7)
    assert torch.equal(traced(x), fn(x))


class BandMask(nn.Module):
    """Longformer's ``_mask_invalid_locations``: the ends of the band are masked with a
    lower-triangular block and its flipped copy (modeling_longformer.py:725)."""

    def __init__(self, window: int = 2):
        super().__init__()
        self.window = window

    def forward(self, scores):
        w = self.window
        beginning = scores.new_ones(w, w + 1).tril().flip(dims=[0])
        beginning = beginning[None, :, None, :]
        ending = beginning.flip(dims=(1, 3))
        begin_part = scores[:, :w, :, : w + 1]
        begin_part = begin_part.masked_fill(beginning.expand(begin_part.size()) == 1, -1e4)
        end_part = scores[:, -w:, :, -(w + 1) :]
        end_part = end_part.masked_fill(ending.expand(end_part.size()) == 1, -1e4)
        return begin_part.sum() + end_part.sum() + scores.flip(1, 3).cumsum(1)


@pytest.mark.parametrize("runtime", ["codegen", "interpreter"])
def test_longformer_band_mask_traces_and_serves_other_lengths(runtime, tmp_path):
    model = BandMask()
    traced = tracebridge.trace(model, (torch.randn(2, 8, 3, 5),), runtime=runtime)
    flips = [n for n in forward_nodes(traced) if n.op == "flip"]
    assert [n.args[1] if len(n.args) > 1 else n.kwargs["dims"] for n in flips] == [
        [0],
        (1, 3),
        [1, 3],
    ]
    loaded = graph_loaded(traced, tmp_path, runtime=runtime)
    for shape in [(1, 12, 2, 5), (3, 6, 4, 5)]:
        x = torch.randn(*shape)
        assert torch.allclose(traced(x), model(x))
        assert torch.equal(loaded(x), traced(x))


# --- the softmax backward kernel of a custom autograd function ------------------------------


class XSoftmax(torch.autograd.Function):
    """transformers' masked softmax (models/sew_d/modeling_sew_d.py:454, the same in
    DeBERTa): its backward calls the private ``torch._softmax_backward_data``."""

    @staticmethod
    def forward(ctx, scores, mask, dim):
        ctx.dim = dim
        rmask = ~(mask.to(torch.bool))
        output = scores.masked_fill(rmask, torch.tensor(torch.finfo(scores.dtype).min))
        output = torch.softmax(output, ctx.dim)
        output.masked_fill_(rmask, 0)
        ctx.save_for_backward(output)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        (output,) = ctx.saved_tensors
        grad = torch._softmax_backward_data(grad_output, output, ctx.dim, output.dtype)
        return grad, None, None


class XLogSoftmax(torch.autograd.Function):
    """The same shape of function around the log-softmax kernel."""

    @staticmethod
    def forward(ctx, scores, dim):
        ctx.dim = dim
        output = torch.log_softmax(scores, dim)
        ctx.save_for_backward(output)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        (output,) = ctx.saved_tensors
        grad = torch._log_softmax_backward_data(grad_output, output, ctx.dim, output.dtype)
        return grad, None


class Attention(nn.Module):
    def __init__(self, log: bool = False):
        super().__init__()
        self.query = nn.Linear(4, 4)
        self.log = log

    def forward(self, x, mask):
        scores = self.query(x) @ x.transpose(-1, -2)
        if self.log:
            return XLogSoftmax.apply(scores, -1) * mask[:, None, :]
        return XSoftmax.apply(scores, mask[:, None, :], -1)


def gradients(fn, x, mask):
    """Output, the query weight's gradient (``fn``'s own weight) and the input's."""
    weight = dict(fn.named_parameters())["query.weight"]
    weight.grad = None
    x = x.clone().requires_grad_()
    out = fn(x, mask)
    (out * torch.linspace(-1, 1, out.shape[-1])).pow(2).sum().backward()
    return out.detach(), weight.grad.clone(), x.grad


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("runtime", ["codegen", "interpreter"])
def test_softmax_backward_kernel_is_recorded_as_public_ops(log, runtime, tmp_path):
    torch.manual_seed(0)
    model = Attention(log)
    example = (torch.randn(2, 3, 4), torch.tensor([[1, 1, 0], [1, 1, 1]]))
    traced = tracebridge.trace(model, example, runtime=runtime)  # autograd on, grads flow
    node = next(n for n in forward_nodes(traced) if n.op == "prim.autograd_function")
    backward = traced.program.methods[node.kwargs["backward"]]
    ops = [n.op for n in backward.nodes]
    assert not any("backward_data" in op for op in ops)
    assert "sum" in ops
    loaded = graph_loaded(traced, tmp_path, runtime=runtime)
    for x, mask in [example, (torch.randn(1, 5, 4), torch.tensor([[1, 1, 1, 0, 0]]))]:
        want = gradients(model, x, mask)
        for fn in (traced, loaded):
            got = gradients(fn, x, mask)
            for a, b in zip(got, want):
                assert torch.allclose(a, b, atol=1e-6), (a - b).abs().max()


class BadShapes(torch.autograd.Function):
    @staticmethod
    def forward(ctx, scores):
        output = torch.softmax(scores, -1)
        ctx.save_for_backward(output)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        (output,) = ctx.saved_tensors
        return torch._softmax_backward_data(grad_output[:1], output, -1, output.dtype)


def test_softmax_backward_kernel_with_wrong_shapes_is_refused_with_the_kernels_words():
    weight = nn.Parameter(torch.randn(3, 3))

    def fn(x):
        return BadShapes.apply(x @ weight)

    with pytest.raises(UnsupportedFunctionError) as info:
        tracebridge.trace(fn, (torch.randn(2, 3),))
    text = str(info.value)
    assert "BadShapes.apply" in text
    assert "same size" in text  # the kernel's own check, not a broadcast of the public ops


# --- a method whose arguments come in another order than the function's ---------------------


class MaskedFill(nn.Module):
    """Longformer's ``torch.full_like(x, -inf).where(mask, x)`` (modeling_longformer.py:732)
    and a keyword call with a number."""

    def forward(self, x):
        mask = x.gt(0)
        y = torch.full_like(x, -float("inf")).where(mask, x)
        return y, x.where(condition=mask, other=0.5)


@pytest.mark.parametrize("runtime", ["codegen", "interpreter"])
def test_tensor_where_is_recorded_as_where_with_the_condition_first(runtime, tmp_path):
    model = MaskedFill()
    traced = tracebridge.trace(model, (torch.randn(2, 3),), runtime=runtime)
    wheres = [n for n in forward_nodes(traced) if n.op == "where"]
    assert len(wheres) == 2
    assert wheres[1].args[2] == 0.5
    loaded = graph_loaded(traced, tmp_path, runtime=runtime)
    for shape in [(2, 3), (4, 1), (1, 7)]:
        x = torch.randn(*shape)
        for got, want in zip(loaded(x), model(x)):
            assert torch.equal(got, want)


class LongformerValueChunks(nn.Module):
    """Longformer's ``_sliding_chunks_matmul_attn_probs_value`` (modeling_longformer.py:842):
    the chunk count is a 0-dim tensor (``torch.div`` of sizes) that ``as_strided`` reads as
    a size, as eager does."""

    def forward(self, value, w: int = 2):
        batch, seq_len, dim = value.shape
        chunks_count = torch.div(seq_len, w, rounding_mode="trunc") - 1
        padded = nn.functional.pad(value, (0, 0, w, w), value=-1)
        stride = padded.stride()
        size = (batch, chunks_count + 1, 3 * w, dim)
        return padded.as_strided(size=size, stride=(stride[0], w * stride[1], *stride[1:]))


@pytest.mark.parametrize("runtime", ["codegen", "interpreter"])
def test_as_strided_takes_a_size_held_in_a_0_dim_integer_tensor(runtime, tmp_path):
    model = LongformerValueChunks()
    traced = tracebridge.trace(model, (torch.randn(2, 8, 3),), runtime=runtime)
    loaded = graph_loaded(traced, tmp_path, runtime=runtime)
    for shape in [(2, 8, 3), (1, 12, 4), (3, 4, 2)]:
        x = torch.randn(*shape)
        assert torch.equal(traced(x), model(x))
        assert torch.equal(loaded(x), model(x))


def test_a_number_where_the_op_takes_a_tensor_is_recorded_as_a_0_dim_tensor(tmp_path):
    def fn(x):
        # torch.div of two ints is a 0-dim int64 tensor in eager (Longformer's chunk count)
        count = torch.div(x.size(1), 2, rounding_mode="trunc") - 1
        return x.sum(1) * count, torch.div(7, 2)

    traced = tracebridge.trace(fn, (torch.randn(2, 6),))
    nodes = forward_nodes(traced)
    made = [n for n in nodes if n.op == "scalar_tensor"]
    assert [n.kwargs["dtype"] for n in made] == [torch.int64, torch.int64]
    loaded = graph_loaded(traced, tmp_path)
    for shape in [(1, 9), (3, 4)]:
        x = torch.randn(*shape)
        for got, want in zip(loaded(x), fn(x)):
            assert got.dtype == want.dtype
            assert torch.equal(got, want)


class KeywordChunks(nn.Module):
    """RAFT's ``fmap1, fmap2 = torch.chunk(fmaps, chunks=2, dim=0)`` (raft.py:493)."""

    def forward(self, x):
        a, b = torch.chunk(x, chunks=2, dim=0)
        c, d = x.tensor_split(sections=2, dim=1)
        return a - b, c.sum() + d.sum()


@pytest.mark.parametrize("runtime", ["codegen", "interpreter", "graph_module"])
def test_a_count_of_results_given_by_keyword_runs_through_the_checked_op(runtime):
    from tracebridge.export import fx as bridge

    model = KeywordChunks()
    traced = tracebridge.trace(
        model, (torch.randn(4, 3),), runtime="codegen" if runtime == "graph_module" else runtime
    )
    fn = bridge.to_graph_module(traced, "forward") if runtime == "graph_module" else traced
    x = torch.randn(4, 5)
    for got, want in zip(fn(x), model(x)):
        assert torch.allclose(got, want)


def test_a_number_that_would_change_the_dtype_as_a_0_dim_tensor_is_refused():
    def fn(x):
        return torch.add(2, x.sum().to(torch.int32))  # int32 in eager, int64 as recorded

    with pytest.raises(tracebridge.TraceError, match="given a Python number where it takes"):
        tracebridge.trace(fn, (torch.ones(3),))
    same = tracebridge.trace(lambda x: torch.add(2, x.to(torch.int32)), (torch.ones(3),))
    assert same(torch.ones(4)).dtype == torch.int32


# --- NumPy's argument names -----------------------------------------------------------------


def test_numpy_argument_names_are_recorded_under_pytorchs(tmp_path):
    """PyTorch takes ``axis=`` for ``dim=`` and ``keepdims=`` for ``keepdim=`` (Funnel
    calls ``torch.cat(..., axis=...)``): recorded under PyTorch's names, so the file saves,
    loads and stays general in its sizes."""

    def f(x):
        both = torch.cat([x, x], axis=1)
        return both.sum(axis=0, keepdims=True) + x.mean(axis=1).sum()

    traced = tracebridge.trace(f, torch.randn(2, 3))
    keywords = {key for node in forward_nodes(traced) for key in node.kwargs}
    assert keywords == {"dim", "keepdim"}
    path = tmp_path / "numpy_names.tb"
    tracebridge.save(traced, path)
    for runtime in ("codegen", "interpreter"):
        loaded = tracebridge.load(path, runtime=runtime)
        for shape in ((2, 3), (4, 5)):
            x = torch.randn(shape)
            torch.testing.assert_close(loaded(x), f(x))
