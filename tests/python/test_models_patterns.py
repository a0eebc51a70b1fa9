"""Patterns of published model code (issue 12), reproduced by small stand-in modules.

Each test copies what a library does (transformers, torchvision, timm, RAFT, wav2vec2,
LeViT, quantization-aware training) in a few lines, so the conformance suite covers the
zoo's findings without installing the zoo's packages (benchmarks/zoo.py runs the real
models). Every test asserts results: the traced module agrees with eager on calls the
trace was not made with, or refuses with an error that names the line.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tracebridge
from tracebridge import GuardError, TraceError

HERE = os.path.basename(__file__)


# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


def close(a, b):
    return torch.allclose(a, b, atol=1e-5, rtol=1e-5)


def roundtrip(traced, tmp_path):
    path = tmp_path / "m.tb"
    traced.save(path)
    return tracebridge.load(path)


# --- looking like a tracer to library code ----------------------------------------------------


class PaddingAware(nn.Module):
    """transformers' masking: skip the mask when nothing is padded, unless tracing."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x, mask):
        h = self.proj(x)
        if not torch.jit.is_tracing() and bool(mask.all()):
            return h.sum(1)
        return (h * mask[..., None]).sum(1)


def test_is_tracing_is_true_so_library_code_records_its_general_path(tmp_path):
    m = PaddingAware().eval()
    x, ones = torch.randn(2, 5, 4), torch.ones(2, 5)
    traced = tracebridge.trace(m, (x, ones))
    padded = torch.ones(3, 6)
    padded[0, 4:] = 0
    x2 = torch.randn(3, 6, 4)
    assert close(traced(x2, padded), m(x2, padded))
    assert close(roundtrip(traced, tmp_path)(x2, padded), m(x2, padded))
    assert not torch.jit.is_tracing()  # only while tracing


class TorchvisionTracingState(nn.Module):
    """torchvision's detection code asks torch._C._get_tracing_state() and then stacks
    sizes as tensors, as TorchScript's tracer has them; tracebridge's sizes are ints, so
    that path stays closed and the ordinary one records a general graph."""

    def forward(self, x):
        if torch._C._get_tracing_state():
            sizes = torch.stack([x.shape[-1], x.shape[-2]])
            return x * sizes.sum()
        return x * (x.shape[-1] + x.shape[-2])


def test_torchscript_tracing_state_stays_closed():
    m = TorchvisionTracingState()
    traced = tracebridge.trace(m, torch.randn(2, 3))
    assert close(traced(torch.ones(4, 5)), torch.full((4, 5), 9.0))


# --- library assertions ------------------------------------------------------------------------


class PatchEmbed(nn.Module):
    """torchvision's ViT: torch._assert on the image size, with its own message."""

    def __init__(self, size=8):
        super().__init__()
        self.size = size
        self.proj = nn.Conv2d(3, 4, 4, 4)

    def forward(self, x):
        n, c, h, w = x.shape
        torch._assert(h == self.size, f"Wrong image height! Expected {self.size} but got {h}!")
        torch._assert(torch.tensor(w == self.size), "Wrong image width!")
        torch._check(c == 3, lambda: "expected 3 channels")
        torch._check_is_size(n)
        torch._assert_async(torch.tensor(True))
        assert n >= 1, "empty batch"
        return self.proj(x).flatten(2)


def test_library_assertions_become_checks_with_the_library_message(tmp_path):
    m = PatchEmbed()
    traced = tracebridge.trace(m, torch.randn(2, 3, 8, 8))
    x = torch.randn(5, 3, 8, 8)
    assert close(traced(x), m(x))
    for fn in (traced, roundtrip(traced, tmp_path)):
        with pytest.raises(GuardError, match="Wrong image height"):
            fn(torch.randn(2, 3, 12, 8))
    assert any("Wrong image height" in g for g in traced.guards)


class AssertOnValue(nn.Module):
    def forward(self, x):
        torch._assert_async((x > -100).all(), "values out of range")
        return x + 1


