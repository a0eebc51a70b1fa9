"""Generated code that does no work the inputs cannot change (issue 20, item 5).

Values computed only from literals and state (a causal mask from literal sizes, a weight
scaled and transposed) are folded: computed once, kept while the state they read is the
same tensors at the same versions, recomputed after ``load_state_dict``, ``.to()``, an
in-place update or a parameter assignment, and computed on every call where autograd
needs them. A dropout recorded in evaluation mode is no call at all.
"""

from __future__ import annotations

import re
import shutil

import pytest
import torch
from torch import nn

import tracebridge

# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


class Masked(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 8))
        self.register_buffer("scale", torch.tensor(2.0))
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        mask = torch.triu(torch.ones(8, 8, dtype=torch.bool), diagonal=1)
        w = (self.w * self.scale).t().softmax(-1)
        y = (x @ w).masked_fill(mask[: x.shape[1]][None], 0.0)
        return self.drop(y)


def _folded_ops(traced) -> int:
    method = traced._methods["forward"]
    runner = [
        v for v in method._function((True, True)).__globals__.values() if "folded(" in repr(v)
    ]
    return runner[0].ops if runner else 0


def test_values_of_literals_and_state_are_folded_and_kept(tmp_path):
    model = Masked().eval()
    x = torch.randn(2, 8, 8)
    traced = tracebridge.trace(model, x)
    path = tmp_path / "m.tb"
    traced.save(path)
    loaded = tracebridge.load(path)
    code = loaded.code
    assert "folded" in code and "triu" not in code and "softmax" not in code
    assert "dropout" not in code.replace("# dropout", "")  # eval dropout: no call
    assert _folded_ops(loaded) >= 4
    for length in (8, 5, 1):
        y = torch.randn(3, length, 8)
        assert torch.allclose(loaded(y), model(y), atol=1e-6)
        assert torch.equal(loaded(y), traced(y))
    with torch.no_grad():  # the cache is used: no op of the folded part runs again
        first = loaded(x)
        assert torch.equal(loaded(x), first)


def test_folded_values_follow_the_state():
    model = Masked().eval()
    x = torch.randn(2, 8, 8)
    traced = tracebridge.trace(model, x)
    with torch.no_grad():
        traced(x)  # fill the cache
        model.scale.fill_(3.0)  # in place: a new version
        assert torch.allclose(traced(x), model(x), atol=1e-6)
    state = {"w": torch.randn(8, 8), "scale": torch.tensor(1.5)}
    model.load_state_dict(state)
    traced.load_state_dict(state)
    with torch.no_grad():
        assert torch.allclose(traced(x), model(x), atol=1e-6)
    traced.w = nn.Parameter(torch.randn(8, 8))  # a new parameter object
    model.w = traced.w
    with torch.no_grad():
        assert torch.allclose(traced(x), model(x), atol=1e-6)
    with torch.no_grad():
        traced.w.data = torch.randn(8, 8)  # same object, same version, new data
        model.w = traced.w
        assert torch.allclose(traced(x), model(x), atol=1e-6)
    traced.double()
    model.double()
    with torch.no_grad():
        assert torch.allclose(traced(x.double()), model(x.double()))


def test_gradients_reach_the_parameters_through_folded_values():
    model = Masked().eval()
    x = torch.randn(2, 8, 8)
    traced = tracebridge.trace(model, x)
    expected = torch.autograd.grad(model(x).sum(), model.w)[0]
    for context in (torch.no_grad, torch.inference_mode):
        with context():
            traced(x)  # a cached value made without autograd must not be reused with it
        got = torch.autograd.grad(traced(x).sum(), traced.w)[0]
        assert torch.allclose(got, expected, atol=1e-6)


class ReturnsMask(nn.Module):
    def forward(self, x):
        mask = torch.ones(4, 4).tril()
        return x @ mask, mask  # the caller gets the mask: it must be a fresh tensor


class WritesMask(nn.Module):
    def forward(self, x):
        mask = torch.zeros(4)
        view = mask[:2]
        view.add_(x.sum())  # writes through a view of a static tensor
        return x + mask


@pytest.mark.parametrize("cls", [ReturnsMask, WritesMask])
def test_a_cached_tensor_never_escapes_or_changes(cls):
    model = cls()
    x = torch.randn(4, 4)
    traced = tracebridge.trace(model, x)
    assert "folded" not in traced.code
    with torch.no_grad():
        first = traced(x)
        if isinstance(first, tuple):
            first[1].mul_(100)  # the caller changes what it got
        again = traced(x)
        expected = model(x)
    for a, b in zip(
        again if isinstance(again, tuple) else (again,),
        (expected if isinstance(expected, tuple) else (expected,)),
    ):
        assert torch.allclose(a, b)


class ConvBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 4, 3, bias=False)
        self.bn2 = nn.BatchNorm2d(4, affine=False)

    def forward(self, x):
        return self.bn2(self.conv2(self.bn(self.conv(x)).relu()))


def test_convolution_and_eval_batch_norm_are_one_op_without_autograd(tmp_path):
    torch.manual_seed(0)
    model = ConvBN()
    model.train()
    for _ in range(3):  # statistics that are not 0 and 1
        model(torch.randn(4, 3, 8, 8))
    model.eval()
    x = torch.randn(2, 3, 8, 8)
    traced = tracebridge.trace(model, x)
    path = tmp_path / "convbn.tb"
    traced.save(path)
    loaded = tracebridge.load(path)
    method = loaded._methods["forward"]
    with torch.no_grad():
        fast = method._function((True, True))
        assert torch.allclose(loaded(x), model(x), atol=1e-5)
        other = torch.randn(1, 3, 5, 7)
        assert torch.allclose(loaded(other), model(other), atol=1e-5)
    names = " ".join(fast.__globals__)
    assert "batch_norm" not in names and "conv2d" in names
    # With autograd, the graph as traced: gradients are eager's.
    expected = torch.autograd.grad(model(x).sum(), model.conv.weight)[0]
    got = torch.autograd.grad(loaded(x).sum(), loaded.conv.weight)[0]
    assert torch.allclose(got, expected, atol=1e-5)
    assert "batch_norm" in " ".join(method._function((True, False)).__globals__)


class ConvBNDecides(ConvBN):
    """The same layers, their output then decided on: the top class and a threshold."""

    def forward(self, x):
        scores = super().forward(x).mean((2, 3))
        return scores.argmax(1), scores > 0, scores


class Decided(ConvBN):
    def __init__(self, what: str):
        super().__init__()
        self.what = what

    def forward(self, x):
        y = super().forward(x).mean((2, 3))
        if self.what == "argmax":
            return y.argmax(1)
        if self.what == "compare":
            return torch.where(y > 0, 1.0, 0.0)
        if self.what == "round":
            return (y * 1e4).round()
        return y + float(y.sum().item() > 0)


@pytest.mark.parametrize("what", ["argmax", "compare", "round", "item"])
def test_no_batch_norm_is_folded_where_its_output_reaches_a_decision(what):
    """Folding moves results by rounding; where a value decides something (non-maximum
    suppression's tied boxes, a class, a threshold), that rounding changes the decision:
    the norms there run as traced, and the results are eager's bit for bit."""
    from tracebridge.runtime.folding import values_that_decide

    torch.manual_seed(0)
    model = Decided(what).eval()
    x = torch.randn(2, 3, 8, 8)
    traced = tracebridge.trace(model, x, check_trace=what != "item")
    graph = traced.program.methods["forward"]
    norms = [n for n in graph.nodes if n.op == "batch_norm"]
    assert norms and all(n.outputs[0].id in values_that_decide(graph) for n in norms)
    with torch.no_grad():
        names = " ".join(traced._methods["forward"]._function((True, True)).__globals__)
        assert "batch_norm" in names
        assert torch.equal(traced(x), model(x))


def test_norms_whose_output_only_flows_on_are_folded_beside_a_decision():
    """Decisions downstream of some norms keep those; the rest of the graph is folded
    (here: every norm reaches the argmax, so none is folded, and the scores are eager's)."""
    from tracebridge.runtime.folding import values_that_decide

    torch.manual_seed(0)
    model = ConvBNDecides().eval()
    graph = tracebridge.trace(model, torch.randn(2, 3, 8, 8)).program.methods["forward"]
    decide = values_that_decide(graph)
    assert all(n.outputs[0].id in decide for n in graph.nodes if n.op == "batch_norm")
    plain = tracebridge.trace(ConvBN().eval(), torch.randn(2, 3, 8, 8))
    assert not values_that_decide(plain.program.methods["forward"])


class SelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(16, 4, batch_first=True)

    def forward(self, x):
        out, weights = self.attn(x, x, x)
        return out, weights


