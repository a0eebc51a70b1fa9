"""Patterns of the held-out sweep's ninth round (benchmarks/heldout_ninth.py) that tracebridge
refuses, reproduced by small stand-in modules (no transformers needed): each refusal names
the model's line and says why, and the calls the trace does serve are right."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import GuardError, UnsupportedOpError

from .graph_helpers import line_of, loaded, ops_of

# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


class CountedExperts(nn.Module):
    """JetMoE's router (``modeling_jetmoe.py:195``): the tokens each expert gets are counted,
    the counts become Python numbers, and the sorted batch is split by them."""

    def __init__(self, experts: int = 3):
        super().__init__()
        self.router = nn.Linear(4, experts)
        self.experts = nn.ModuleList(nn.Linear(4, 4) for _ in range(experts))

    def forward(self, x):
        choice = self.router(x).argmax(-1)
        counts = torch.bincount(choice, minlength=len(self.experts))
        sizes = counts.tolist()  # the sizes of the split follow the data
        order = choice.argsort(stable=True)
        pieces = x[order].split(sizes, 0)
        out = torch.cat([e(p) for e, p in zip(self.experts, pieces)])
        return torch.zeros_like(x).index_copy(0, order, out)


def _routed_otherwise(model: CountedExperts, x: torch.Tensor) -> torch.Tensor:
    """An input of ``x``'s shape whose tokens the router counts differently."""
    seen = torch.bincount(model.router(x).argmax(-1), minlength=3).tolist()
    for seed in range(100):
        y = torch.randn(x.shape, generator=torch.Generator().manual_seed(seed))
        if torch.bincount(model.router(y).argmax(-1), minlength=3).tolist() != seen:
            return y
    raise AssertionError("no input routed otherwise")


def test_a_split_by_counts_the_data_decides_is_guarded_at_its_line():
    torch.manual_seed(0)
    model = CountedExperts().eval()
    x = torch.randn(12, 4)
    with torch.no_grad():
        traced = tracebridge.trace(model, (x,))
        torch.testing.assert_close(traced(x), model(x))
        other = _routed_otherwise(model, x)
        with pytest.raises(GuardError) as err:
            traced(other)
    message = str(err.value)
    line = line_of(CountedExperts, "sizes = counts.tolist()")
    assert f"{__file__}:{line}" in message and "tolist()" in message
    assert "takes another path than the traced one" in message


class ShortCircuitCausal(nn.Module):
    """Moonshine's encoder under transformers' SDPA path (``sdpa_attention.py:159``):
    ``is_causal = q_length > 1 and mask is None and is_causal`` asks the truth of the
    comparison first, even where ``is_causal`` is False; the length comes out of strided
    convolutions."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv1d(1, 8, kernel_size=127, stride=64, bias=False)
        self.conv2 = nn.Conv1d(8, 8, kernel_size=7, stride=3)
        self.conv3 = nn.Conv1d(8, 8, kernel_size=3, stride=2)

    def forward(self, audio, mask=None, is_causal=False):
        h = self.conv3(self.conv2(self.conv1(audio.unsqueeze(1)))).transpose(1, 2)
        q = h.unsqueeze(1)
        q_length = q.shape[2]
        is_causal = q_length > 1 and mask is None and is_causal
        return nn.functional.scaled_dot_product_attention(q, q, q, is_causal=is_causal)


def test_a_size_comparison_that_cannot_change_its_and_chain_is_no_guard():
    # Python asks the comparison's truth before the other operands, but with is_causal
    # False the chain is False either way (trace/short_circuit.py): no guard, and a length
    # that convolves to one frame is served (it was refused at that line before the tenth
    # round; test_models_tenth_round.py keeps the guard where is_causal is True).
    torch.manual_seed(0)
    model = ShortCircuitCausal().eval()
    with torch.no_grad():
        traced = tracebridge.trace(model, (torch.randn(2, 1600),))
        for samples in (2000, 1200):  # 1200: 17, then 4, then 1 frame
            audio = torch.randn(3, samples)
            torch.testing.assert_close(traced(audio), model(audio))


def _methods(x):
    """Each method spelling of an op-set function that was refused before (the function
    spellings were recorded): its tensor first, the function's other arguments after."""
    counts = (x.abs() * 3).long().flatten()
    return (
        x.tile(2),  # DINOv3's rotary table (`angles.tile(2)`)
        x.tile(1, 2, 1),
        (x.abs() + 1.5).acosh(),
        x.asinh(),
        (x * 0.3).tanh().atanh(),
        x.angle(),
        x.abs().copysign(-x),
        (x * 8).long().bitwise_left_shift(2).bitwise_right_shift(1),
        x.prelu(torch.tensor([0.25])),
        counts.bincount(minlength=40)[:40],
        x.hsplit(2)[1],
        x.vsplit([1])[1],
        x.dsplit([1])[0],
        x.fliplr() + x.flipud(),
        x.ravel() * 2,
        x[0].diagonal_scatter(x[0].diagonal() * 0),
    )