def test_assert_async_on_a_traced_value_is_checked_on_every_call():
    traced = tracebridge.trace(AssertOnValue(), torch.randn(3))
    assert close(traced(torch.zeros(4)), torch.ones(4))
    with pytest.raises(GuardError, match="values out of range"):
        traced(torch.full((2,), -1000.0))


# --- size specialisation -------------------------------------------------------------------


class SdpaLike(nn.Module):
    """transformers' sdpa_attention: is_causal depends on whether q_length > 1, and a
    position check compares the batch of two tensors."""

    def __init__(self):
        super().__init__()
        self.q = nn.Linear(8, 8)

    def forward(self, x):
        q = self.q(x)
        positions = torch.arange(x.shape[1]).expand(x.shape[0], -1)
        if q.shape[0] != positions.shape[0]:
            raise ValueError("batch mismatch")
        is_causal = q.shape[1] > 1
        out = F.scaled_dot_product_attention(q, q, q, is_causal=is_causal)
        return out + positions[..., None]


def test_a_trace_at_batch_2_serves_batch_1_and_length_1(tmp_path):
    m = SdpaLike().eval()
    traced = tracebridge.trace(m, torch.randn(2, 6, 8))
    loaded = roundtrip(traced, tmp_path)
    for shape in [(1, 6, 8), (3, 4, 8), (2, 1, 8), (1, 1, 8), (4, 7, 8)]:
        x = torch.randn(shape)
        assert close(traced(x), m(x)), shape
        assert close(loaded(x), m(x)), shape


# --- custom autograd functions -------------------------------------------------------------


class RoundSTE(torch.autograd.Function):
    """A straight-through estimator (quantization-aware training): round forward,
    identity backward."""

    @staticmethod
    def forward(ctx, x):
        return torch.round(x * 4) / 4

    @staticmethod
    def backward(ctx, grad):
        return grad


class Quantized(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        return RoundSTE.apply(self.lin(x)) * 2


def _grads(fn, module, x):
    module.zero_grad()
    fn(x).sum().backward()
    return [p.grad.clone() for p in module.parameters()]


def test_custom_autograd_function_never_gives_a_silently_wrong_gradient(tmp_path):
    m = Quantized()
    x = torch.randn(5, 4)
    try:
        traced = tracebridge.trace(m, x)
    except TraceError as exc:  # refusing is allowed: it must say what and where
        assert "RoundSTE" in str(exc) and HERE in str(exc)
        return
    assert close(traced(x), m(x))
    want = _grads(m, m, x)
    for fn in (traced, roundtrip(traced, tmp_path)):
        try:
            got = _grads(fn, m if fn is traced else fn, x)
        except TraceError as exc:
            assert "RoundSTE" in str(exc)
            continue
        for a, b in zip(want, got):
            assert close(a, b)


def test_custom_autograd_function_traced_for_inference_keeps_its_own_gradient():
    # The function is one node with its own backward graph (trace/autograd_function.py),
    # so a trace made under no_grad also trains, with the function's gradient.
    m = Quantized()
    x = torch.randn(5, 4)
    with torch.no_grad():
        traced = tracebridge.trace(m, x)
        assert close(traced(x), m(x))
    want = _grads(m, m, x)
    for a, b in zip(want, _grads(traced, m, x)):
        assert close(a, b)


# --- modes ---------------------------------------------------------------------------------------


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Dropout(0.5))

    def forward(self, x):
        return self.body(x)


def test_train_and_eval_on_the_traced_module_switch_the_shared_sub_modules():
    # As Module.train() on a wrapper (DistributedDataParallel) does: the sub-modules are
    # shared, so they switch for both; the original's own flag stays.
    m = Net().eval()
    traced = tracebridge.trace(m, torch.randn(3, 4), respect_mode=True)
    traced.train()
    assert traced.training
    assert not m.training and all(sub.training for sub in m.body.modules())
    assert traced.body[0].weight is m.body[0].weight
    m.train()
    traced.eval()
    assert not traced.training
    assert m.training and not any(sub.training for sub in m.body.modules())


