"""Review of session 13's custom functions run directly (runtime/autograd_function.py), the
graph traced without autograd for fused paths (api.py's ``_without_autograd``, runtime
``Specialised``) and bools answered by ops (trace/dispatch.py):

* a custom function's forward runs with autograd off in eager (``Function.apply`` turns it
  off); run directly with gradients on (no input needs one), a forward that asks
  ``torch.is_grad_enabled()`` was refused (its guard holds the False it saw);
* ops that return an argument itself (``broadcast_tensors``, ``cartesian_prod``, the
  ``atleast_*`` of several tensors) made a direct call return the input itself where
  ``apply`` returns a view of it; and a loaded program wrote a parameter through them
  (the check of state writes did not follow them);
* the fused graph traced without autograd served calls after ``.train()`` (eager's fused
  path is for evaluation only): not eager's bits;
* a module traced without autograd holding nn.MultiheadAttention has size-1
  specialisations that guard autograd off like its first graph: they were taken for the
  graph traced without autograd, checked at the example's sizes, and dropped (calls at
  size 1 were refused);
* the fused graph served calls in training mode, with the fast path switched off, under a
  torch function mode or for a subclass input (eager takes its general path there), and
  no size-1 graph of its own served calls without autograd at batch 1;
* one tensor given twice as example inputs was one input: every op on the first read the
  last (``a - b`` traced with ``(x, x)`` gave zeros for every call).
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import TracerWarning


class _AsksGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        if torch.is_grad_enabled():  # False in eager: apply runs forward without autograd
            return x * 2
        return x * 3

    @staticmethod
    def backward(ctx, grad):
        return grad * 3


class _Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        return torch.broadcast_tensors(x, y)[0]  # x itself: it has the broadcast shape

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _Cartesian(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        return torch.cartesian_prod(x)  # x itself (one tensor)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _AtLeast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        return torch.atleast_1d(y * 2, x)[1]  # x itself, as the second argument

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _Applying(nn.Module):
    def __init__(self, function):
        super().__init__()
        self.function = function

    def forward(self, *inputs):
        return self.function.apply(*inputs)


def test_a_direct_forward_runs_without_autograd_as_apply_runs_it(tmp_path):
    model = _Applying(_AsksGrad)
    x = torch.randn(2, 3)
    traced = tracebridge.trace(model, (x,))
    traced.save(tmp_path / "m.tb")
    for module in (traced, tracebridge.load(tmp_path / "m.tb")):
        y = torch.randn(2, 3)
        assert torch.is_grad_enabled() and not y.requires_grad
        assert torch.equal(module(y), model(y))  # y * 3, as eager
        with torch.no_grad():
            assert torch.equal(module(y), model(y))


@pytest.mark.parametrize("function", [_Broadcast, _Cartesian, _AtLeast])
def test_an_input_returned_by_an_op_is_a_view_as_apply_gives(tmp_path, function):
    model = _Applying(function)
    example = (torch.randn(4), torch.randn(4))
    traced = tracebridge.trace(model, example, check_trace=False)
    traced.save(tmp_path / "m.tb")
    for module in (traced, tracebridge.load(tmp_path / "m.tb")):
        x, y = torch.randn(4), torch.randn(4)
        for grad in (False, True):
            with torch.set_grad_enabled(grad):
                got, want = module(x, y), model(x, y)
            assert torch.equal(got, want)
            assert want is not x and want._base is x  # eager: a view of the input
            assert got is not x and got._base is x


class _Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(16, 4, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x)[0]


def test_the_fused_graph_does_not_serve_calls_in_training_mode(tmp_path):
    torch.manual_seed(0)
    model = _Attention().eval()
    traced = tracebridge.trace(model, (torch.randn(2, 5, 16),))
    assert any("__no_grad_" in n for n in traced.program.specialised["forward"])
    traced.save(tmp_path / "m.tb")
    loaded = tracebridge.load(tmp_path / "m.tb")
    x = torch.randn(2, 5, 16)
    for module in (traced, loaded):
        module.train()
        model.train()  # eager: no fused path in training, with or without autograd
        with torch.no_grad():
            assert torch.equal(module(x), model(x))
            assert torch.equal(module.forward(x), model(x))
        module.eval()
        model.eval()
        with torch.no_grad():
            assert torch.equal(module(x), model(x))  # the fused path again


class _AttentionBranching(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(16, 4, batch_first=True)

    def forward(self, x):
        y = self.attn(x, x, x)[0]
        if x.shape[0] > 1:  # a size-1 specialisation
            y = y * 2
        return y


def test_size1_specialisations_of_a_trace_without_autograd_are_kept(tmp_path):
    torch.manual_seed(1)
    model = _AttentionBranching().eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", TracerWarning)
        warnings.filterwarnings("ignore", message=".*turned into a Python bool")
        traced = tracebridge.trace(model, (torch.randn(2, 5, 16),))
    names = traced.program.specialised["forward"]
    assert names == ["forward__size1_0"]
    traced.save(tmp_path / "m.tb")
    for module in (traced, tracebridge.load(tmp_path / "m.tb")):
        for shape in ((2, 5, 16), (1, 5, 16), (1, 1, 16)):
            x = torch.randn(shape)
            with torch.no_grad():
                assert torch.equal(module(x), model(x)), shape


def test_one_tensor_passed_twice_is_two_inputs(tmp_path):
    def difference(a, b):
        return a - b

    x = torch.randn(3)
    traced = tracebridge.trace(difference, (x, x))  # one tensor, given twice
    traced.save(tmp_path / "f.tb")
    a, b = torch.randn(3), torch.randn(3)
    for function in (traced, tracebridge.load(tmp_path / "f.tb")):
        assert torch.equal(function(a, b), a - b)  # it read b twice: zeros, silently
        assert torch.equal(function(a, a), torch.zeros(3))


class _CrossAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(16, 4, batch_first=True)

    def forward(self, q, k, v):
        return self.attn(q, k, v)[0]


def test_attention_traced_with_one_tensor_as_query_key_and_value():
    torch.manual_seed(2)
    model = _CrossAttention().eval()
    x = torch.randn(2, 5, 16)
    traced = tracebridge.trace(model, (x, x, x))
    q, k, v = torch.randn(3, 2, 5, 16)
    for grad in (False, True):
        with torch.set_grad_enabled(grad):
            # (the trace took self-attention's path, `query is key`, for every call)
            assert torch.equal(traced(q, k, v), model(q, k, v))
            torch.testing.assert_close(traced(x, x, x), model(x, x, x))


def test_the_fused_graph_does_not_serve_calls_while_the_fast_path_is_off(tmp_path):
    torch.manual_seed(3)
    model = _Attention().eval()
    traced = tracebridge.trace(model, (torch.randn(2, 5, 16),))
    traced.save(tmp_path / "m.tb")
    x = torch.randn(2, 5, 16)
    for module in (traced, tracebridge.load(tmp_path / "m.tb")):
        torch.backends.mha.set_fastpath_enabled(False)  # eager: no fused path anywhere
        try:
            with torch.no_grad():
                assert torch.equal(module(x), model(x))
        finally:
            torch.backends.mha.set_fastpath_enabled(True)
        with torch.no_grad():
            assert torch.equal(module(x), model(x))


def test_a_compiled_module_in_training_mode_takes_no_fused_graph():
    torch.manual_seed(4)
    model = _Attention().eval()
    compiled = tracebridge.compile(model, torch.randn(2, 5, 16), backend="reference")
    assert any("__no_grad_" in n for n in compiled.program.specialised["forward"])
    x = torch.randn(2, 5, 16)
    compiled.train()
    model.train()
    with torch.no_grad():
        assert torch.equal(compiled(x), model(x))
    compiled.eval()
    model.eval()
    with torch.no_grad():
        assert torch.equal(compiled(x), model(x))


class _LayerBranching(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, batch_first=True)

    def forward(self, x):
        y = self.layer(x)
        if x.shape[0] > 1:  # a size-1 specialisation
            y = y * 2
        return y


def test_calls_at_size_1_without_autograd_take_the_fused_path_too(tmp_path):
    torch.manual_seed(5)
    model = _LayerBranching().eval()
    traced = tracebridge.trace(model, (torch.randn(2, 5, 16),))
    names = traced.program.specialised["forward"]
    assert sum("__no_grad_" in n for n in names) == 2, names  # its own size-1 graph
    traced.save(tmp_path / "m.tb")
    for module in (traced, tracebridge.load(tmp_path / "m.tb")):
        for shape in ((2, 5, 16), (1, 5, 16), (1, 7, 16), (1, 1, 16)):
            x = torch.randn(shape)
            for grad in (False, True):
                with torch.set_grad_enabled(grad):
                    assert torch.equal(module(x), model(x)), (shape, grad)


class _PassThrough(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class _Subclass(torch.Tensor):
    pass


def test_the_fused_graph_does_not_serve_where_a_torch_function_sends_eager_elsewhere():
    torch.manual_seed(6)
    model = _Attention().eval()
    traced = tracebridge.trace(model, (torch.randn(2, 5, 16),))
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        with _PassThrough():  # eager: has_torch_function, so its general path
            got, want = traced(x), model(x)
        assert torch.equal(got, want)
        sub = x.as_subclass(_Subclass)
        assert torch.equal(traced(sub), model(sub))
        assert torch.equal(traced(x), model(x))
        # arguments unlike the example's: refused in the name of the method called
        with pytest.raises(tracebridge.TraceError, match=r"^forward\(\) takes 1 positional"):
            traced(x, x)


class _WritesThrough(nn.Module):
    """Writes its parameter through an op that returns it itself."""

    def __init__(self, op):
        super().__init__()
        self.op = op
        self.w = nn.Parameter(torch.ones(3))

    def forward(self, x):
        with torch.no_grad():
            if self.op == "broadcast_tensors":
                torch.broadcast_tensors(self.w, x)[0].add_(1)
            else:
                torch.cartesian_prod(self.w).add_(1)
        return x * 1


@pytest.mark.parametrize("op", ["broadcast_tensors", "cartesian_prod"])
def test_a_loaded_program_writes_no_parameter_through_an_op_that_returns_it(tmp_path, op):
    # (it was traced, saved and loaded, and each call of the loaded program wrote it)
    with pytest.raises(tracebridge.ArtifactError, match="writes parameter 'w'"):
        with torch.no_grad():
            traced = tracebridge.trace(_WritesThrough(op), (torch.ones(3),), check_trace=False)
        traced.save(tmp_path / "w.tb")
        tracebridge.load(tmp_path / "w.tb")
