"""Linears that read one input run as one linear over concatenated weights, in calls
without autograd (runtime/concat_linear.py)."""

import collections

import pytest
import torch
import torch.nn.functional as F

import tracebridge
from tracebridge.errors import TraceError
from tracebridge.runtime import concat_linear


def aten_counts(fn, *args) -> collections.Counter:
    """The top-level aten ops one call runs."""
    with torch.profiler.profile() as prof:
        fn(*args)
    return collections.Counter(
        e.name
        for e in prof.events()
        if e.name.startswith("aten::")
        and (e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::"))
    )


class Attention(torch.nn.Module):
    """q, k and v projections of one input, split into heads (Hugging Face style)."""

    def __init__(self, width=8, heads=2, bias=True):
        super().__init__()
        self.heads = heads
        self.q = torch.nn.Linear(width, width, bias=bias)
        self.k = torch.nn.Linear(width, width, bias=bias)
        self.v = torch.nn.Linear(width, width, bias=bias)
        self.o = torch.nn.Linear(width, width, bias=bias)

    def forward(self, x):
        b, s, _ = x.shape
        shape = (b, s, -1, x.shape[-1] // self.heads)
        q = self.q(x).view(shape).transpose(1, 2)
        k = self.k(x).view(shape).transpose(1, 2)
        v = self.v(x).view(shape).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v)
        return self.o(a.transpose(1, 2).reshape(b, s, -1))


def traced_attention(**kwargs):
    torch.manual_seed(0)
    model = Attention(**kwargs).eval()
    x = torch.randn(2, 5, 8)
    return model, x, tracebridge.trace(model, x)


def test_projections_run_as_one_linear_without_autograd():
    model, x, traced = traced_attention()
    with torch.no_grad():
        expected = model(x)
        got = traced(x)
        counts = aten_counts(traced, x)
        code = traced.code
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    assert counts["aten::linear"] == 2  # q, k, v as one, then o
    # the pieces' heads: one as_strided each (runtime/views.py), no view or transpose
    assert counts["aten::as_strided"] == 3 and counts["aten::view"] == 0
    assert counts["aten::transpose"] == 1  # the attention's output
    # .code under no_grad shows the code that runs: one linear over the folded weights
    assert code.count("= op_linear") == 2
    assert "views: split_with_sizes, Tensor.view, transpose" in code
    assert "folded" in code
    assert traced.code.count("= op_linear") == 4  # with autograd: as traced


def test_other_shapes_and_no_bias():
    model, _, traced = traced_attention(bias=False)
    with torch.no_grad():
        for shape in [(1, 1, 8), (3, 7, 8), (1, 4, 8)]:
            x = torch.randn(*shape)
            torch.testing.assert_close(traced(x), model(x), rtol=1e-5, atol=1e-6)
        assert aten_counts(traced, torch.randn(1, 3, 8))["aten::linear"] == 2


def test_autograd_calls_keep_the_traced_graph():
    model, x, traced = traced_attention()
    assert aten_counts(traced, x)["aten::linear"] == 4
    traced(x).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()
    for got, want in zip(grads, [p.grad for p in model.parameters()]):
        torch.testing.assert_close(got, want)


def test_the_concatenated_weights_follow_the_state():
    model, x, traced = traced_attention()

    def check():
        with torch.no_grad():
            torch.testing.assert_close(traced(x), model(x), rtol=1e-5, atol=1e-6)

    check()
    torch.manual_seed(1)
    model.load_state_dict(Attention().state_dict())  # load_state_dict
    check()
    with torch.no_grad():
        model.k.weight.mul_(2)  # an in-place step
    check()
    model.v.weight.data = torch.randn(8, 8)  # .data assignment
    check()
    model.q.bias = torch.nn.Parameter(torch.randn(8))  # a new parameter
    check()
    model.double()  # .to(dtype)
    x = x.double()
    with torch.no_grad():
        got = traced(x)
        assert got.dtype == torch.float64
        torch.testing.assert_close(got, model(x))
        assert aten_counts(traced, x)["aten::linear"] == 2


def test_a_reloaded_artifact_computes_the_same_bits(tmp_path):
    _, x, traced = traced_attention()
    traced.save(tmp_path / "m.tb")
    loaded = tracebridge.load(tmp_path / "m.tb")
    with torch.no_grad():
        assert torch.equal(loaded(x), traced(x))
        assert aten_counts(loaded, x)["aten::linear"] == 2


class Mixed(torch.nn.Module):
    """Projections of two inputs, one of them written in place between its readers."""

    def __init__(self):
        super().__init__()
        self.q = torch.nn.Linear(8, 8)
        self.k = torch.nn.Linear(8, 8)
        self.v = torch.nn.Linear(8, 8)
        self.other = torch.nn.Linear(4, 8)

    def forward(self, x, y):
        h = x * 1
        q = self.q(h).unsqueeze(0)
        h.add_(1)  # k and v read the new values
        k, v = self.k(h).unsqueeze(0), self.v(h).unsqueeze(0)
        return torch.tanh(q) * k + v + self.other(y).unsqueeze(0)


def test_a_written_input_and_other_inputs_split_the_groups():
    torch.manual_seed(0)
    model = Mixed().eval()
    x, y = torch.randn(2, 3, 8), torch.randn(2, 3, 4)
    traced = tracebridge.trace(model, (x, y))
    with torch.no_grad():
        torch.testing.assert_close(traced(x, y), model(x, y), rtol=1e-5, atol=1e-6)
        assert aten_counts(traced, x, y)["aten::linear"] == 3  # q, (k, v) as one, other
    groups = concat_linear.groups(traced._methods["forward"].graph)
    assert [len(g) for g in groups] == [2]


class Merging(torch.nn.Module):
    """A view that merges a leading dimension with the projected one fails on a piece of a
    wider buffer: that projection stays on its own."""

    def __init__(self):
        super().__init__()
        self.q = torch.nn.Linear(8, 8)
        self.k = torch.nn.Linear(8, 8)
        self.v = torch.nn.Linear(8, 8)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q(x).view(b * s * 2, 4)
        k = self.k(x).view(b, s, 2, 4).reshape(b * s * 2, 4)
        return q * k + torch.relu(self.v(x).view(b, s, 2, 4)).view(b * s * 2, 4)


def test_a_view_that_needs_dense_memory_keeps_its_linear():
    torch.manual_seed(0)
    model = Merging().eval()
    x = torch.randn(2, 3, 8)
    traced = tracebridge.trace(model, x)
    with torch.no_grad():
        torch.testing.assert_close(traced(x), model(x), rtol=1e-5, atol=1e-6)
        assert aten_counts(traced, x)["aten::linear"] == 2  # q alone; k and v as one
        code = traced.code
    # relu does not write into v's piece of the shared buffer (runtime/inplace.py)
    assert "relu_inplace" not in code


class Widths(torch.nn.Module):
    """Projections of different widths, reduced over the last dimension."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 4)
        self.b = torch.nn.Linear(8, 6)

    def forward(self, x):
        return self.a(x).unsqueeze(0).sum(-1) + self.b(x).unsqueeze(0).amax(-1)


def test_a_weight_of_another_width_later_runs_as_traced():
    torch.manual_seed(0)
    model = Widths().eval()
    x = torch.randn(3, 8)
    traced = tracebridge.trace(model, x)
    with torch.no_grad():
        torch.testing.assert_close(traced(x), model(x))
        assert aten_counts(traced, x)["aten::linear"] == 1
        model.b.weight.data = torch.randn(5, 8)  # another width than traced
        model.b.bias.data = torch.randn(5)
        torch.testing.assert_close(traced(x), model(x))  # the split refuses: as traced


def test_weights_converted_apart_are_refused_as_eager_refuses_them():
    model, x, traced = traced_attention()
    model.k.double()
    with torch.no_grad(), pytest.raises(RuntimeError):
        model(x)
    with torch.no_grad(), pytest.raises(TraceError, match="dtype"):
        traced(x)


def test_concat_weights_refuses_mixed_dtypes_and_autocast():
    a, b = torch.ones(2, 3), torch.ones(1, 3, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="float32, float64"):
        concat_linear.concat_weights([a, b])
    # under autocast the call runs as traced (a concatenation on every call cost more)
    with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(concat_linear.AsTraced):
        concat_linear.concat_weights([a, b])


def test_returned_projections_are_not_fused():
    class Returned(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(4, 4)
            self.b = torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.a(x), self.b(x).transpose(0, 1)

    torch.manual_seed(0)
    model = Returned().eval()
    x = torch.randn(3, 4)
    traced = tracebridge.trace(model, x)
    assert concat_linear.groups(traced._methods["forward"].graph) == []
    with torch.no_grad():
        got = traced(x)
        assert got[0].is_contiguous() and got[1].transpose(0, 1).is_contiguous()


class Rotated(torch.nn.Module):
    """q is used (rotated) before k and v are split into heads, as in Llama."""

    def __init__(self):
        super().__init__()
        self.q = torch.nn.Linear(8, 8, bias=False)
        self.k = torch.nn.Linear(8, 8, bias=False)
        self.v = torch.nn.Linear(8, 8, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, 2, 4).transpose(1, 2)
        q = q * 2 + torch.flip(q, [-1])
        k = self.k(x).view(b, s, 2, 4).transpose(1, 2)
        v = self.v(x).view(b, s, 2, 4).transpose(1, 2)
        return F.scaled_dot_product_attention(q, k, v)


def test_the_pieces_views_run_as_one_call_where_the_split_is_made():
    torch.manual_seed(0)
    model = Rotated().eval()
    x = torch.randn(2, 3, 8)
    traced = tracebridge.trace(model, x)
    with torch.no_grad():
        for shape in [(2, 3, 8), (1, 5, 8)]:
            y = torch.randn(*shape)
            torch.testing.assert_close(traced(y), model(y), rtol=1e-5, atol=1e-6)
        code = traced.code
        counts = aten_counts(traced, x)
    # one call of a tree of views gives q, k and v, before q is read
    assert code.count("# views:") == 1 and "views(3 tensors" in code
    assert counts["aten::linear"] == 1 and counts["aten::as_strided"] == 3


def test_a_split_of_literal_sizes_needs_no_count_check():
    def halves(x):
        return tuple(t * 2 for t in x.split([2, 3], -1))

    traced = tracebridge.trace(halves, torch.ones(2, 5))
    assert "_check_count" not in traced.code
    assert [t.shape[-1] for t in traced(torch.ones(4, 5))] == [2, 3]
    with pytest.raises(TraceError, match="split_with_sizes"):
        traced(torch.ones(4, 6))
    chunks = tracebridge.trace(lambda x: x.chunk(2, -1), torch.ones(2, 4))
    assert "_check_count" in chunks.code  # a chunk's count follows the size: checked


def test_no_fusion_where_the_concatenation_could_not_be_folded():
    class ReturnsWeight(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(4, 4)
            self.b = torch.nn.Linear(4, 4)

        def forward(self, x):
            # returning a state tensor keeps the graph from folding (folding.plan): each
            # call would concatenate the weights again, so the linears stay apart
            return self.a(x).unsqueeze(0) * self.b(x).unsqueeze(0), self.a.weight

    torch.manual_seed(0)
    model = ReturnsWeight().eval()
    x = torch.randn(3, 4)
    traced = tracebridge.trace(model, x)
    graph = traced._methods["forward"].graph
    assert len(concat_linear.groups(graph)) == 1
    assert concat_linear.fuse(graph) is graph
    with torch.no_grad():
        assert aten_counts(traced, x)["aten::linear"] == 2
        torch.testing.assert_close(traced(x)[0], model(x)[0])


def test_projections_that_no_view_reads_stay_apart():
    class Gated(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gate = torch.nn.Linear(8, 16, bias=False)
            self.up = torch.nn.Linear(8, 16, bias=False)

        def forward(self, x):
            # a split would cost about what the saved linear does: no view joins it
            return F.silu(self.gate(x)) * self.up(x)

    traced = tracebridge.trace(Gated().eval(), torch.randn(2, 3, 8))
    assert concat_linear.groups(traced._methods["forward"].graph) == []


class Heads(torch.nn.Module):
    """Two projections split into heads of 4 (their count from the width), and a random
    draw (a call that raised part way may not run again: it would draw twice)."""

    def __init__(self):
        super().__init__()
        self.q = torch.nn.Linear(8, 8)
        self.k = torch.nn.Linear(8, 8)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, -1, 4)
        k = self.k(x).view(b, s, -1, 4)
        return q.sum(2) * k.sum(2) + torch.rand(1)


def test_widths_changed_by_opposite_amounts_run_as_traced():
    # 12 + 4 rows where 8 + 8 were traced: the split's literal sizes still add up, so
    # without the check each projection got the other's rows (silently wrong)
    torch.manual_seed(0)
    model = Heads().eval()
    x = torch.randn(2, 3, 8)
    traced = tracebridge.trace(model, x)
    with torch.no_grad():
        assert aten_counts(traced, x)["aten::linear"] == 1
        model.q.weight = torch.nn.Parameter(torch.randn(12, 8))
        model.q.bias = torch.nn.Parameter(torch.randn(12))
        model.k.weight = torch.nn.Parameter(torch.randn(4, 8))
        model.k.bias = torch.nn.Parameter(torch.randn(4))
        torch.manual_seed(1)
        expected, after = model(x), torch.rand(1)
        torch.manual_seed(1)
        got = traced(x)
        # the refused concatenation ran before any op: one draw, as eager's
        torch.testing.assert_close(got, expected)
        assert torch.equal(torch.rand(1), after)


def test_concat_weights_refuses_other_widths_than_traced():
    a, b = torch.ones(3, 2), torch.ones(1, 2)
    with pytest.raises(concat_linear.WeightsChanged, match="widths"):
        concat_linear.concat_weights([a, b], rows=(2, 2))
    assert concat_linear.concat_weights([a, b], rows=(3, 1)).shape == (4, 2)


def test_a_torch_function_mode_sees_the_linears_as_traced():
    # a mode that acts on one projection (its weight) saw one linear over concatenated
    # weights under no_grad: silently another result than eager's
    model, x, traced = traced_attention()

    class ScaleQ(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func in (F.linear, torch._C._nn.linear) and args[1] is model.q.weight:
                out = out * 3
            return out

    with torch.no_grad(), ScaleQ():
        torch.testing.assert_close(traced(x), model(x))
    with torch.no_grad():
        assert aten_counts(traced, x)["aten::linear"] == 2  # outside the mode: as one


def test_under_autocast_the_linears_run_as_traced():
    model, x, traced = traced_attention()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert aten_counts(traced, x)["aten::linear"] == 4
        expected = model(x)
        got = traced(x)
    assert got.dtype == expected.dtype == torch.bfloat16
    torch.testing.assert_close(got, expected)


def test_large_projections_stay_apart():
    """Past SMALL_WEIGHT_ELEMENTS the GEMM, not the call, is the cost, and one GEMM over
    the concatenated weights was measured slower than three: such linears stay apart."""
    assert concat_linear.SMALL_WEIGHT_ELEMENTS < 320 * 320
    torch.manual_seed(0)
    model = Attention(width=320, heads=4).eval()
    x = torch.randn(1, 3, 320)
    traced = tracebridge.trace(model, x)
    with torch.no_grad():
        counts = aten_counts(traced, x)
        torch.testing.assert_close(traced(x), model(x))
    assert counts["aten::linear"] == 4