class CachedBiases(nn.Module):
    """timm's LeViT: eval mode caches a tensor computed from a parameter; train() clears it."""

    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(4))
        self.cache = {}

    @torch.no_grad()
    def train(self, mode=True):
        super().train(mode)
        if mode and self.cache:
            self.cache = {}
        return self

    def biases(self, device):
        if self.training:
            return self.bias * 2
        key = str(device)
        if key not in self.cache:
            self.cache[key] = self.bias * 2
        return self.cache[key]

    def forward(self, x):
        return x + self.biases(x.device)


def test_a_model_whose_train_clears_a_cache_traces_and_checks():
    m = CachedBiases().eval()
    x = torch.randn(3, 4)
    m(x)  # the user ran it once: the cache is full
    traced = tracebridge.trace(m, x)
    assert close(traced(torch.zeros(2, 4)), m(torch.zeros(2, 4)))


# --- other published patterns ------------------------------------------------------------------


class DeviceCopy(nn.Module):
    """RAFT: torch.device(x.device)."""

    def forward(self, x):
        device = torch.device(x.device)
        return x + torch.ones(x.shape[-1], device=device)


class ScaleFromSizes(nn.Module):
    """Detection transforms: interpolate with a scale factor computed from traced sizes."""

    def forward(self, x):
        scale = 16 / min(x.shape[-2:])
        return F.interpolate(x, scale_factor=scale, mode="bilinear", recompute_scale_factor=True)


class Unique(nn.Module):
    """SSDlite's NMS path: torch.unique on labels."""

    def forward(self, labels, scores):
        out = []
        for label in torch.unique(labels):
            out.append(scores[labels == label].max())
        return torch.stack(out)