def test_tensor_methods_of_op_set_functions_are_recorded_as_the_functions(tmp_path):
    example = torch.randn(4, 4, 3, generator=torch.Generator().manual_seed(1))
    traced = tracebridge.trace(_methods, (example,))
    recorded = set(ops_of(traced))
    assert {"tile", "acosh", "asinh", "atanh", "angle", "copysign", "prelu", "bincount"} <= recorded
    assert {"bitwise_left_shift", "bitwise_right_shift", "hsplit", "vsplit", "dsplit"} <= recorded
    assert {"fliplr", "flipud", "ravel", "diagonal_scatter"} <= recorded
    again = loaded(traced, tmp_path)
    for shape in [(4, 4, 3), (6, 4, 5)]:
        x = torch.randn(shape, generator=torch.Generator().manual_seed(2))
        torch.testing.assert_close(traced(x), _methods(x))
        torch.testing.assert_close(again(x), _methods(x))


def test_argwhere_as_a_method_is_recorded_and_its_length_guarded():
    x = torch.tensor([[1.0, -1.0], [2.0, 0.0]])
    traced = tracebridge.trace(lambda t: (t > 0).argwhere(), (x,))
    assert "argwhere" in ops_of(traced)
    torch.testing.assert_close(traced(x * 3), (x * 3 > 0).argwhere())


class NoiseOfItsOwn(nn.Module):
    """UnivNet's vocoder (``modeling_univnet.py:533``): without a noise input it draws one,
    passing on its own ``generator`` argument, None unless the caller gives one."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(3, 3)

    def forward(self, x, generator=None):
        noise = torch.randn(x.shape, generator=generator, dtype=x.dtype, device=x.device)
        return self.proj(x + noise)


def test_a_draw_given_generator_none_draws_from_the_global_generator(tmp_path):
    model = NoiseOfItsOwn().eval()
    with torch.no_grad():
        traced = tracebridge.trace(model, (torch.randn(2, 4, 3),))
        again = loaded(traced, tmp_path)
        for shape in [(2, 4, 3), (1, 7, 3)]:
            x = torch.randn(shape)
            torch.manual_seed(5)
            expected = model(x)
            for run in (traced, again):
                torch.manual_seed(5)
                torch.testing.assert_close(run(x), expected)


def test_a_draw_from_a_generator_object_is_refused_at_its_line():
    class WithGenerator(NoiseOfItsOwn):
        def forward(self, x):
            return super().forward(x, torch.Generator().manual_seed(0))

    with pytest.raises(UnsupportedOpError) as err:
        tracebridge.trace(WithGenerator().eval(), (torch.randn(2, 4, 3),))
    line = line_of(NoiseOfItsOwn, "noise = torch.randn(")
    assert f"{__file__}:{line}" in str(err.value) and "'generator'" in str(err.value)


@torch.compile(backend="eager", dynamic=True)
def _compiled_pool(x, scale):
    """torchvision's ``_roi_align`` under ``lazy_compile(dynamic=True)``: a library helper
    compiled by the library itself."""
    return (x * scale).relu().mean(-1)


class CallsCompiledHelper(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        return _compiled_pool(self.proj(x), 2.0)


def _stance() -> str:
    return torch._dynamo.eval_frame._stance.stance


def test_a_compiled_library_helper_is_recorded_as_its_python_code(tmp_path):
    model = CallsCompiledHelper().eval()
    with torch.no_grad():
        traced = tracebridge.trace(model, (torch.randn(2, 3, 4),))
        assert ops_of(traced)[-3:] == ["mul", "relu", "mean"]
        again = loaded(traced, tmp_path)
        for shape in [(2, 3, 4), (5, 7, 4)]:
            x = torch.randn(shape)
            torch.testing.assert_close(traced(x), model(x))
            torch.testing.assert_close(again(x), model(x))
    assert _stance() == "default"  # the compiler's stance is the user's again


def test_the_users_compiler_stance_is_put_back_after_a_trace_that_fails():
    def refused(x):
        return x.data_ptr()  # not an op: the trace is refused

    with torch.compiler.set_stance("eager_on_recompile"):
        with pytest.raises(Exception, match="data_ptr"):
            tracebridge.trace(refused, (torch.randn(2),))
        assert _stance() == "eager_on_recompile"
    assert _stance() == "default"