def test_multihead_attention_fast_path_where_eager_takes_it(tmp_path):
    torch.manual_seed(0)
    model = SelfAttention().eval()
    x = torch.randn(2, 5, 16)
    with torch.no_grad():  # evaluation without autograd: eager's fused path
        traced = tracebridge.trace(model, x)
    ops = [n.op for n in traced.program.methods["forward"].nodes]
    assert "_native_multi_head_attention" in ops and "bmm" not in ops
    path = tmp_path / "mha.tb"
    traced.save(path)
    loaded = tracebridge.load(path)
    with torch.no_grad():
        for shape in [(2, 5, 16), (1, 9, 16), (3, 1, 16)]:
            y = torch.randn(*shape)
            for got, want in zip(loaded(y), model(y)):
                assert torch.allclose(got, want, atol=1e-5)
    # The fused op has no gradient: a call with autograd is refused, not wrong.
    with pytest.raises(tracebridge.GuardError, match="fused path"):
        loaded(x)
    # Traced with autograd on, the graph is the general one, and gradients flow.
    general = tracebridge.trace(model, x)
    assert "_native_multi_head_attention" not in [
        n.op for n in general.program.methods["forward"].nodes
    ]
    general(x)[0].sum().backward()


class ScaledAndPlain(nn.Module):
    """One weight read by a folded op (``w * 2``) and by an op that is not folded."""

    def __init__(self):
        super().__init__()
        self.register_buffer("w", torch.randn(4, 4))

    def forward(self, x):
        return x @ (self.w * 2), x @ self.w


@pytest.mark.parametrize("runtime", ["codegen", "interpreter"])
def test_a_state_read_by_folded_and_other_ops_is_defined_for_both(runtime, tmp_path):
    model = ScaledAndPlain().eval()
    traced = tracebridge.trace(model, torch.rand(2, 4), runtime=runtime)
    path = tmp_path / "m.tb"
    traced.save(path)
    loaded = tracebridge.load(path, runtime=runtime)
    for batch in (1, 3):
        x = torch.rand(batch, 4)
        for got, want in zip(loaded(x), model(x)):
            assert torch.equal(got, want)
    with torch.no_grad():
        model.w.mul_(3)  # the state changed: the folded value follows it
    x = torch.rand(2, 4)
    for got, want in zip(traced(x), model(x)):
        assert torch.equal(got, want)