class TrainingOnlySetter(nn.Module):
    """wav2vec2's feature encoder: a property setter on a view of the input, in a
    training-only branch."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        h = x[:, None]
        if self.training:
            h.requires_grad = True
        return self.lin(h) * 2


def test_torch_device_of_a_device():
    m = DeviceCopy()
    traced = tracebridge.trace(m, torch.randn(2, 3))
    x = torch.randn(4, 3)
    assert close(traced(x), m(x))


def test_interpolate_with_a_scale_factor_from_traced_sizes(tmp_path):
    m = ScaleFromSizes()
    traced = tracebridge.trace(m, torch.randn(1, 2, 8, 8))
    x = torch.randn(2, 2, 4, 6)
    assert traced(x).shape == m(x).shape
    assert close(traced(x), m(x))
    assert close(roundtrip(traced, tmp_path)(x), m(x))


def test_unique_is_recorded_or_guarded():
    m = Unique()
    labels, scores = torch.tensor([0, 1, 1, 2]), torch.rand(4)
    traced = tracebridge.trace(m, (labels, scores))
    other = torch.tensor([2, 1, 0, 0, 1])
    s2 = torch.rand(5)
    assert close(traced(other, s2), m(other, s2))
    with pytest.raises(GuardError):
        traced(torch.tensor([0, 0]), torch.rand(2))


def test_property_setter_in_a_training_only_branch():
    m = TrainingOnlySetter().eval()
    traced = tracebridge.trace(m, torch.randn(2, 4))
    x = torch.randn(3, 4)
    assert close(traced(x), m(x))


def test_property_setter_with_check_trace_off_names_the_line_or_works():
    m = TrainingOnlySetter().eval()
    try:
        traced = tracebridge.trace(m, torch.randn(2, 4), check_trace=False, respect_mode=True)
    except TraceError as exc:
        assert HERE in str(exc)
        return
    x = torch.randn(3, 4)
    assert close(traced(x), m(x))


class BNOnly(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(4)

    def forward(self, x):
        return self.bn(x)


def test_check_trace_does_not_draw_random_numbers():
    m = BNOnly().eval()
    x, c = torch.randn(3, 4), torch.randn(5, 4)
    torch.manual_seed(3)
    tracebridge.trace(m, x, check_inputs=[(c,)])
    after = torch.rand(1)
    torch.manual_seed(3)
    assert torch.equal(after, torch.rand(1))


class Scale(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4))

    def forward(self, x, w):
        return x * w + self.w


def test_a_parameter_passed_as_an_input():
    m = Scale()
    x = torch.randn(2, 4)
    traced = tracebridge.trace(m, (x, m.w))
    assert close(traced(x, m.w), m(x, m.w))
    other = torch.randn(4)
    assert close(traced(x, other), x * other + m.w)


def dict_sum(d):
    return d["a"] * 2 + d["b"]


def dict_values(d):
    return torch.cat(list(d.values())) * 2


def test_dict_inputs_are_matched_by_key_and_order():
    """A dict input with the traced keys in another order is refused where the code
    iterates it: it sees the call's order in eager (test_divergence.py, dict_input_order).
    Code that reads it only by key takes any order (trace/key_reads.py)."""
    a, b = torch.randn(3), torch.randn(3)
    traced = tracebridge.trace(dict_sum, ({"a": a, "b": b},))
    assert close(traced({"a": a, "b": b}), a * 2 + b)
    assert close(traced({"b": b, "a": a}), a * 2 + b)
    with pytest.raises(TraceError):
        traced({"a": a, "c": b})
    iterated = tracebridge.trace(dict_values, ({"a": a, "b": b},))
    with pytest.raises(GuardError, match=r"keys in the order \['b', 'a'\] where the trace"):
        iterated({"b": b, "a": a})


def values_then_keywords(x, d, *, u, v):
    return torch.cat(list(d["p"].values())) * x + u - v


@pytest.mark.parametrize("runtime", ["memory", "codegen", "interpreter"])
def test_nested_dict_order_is_checked_and_keywords_stay_by_name(tmp_path, runtime):
    a, b, x = torch.randn(2), torch.randn(3), torch.randn(5)
    traced = tracebridge.trace(
        values_then_keywords, (x, {"p": {"a": a, "b": b}}), example_kwarg_inputs={"u": x, "v": x}
    )
    if runtime != "memory":
        traced.save(tmp_path / "t.tb")
        traced = tracebridge.load(tmp_path / "t.tb", runtime=runtime)
    want = values_then_keywords(x, {"p": {"a": a, "b": b}}, u=x, v=2 * x)
    assert close(traced(x, {"p": {"a": a, "b": b}}, v=2 * x, u=x), want)  # keywords by name
    with pytest.raises(GuardError, match=r"argument 2\['p'\], a dict, holding its keys") as info:
        traced(x, {"p": {"b": b, "a": a}}, u=x, v=2 * x)
    assert info.value.seen == ["b", "a"] and "pass the keys in the traced order" in str(info.value)


def var_keywords_then_named(x, *, n, **kw):
    return torch.cat([x * n.sum(), *kw.values()])


@pytest.mark.parametrize("runtime", ["memory", "codegen", "interpreter"])
def test_var_keywords_order_is_checked_and_named_keywords_stay_by_name(tmp_path, runtime):
    """Keywords that land in **kwargs are refused in another order (eager iterates them
    in the call's order); a named keyword may come anywhere (test_divergence.py,
    var_keywords_order). The order survives save and load (the graph's var_keywords)."""
    a, b, x, n = torch.randn(2), torch.randn(3), torch.randn(1), torch.randn(2)
    traced = tracebridge.trace(
        var_keywords_then_named, (x,), example_kwarg_inputs={"a": a, "n": n, "b": b}
    )
    if runtime != "memory":
        traced.save(tmp_path / "t.tb")
        traced = tracebridge.load(tmp_path / "t.tb", runtime=runtime)
    assert traced.program.methods["forward"].var_keywords == ["a", "b"]
    want = var_keywords_then_named(x, a=a, b=b, n=n)
    assert close(traced(x, a=a, b=b, n=n), want)  # n by name, a and b in the traced order
    assert close(traced(x, n=n, a=a, b=b), want)
    with pytest.raises(GuardError) as info:
        traced(x, b=b, n=n, a=a)
    assert info.value.seen == ["b", "a"]
    assert "keyword arguments ['b', 'a'], which the traced code takes in its **kwargs" in str(
        info.value
    )
    assert "trace was made with ['a', 'b']" in str(info.value)
    assert "pass them in the traced order (a, b)" in str(info.value)


class VarKeywordHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)

    def forward(self, x, **heads):
        return torch.cat([self.lin(x), *heads.values()], 1)

    def score(self, x, **weights):
        return sum(w * (i + 1) for i, w in enumerate(weights.values())) * x.sum()


def test_var_keywords_of_module_methods_and_graph_modules_are_checked():
    """A module's forward and another traced method record their own **kwargs; the
    GraphModule of tracebridge.to_graph_module refuses another order (and a dict input in
    another order) as the runtime does."""
    from tracebridge.export import fx

    module = VarKeywordHeads()
    x, p, q = torch.randn(3, 2), torch.randn(3, 1), torch.randn(3, 2)
    traced = tracebridge.trace(module, (x,), example_kwarg_inputs={"p": p, "q": q})
    assert close(traced(x, p=p, q=q), module(x, p=p, q=q))
    with pytest.raises(GuardError, match=r"\['q', 'p'\]"):
        traced(x, q=q, p=p)
    gm = tracebridge.to_graph_module(traced)
    assert close(fx.call(gm, x, p=p, q=q), module(x, p=p, q=q))
    with pytest.raises(GuardError, match=r"\['q', 'p'\]"):
        fx.call(gm, x, q=q, p=p)

    u, v = torch.tensor(2.0), torch.tensor(3.0)
    both = tracebridge.trace_module(
        module,
        {"forward": {"x": x, "p": p, "q": q}, "score": {"x": x, "u": u, "v": v}},
        example_inputs_is_kwarg=True,
    )
    assert both.program.methods["score"].var_keywords == ["u", "v"]
    assert close(both.score(x=x, u=u, v=v), module.score(x, u=u, v=v))
    with pytest.raises(GuardError, match=r"\['v', 'u'\]"):
        both.score(x=x, v=v, u=u)

    a, b = torch.randn(2), torch.randn(3)
    values = tracebridge.trace(lambda d: torch.cat(list(d.values())), ({"a": a, "b": b},))
    with pytest.raises(GuardError, match=r"holding its keys in the order \['b', 'a'\]"):
        fx.call(tracebridge.to_graph_module(values), {"b": b, "a": a})


def test_a_call_without_var_keywords_records_none():
    x = torch.randn(3)
    assert (
        tracebridge.trace(dict_sum, ({"a": x, "b": x},)).program.methods["forward"].var_keywords
        == []
    )
    traced = tracebridge.trace(
        values_then_keywords, (x, {"p": {"a": x}}), example_kwarg_inputs={"u": x, "v": x}
    )
    assert traced.program.methods["forward"].var_keywords == []


class FreezesInEval(nn.Module):
    """A train() that also freezes parameters: tracing calls it (to clear caches) and must
    leave the parameters' requires_grad as the user set it."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def train(self, mode=True):
        super().train(mode)
        for p in self.parameters():
            p.requires_grad_(not mode)
        return self

    def forward(self, x):
        return self.lin(x)


def test_tracing_leaves_requires_grad_as_the_user_set_it():
    m = FreezesInEval().eval()
    m.lin.weight.requires_grad_(False)
    m.lin.bias.requires_grad_(True)
    traced = tracebridge.trace(m, torch.randn(2, 3))
    assert not m.lin.weight.requires_grad and m.lin.bias.requires_grad
    x = torch.randn(4, 3)
    assert close(traced(x), m(x))


def test_a_compiled_trace_keeps_its_specialisations():
    m = SdpaLike().eval()
    compiled = tracebridge.compile(m, torch.randn(2, 6, 8), backend="reference")
    x = torch.randn(1, 1, 8)
    assert close(compiled(x), m(x))