class Encoder(nn.Module):
    """Two fused-path encoder layers (relu, post-norm) and a head."""

    def __init__(self, activation: str = "relu", norm_first: bool = False):
        super().__init__()
        layer = nn.TransformerEncoderLayer(
            16, 4, 32, dropout=0.1, activation=activation, norm_first=norm_first, batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(16, 3)

    def forward(self, x, padding=None):
        return self.head(self.encoder(x, src_key_padding_mask=padding))


def _ops(traced) -> list[str]:
    return [n.op for n in traced.program.methods["forward"].nodes]


@pytest.mark.parametrize("activation, norm_first", [("relu", False), ("gelu", True)])
def test_transformer_encoder_layer_fast_path_where_eager_takes_it(tmp_path, activation, norm_first):
    torch.manual_seed(0)
    model = Encoder(activation, norm_first).eval()
    x = torch.randn(2, 5, 16)
    with torch.no_grad():  # evaluation without autograd: eager's fused path
        traced = tracebridge.trace(model, x)
    ops = _ops(traced)
    assert ops.count("_transformer_encoder_layer_fwd") == 2
    assert not {"scaled_dot_product_attention", "linear", "layer_norm"} & set(ops[:-3])
    path = tmp_path / "encoder.tb"
    traced.save(path)
    for runtime in ("codegen", "interpreter"):
        loaded = tracebridge.load(path, runtime=runtime)
        with torch.no_grad():
            for shape in [(2, 5, 16), (1, 9, 16), (3, 1, 16)]:
                y = torch.randn(*shape)
                assert torch.allclose(loaded(y), model(y), atol=1e-5)
        # The fused op has no gradient: a call with autograd is refused, not wrong.
        with pytest.raises(tracebridge.GuardError, match="TransformerEncoderLayer's fused path"):
            loaded(x)
    # Traced with autograd on, the graph is the general one, and gradients flow.
    general = tracebridge.trace(model, x)
    assert "_transformer_encoder_layer_fwd" not in _ops(general)
    general(x).sum().backward()
    assert model.head.weight.grad is not None


def test_transformer_encoder_layer_fast_path_with_a_padding_mask(tmp_path):
    """A key padding mask reaches the fused op as its mask (mask_type 1)."""
    torch.manual_seed(0)
    model = Encoder().eval()
    x = torch.randn(2, 5, 16)
    padding = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    with torch.no_grad():
        traced = tracebridge.trace(model, (x, padding))
        node = next(
            n
            for n in traced.program.methods["forward"].nodes
            if n.op == "_transformer_encoder_layer_fwd"
        )
        assert node.args[-1] == 1 and node.args[-2] is not None
        path = tmp_path / "padded.tb"
        traced.save(path)
        loaded = tracebridge.load(path)
        for length in (5, 7):
            y = torch.randn(2, length, 16)
            pad = torch.zeros(2, length, dtype=torch.bool)
            pad[1, -2:] = True
            want = model(y, pad)
            assert torch.allclose(loaded(y, pad)[0], want[0], atol=1e-5)
            assert torch.allclose(loaded(y, pad)[1, :-2], want[1, :-2], atol=1e-5)


def test_transformer_encoder_layer_in_training_mode_is_not_fused():
    model = Encoder().train()
    with torch.no_grad():
        traced = tracebridge.trace(model, torch.randn(2, 5, 16))
    assert "_transformer_encoder_layer_fwd" not in _ops(traced)


@pytest.mark.skipif(shutil.which("Rscript") is None, reason="R is not installed")
def test_r_reader_accepts_the_fused_encoder_layer(tmp_path):
    """R's base-R reader checks op names against ops.json (op-set 5 has the fused op)."""
    from .test_check_program import r_verdicts

    torch.manual_seed(0)
    with torch.no_grad():
        traced = tracebridge.trace(Encoder().eval(), torch.randn(2, 5, 16))
    path = tmp_path / "encoder.tb"
    traced.save(path)
    assert r_verdicts([path], tmp_path) == {"encoder.tb": "accept"}


# --- lean generated code --------------------------------------------------------------------
# Note: what a call costs in Python. The generated function reads every op, state table,
# constant and guard node as a local (keyword-only parameters bound once, at load), never
# through the globals dict or an attribute of a module; sizes multiplied by a literal are
# ``*``; the only attribute reads are those of the inputs' tensors that the graph asks for
# (ranks, dtypes, sizes) and ``dict.get`` of the input check.

_TENSOR_READS = {
    "shape",
    "dtype",
    "ndim",
    "get",
    "device",
    "numel",
    "item",
    "stride",
    "is_inference",  # the outputs' flavour at the return (runtime/lean.py)
    "is_contiguous",  # torch 2.11's encoder layer reads it to choose its fused path
}


def _bytecode(fn) -> list:
    import dis

    return list(dis.get_instructions(fn))


@pytest.mark.parametrize("runtime_guards", [True, False])
def test_generated_code_reads_ops_and_state_as_locals(tmp_path, runtime_guards):
    torch.manual_seed(0)
    model = Encoder().eval()
    path = tmp_path / "encoder.tb"
    tracebridge.trace(model, torch.randn(2, 5, 16)).save(path)  # the general graph
    method = tracebridge.load(path)._methods["forward"]
    for no_grad in (False, True):
        fn = method._function((runtime_guards, no_grad))
        code = _bytecode(fn)
        # A guard's record (G) is read only where its guard fails: it stays a global, so
        # that the values' locals stay below index 256 (codegen.CodeGen.signature).
        loads = [i.argval for i in code if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")]
        assert all(re.fullmatch(r"G\d+", name) for name in loads), loads
        reads = {i.argval for i in code if i.opname in ("LOAD_ATTR", "LOAD_METHOD")}
        assert reads <= _TENSOR_READS, reads - _TENSOR_READS
        # Only the inputs are positional; the bound names cannot be passed by position.
        assert fn.__code__.co_posonlyargcount == 1 and fn.__code__.co_argcount == 1
    # Heads and sizes: products by a literal are written inline; a product of two values
    # (which could square a number) still calls the bounded function.
    assert " * 4  # scalar.mul" in method.code
    calls = [line for line in method.code.splitlines() if "op_scalar_mul" in line]
    assert all(re.search(r"op_scalar_mul_\d+\(v\d+, v\d+\)", line) for line in calls)
    x = torch.randn(3, 7, 16)
    with torch.no_grad():
        assert torch.allclose(method(x), model(x), atol=1e-5)


def test_a_call_through_the_module_reads_the_guard_switch_without_an_exception():
    """The per-thread guard switch has a class default: reading it in a call raised and
    caught an AttributeError on every call before (a few microseconds each)."""
    import threading

    from tracebridge.runtime import method

    assert type(method._local).__dict__["off"] is False
    seen = []
    thread = threading.Thread(target=lambda: seen.append(method._local.off))
    with tracebridge.guards_disabled():
        thread.start()
        thread.join()
        assert method._local.off is True
    assert seen == [False] and method._local.off is False
