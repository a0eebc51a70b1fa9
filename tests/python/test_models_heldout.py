"""Patterns that the held-out sweep (benchmarks/heldout.py) found in published models the
zoo does not hold, reproduced by small stand-in modules (no timm or transformers needed).
Each test asserts results: the trace agrees with eager on calls it was not made with, or it
refuses with an error that names the line and the reason.
"""

from __future__ import annotations

import math
import os
import sys
import types
import warnings

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.errors import UnsupportedOpError

from .graph_helpers import line_of

HERE = os.path.basename(__file__)


# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


# --- a traced size where PyTorch takes only a tensor --------------------------------------


def _torch_int(x):
    """transformers' ``torch_int``: a tensor under torch.jit.trace, else a Python int."""
    if torch.jit.is_tracing() and isinstance(x, torch.Tensor):
        return x.to(torch.int64)
    return int(x)


class JitSizesAsTensors(nn.Module):
    """transformers' MobileViT unfolding (``modeling_mobilevit.py:395``): behind
    ``torch.jit.is_tracing()`` it calls ``torch.ceil`` on a size, as torch.jit.trace
    presents sizes (0-dim tensors), then uses the 0-dim tensors as sizes."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        x = self.conv(x)
        b, c, h, w = x.shape
        new_h = (
            _torch_int(torch.ceil(h / 2) * 2) if torch.jit.is_tracing() else math.ceil(h / 2) * 2
        )
        new_w = (
            _torch_int(torch.ceil(w / 2) * 2) if torch.jit.is_tracing() else math.ceil(w / 2) * 2
        )
        if new_h != h or new_w != w:
            x = nn.functional.interpolate(x, size=(new_h, new_w), mode="bilinear")
        patches = x.reshape(b * c * (new_h // 2), 2, new_w // 2, 2).transpose(1, 2)
        return patches.reshape(b, c, (new_h // 2) * (new_w // 2), 4).sum(-1)


def test_a_size_given_where_a_tensor_is_taken_is_a_0dim_tensor_and_stays_general(tmp_path):
    module = JitSizesAsTensors().eval()
    traced = tracebridge.trace(module, (torch.randn(2, 3, 8, 8),))
    graph = str(traced.graph)
    assert "scalar_tensor" in graph and "ceil(" in graph  # recorded, as jit does
    traced.save(tmp_path / "m.tb")
    runs = [traced] + [
        tracebridge.load(tmp_path / "m.tb", runtime=rt) for rt in ("codegen", "interpreter")
    ]
    for shape in [(1, 3, 8, 8), (3, 3, 12, 6), (2, 3, 4, 20)]:  # every even size
        x = torch.randn(shape)
        for fn in runs:
            assert torch.allclose(fn(x), module(x), atol=1e-6)
    # An odd size takes the other branch: GuardError naming the line, as jit fails too.
    with pytest.raises(tracebridge.GuardError) as info:
        traced(torch.randn(2, 3, 7, 8))
    assert f"{HERE}:{line_of(JitSizesAsTensors, 'if new_h != h')}" in str(info.value)
    # Traced on that branch, the interpolation's size is the 0-dim tensors: general too.
    odd = tracebridge.trace(module, (torch.randn(2, 3, 7, 9),))
    for shape in [(1, 3, 5, 11), (2, 3, 9, 9)]:
        x = torch.randn(shape)
        assert torch.allclose(odd(x), module(x), atol=1e-6)


class StackedSizes(nn.Module):
    """Code written for torch.jit.trace (torchvision's style): ``torch.stack`` of sizes."""

    def forward(self, x):
        h, w = x.shape[2] / 1, x.shape[3] / 1  # traced floats
        hw = torch.stack([h, w]) if torch.jit.is_tracing() else torch.tensor([h, w])
        return x.flatten(2).sum(-1) / hw.prod().to(x.dtype)


def test_traced_floats_in_a_tensor_list_are_0dim_tensors_too():
    traced = tracebridge.trace(StackedSizes(), (torch.randn(2, 3, 4, 5),))
    for shape in [(1, 2, 3, 3), (2, 3, 6, 2)]:
        x = torch.randn(shape)
        assert torch.allclose(traced(x), x.flatten(2).sum(-1) / (shape[2] * shape[3]))


class FloatOfSizeWithIntegers(nn.Module):
    """A traced float taken as a tensor, then met with an integer tensor and stacked."""

    def forward(self, x):
        n = x.shape[1]
        pos = torch.arange(n)
        if torch.jit.is_tracing():
            scale, hw = torch.sqrt(n / 2), torch.stack([n / 1, n / 2])
        else:
            scale, hw = math.sqrt(n / 2), torch.tensor([n / 1, n / 2])
        return pos * scale, hw


def test_a_traced_float_taken_as_a_tensor_has_the_default_dtype():
    # as a Python float acts in the eager branch, and as torch.jit.trace's 0-dim sizes
    # give it: a float64 0-dim tensor made arange(n) * scale float64 (refused by the check)
    module = FloatOfSizeWithIntegers()
    traced = tracebridge.trace(module, (torch.randn(2, 5),))
    for shape in [(1, 3), (2, 8)]:
        x = torch.randn(shape)
        got, expected = traced(x), module(x)
        assert [t.dtype for t in got] == [t.dtype for t in expected] == [torch.float32] * 2
        for a, b in zip(got, expected):
            torch.testing.assert_close(a, b)
    assert "float64" not in traced.graph


class IntSizeAsTensor(nn.Module):
    def forward(self, x):
        n = x.shape[0]
        scale = torch.sqrt(n) if torch.jit.is_tracing() else math.sqrt(n)
        return x / scale


def test_a_traced_int_where_a_tensor_is_taken_is_refused_naming_the_line():
    """An int is left to PyTorch's parser (it may start a list of sizes): refused, naming
    the line and what to do."""
    x = torch.randn(4, 3)
    with pytest.raises(UnsupportedOpError) as info:
        tracebridge.trace(IntSizeAsTensor(), (x,))
    message = str(info.value)
    assert f"{HERE}:{line_of(IntSizeAsTensor, 'torch.sqrt(n)')}" in message
    assert "SymInt" in message and "must be Tensor" in message
    assert "torch.jit.is_tracing()" in message and "torch.tensor(h)" in message


def test_torch_jit_is_tracing_answers_library_code_not_pytorch():
    """True to code outside PyTorch (its paths for tracers are general), False inside
    PyTorch, whose own modules would start TorchScript's tracer (trace/library.py)."""
    seen = []

    def fn(x):
        seen.append(torch.jit.is_tracing())
        seen.append(torch._C._is_tracing())
        return x + 1

    traced = tracebridge.trace(fn, (torch.randn(2),), check_trace=False)
    assert seen == [True, True] and not torch.jit.is_tracing()
    seen.clear()
    fn(torch.randn(2))  # eager, outside a trace
    assert seen == [False, False]
    assert torch.equal(traced(torch.ones(3)), torch.full((3,), 2.0))


class PlainTypeError(nn.Module):
    def forward(self, x):
        return torch.ceil(2.5) + x  # the user's own mistake, eager raises it too


def test_a_type_error_not_about_traced_numbers_stays_as_eager_raises_it():
    x = torch.randn(2, 3)
    with pytest.raises(TypeError) as info:
        tracebridge.trace(PlainTypeError(), (x,))
    assert not isinstance(info.value, UnsupportedOpError)
    assert "must be Tensor, not float" in str(info.value)


# --- torch.compiler.is_exporting(): timm's shape-general path -------------------------------

# timm asks through ``timm.layers.is_exporting`` (timm/layers/helpers.py); the stand-in is
# compiled under such a file name, which is what the tracer looks at.
_TIMM_HELPER = os.path.join(os.sep, "site-packages", "timm", "layers", "helpers.py")
_namespace: dict = {"torch": torch}
exec(
    compile(
        "def is_exporting():\n    return torch.compiler.is_exporting()\n", _TIMM_HELPER, "exec"
    ),
    _namespace,
)
timm_is_exporting = _namespace["is_exporting"]


class ResampledPositions(nn.Module):
    """timm's ``resample_abs_pos_embed`` (ViTs built with ``dynamic_img_size=True``): the
    position table is interpolated to the patch grid, except when the patch count is the
    table's -- a shortcut that timm skips under torch.export, whose paths must give the
    same result."""

    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, 8, 8, stride=8)
        self.pos = nn.Parameter(torch.randn(1, 16, 8))  # a 4x4 grid: 32x32 images

    def forward(self, x):
        x = self.patch(x)
        _, _, h, w = x.shape
        x = x.flatten(2).transpose(1, 2)
        pos = self.pos
        if not timm_is_exporting() and h * w == pos.shape[1]:
            return x + pos
        grid = pos.reshape(1, 4, 4, 8).permute(0, 3, 1, 2)
        grid = torch.nn.functional.interpolate(grid, size=(h, w), mode="bicubic")
        return x + grid.permute(0, 2, 3, 1).reshape(1, h * w, 8)


def test_is_exporting_is_true_to_timm_so_a_position_table_is_resampled_at_every_size(tmp_path):
    model = ResampledPositions().eval()
    traced = tracebridge.trace(model, (torch.randn(2, 3, 32, 32),))
    path = tmp_path / "m.tb"
    traced.save(path)
    loaded = tracebridge.load(path)
    for shape in [(1, 3, 32, 32), (3, 3, 48, 48), (2, 3, 32, 64)]:
        x = torch.randn(shape)
        want = model(x)
        for fn in (traced, loaded):
            got = fn(x)
            assert got.shape == want.shape
            assert torch.allclose(got, want, atol=1e-5), shape
    assert not timm_is_exporting()  # only while tracing


class AsksBoth(nn.Module):
    """Other code (transformers builds an explicit mask when exporting) keeps the real
    answer while tracing; timm's helper gets True."""

    def forward(self, x):
        assert timm_is_exporting()
        return x + 1 if torch.compiler.is_exporting() else x - 1


def test_is_exporting_keeps_its_answer_for_other_code():
    x = torch.zeros(2)
    traced = tracebridge.trace(AsksBoth(), (x,), check_trace=False)
    assert torch.equal(traced(x), x - 1)
    with pytest.raises(AssertionError):
        AsksBoth()(x)  # eager: timm's helper says False outside tracing


# --- bool() of a size: a guard that it is not zero, not on its value -----------------------


class EmptyCheck(nn.Module):
    """transformers' LongT5 ``_pad_to_multiple``: ``if not all(x.shape)`` handles an empty
    input apart; every other size takes the same path."""

    def forward(self, x):
        pad = -x.shape[1] % 4
        if not all(x.shape):
            return torch.zeros(x.shape[0], x.shape[1] + pad)
        return torch.nn.functional.pad(x, (0, pad)).reshape(x.shape[0], -1, 4).sum(-1)


def test_bool_of_a_size_guards_only_that_it_is_not_zero(tmp_path):
    model = EmptyCheck()
    traced = tracebridge.trace(model, (torch.randn(2, 8),))
    path = tmp_path / "m.tb"
    traced.save(path)
    loaded = tracebridge.load(path)
    for shape in [(3, 8), (1, 5), (4, 13)]:
        x = torch.randn(shape)
        for fn in (traced, loaded):
            assert torch.allclose(fn(x), model(x)), shape
    guards = [
        node.kwargs["what"]
        for node in traced.program.methods["forward"].nodes
        if node.op == "prim.guard"
    ]
    assert guards and all("!= 0" in what for what in guards), guards
    # An empty input takes the other path: refused, naming the line.
    with pytest.raises(
        tracebridge.GuardError, match=f"{HERE}:{line_of(EmptyCheck, 'if not all(x.shape):')}"
    ):
        traced(torch.randn(0, 8))


# --- complex conjugation: recorded as the public ops it computes ----------------------------


class AutoCorrelation(nn.Module):
    """transformers' Autoformer: correlation of queries and keys through the FFT."""

    def forward(self, q, k):
        n = q.shape[1]
        product = torch.fft.rfft(q, n=n, dim=1) * torch.conj(torch.fft.rfft(k, n=n, dim=1))
        spectrum = product.conj().resolve_conj().conj_physical()  # conj twice, then once more
        return torch.fft.irfft(spectrum, n=n, dim=1) + torch.conj(q)  # conj of a real: itself


def test_conj_is_recorded_as_public_ops_and_right_at_other_lengths(tmp_path):
    model = AutoCorrelation()
    traced = tracebridge.trace(model, (torch.randn(2, 12, 4), torch.randn(2, 12, 4)))
    ops = {node.op for node in traced.program.methods["forward"].nodes}
    assert {"complex", "Tensor.real", "Tensor.imag"} <= ops
    assert not any("conj" in op or "resolve" in op for op in ops), ops
    path = tmp_path / "m.tb"
    traced.save(path)
    loaded = tracebridge.load(path)
    for shape in [(1, 12, 4), (3, 7, 4), (2, 20, 4)]:
        q, k = torch.randn(shape), torch.randn(shape)
        want = model(q, k)
        for fn in (traced, loaded):
            assert torch.allclose(fn(q, k), want, atol=1e-5), shape


# --- transformers' torch_int / torch_float: traced numbers stay traced ---------------------

_GENERIC = """
_is_torch_available = True


def torch_int(x):
    if not _is_torch_available:
        return int(x)
    import torch

    return x.to(torch.int64) if torch.jit.is_tracing() and isinstance(x, torch.Tensor) else int(x)


def torch_float(x):
    if not _is_torch_available:
        return float(x)
    import torch

    traced = torch.jit.is_tracing() and isinstance(x, torch.Tensor)
    return x.to(torch.float32) if traced else float(x)
"""


@pytest.fixture
def generic(monkeypatch):
    """A stand-in for ``transformers.utils.generic`` (the helpers' own code)."""
    module = types.ModuleType("transformers.utils.generic")
    exec(_GENERIC, module.__dict__)
    monkeypatch.setitem(sys.modules, "transformers.utils.generic", module)
    return module


def test_torch_int_of_a_size_stays_general(generic, tmp_path):
    torch_int, torch_float = generic.torch_int, generic.torch_float  # as models import them
    own_code = torch_int.__code__

    class GridFromTokens(nn.Module):
        """transformers' DPT: the patch grid is the square root of the token count."""

        def forward(self, x):
            batch, tokens, channels = x.shape
            side = torch_int(tokens**0.5)
            grid = x.reshape(batch, side, side, channels).permute(0, 3, 1, 2)
            return grid.mean((2, 3)) * torch_float(torch_int(tokens)) / torch_float(side)

    model = GridFromTokens()
    traced = tracebridge.trace(model, (torch.randn(2, 16, 3),))
    path = tmp_path / "m.tb"
    traced.save(path)
    loaded = tracebridge.load(path)
    for shape in [(3, 16, 3), (1, 36, 3), (2, 9, 3)]:
        x = torch.randn(shape)
        for fn in (traced, loaded):
            assert torch.allclose(fn(x), model(x)), shape
    # After the trace the library's own code runs again.
    assert torch_int.__code__ is own_code
    assert torch_int(2.7) == 2 and type(torch_int(2.7)) is int


# --- nn.Module.to() in traced code --------------------------------------------------------


class Router(nn.Module):
    """Switch Transformers' router converts its classifier on every call."""

    def __init__(self, dtype=torch.float32):
        super().__init__()
        self.classifier = nn.Linear(4, 3)
        self.dtype = dtype

    def forward(self, x):
        self.classifier = self.classifier.to(self.dtype)
        return self.classifier(x.to(self.dtype)).softmax(-1)


def test_module_to_that_changes_nothing_is_nothing(tmp_path):
    model = Router()
    traced = tracebridge.trace(model, (torch.randn(2, 5, 4),))
    path = tmp_path / "m.tb"
    traced.save(path)
    loaded = tracebridge.load(path)
    for shape in [(1, 5, 4), (3, 2, 4)]:
        x = torch.randn(shape)
        for fn in (traced, loaded):
            assert torch.allclose(fn(x), model(x)), shape
    assert model.classifier.weight.dtype == torch.float32


def test_module_to_that_would_convert_is_refused_naming_the_line():
    model = Router(dtype=torch.float64)
    with pytest.raises(UnsupportedOpError) as info:
        tracebridge.trace(model, (torch.randn(2, 5, 4),))
    message = str(info.value)
    assert f"{HERE}:{line_of(Router, 'self.classifier.to(self.dtype)')}" in message
    assert "Linear.to(...)" in message and "convert the model before tracing" in message
    assert model.classifier.weight.dtype == torch.float32  # the model is left as it was
    model.to(torch.float64)  # converted first: the call in forward changes nothing
    x = torch.randn(2, 5, 4)
    assert torch.allclose(tracebridge.trace(model, (x,))(x), model(x))


# --- a loop over range() of traced bounds: the number of steps is guarded -------------------


class WholeChunks(nn.Module):
    """transformers' EnCodec: ``for offset in range(0, length, stride)`` with the stride the
    whole length when no chunking is configured -- one step for every length."""

    def forward(self, x):
        length = x.shape[-1]
        frames = [x[..., offset : offset + length].mean(-1) for offset in range(0, length, length)]
        return torch.stack(frames, -1)


class Blocks(nn.Module):
    def forward(self, x):
        blocks = [x[:, i : i + 4].sum(1) for i in range(0, x.shape[1], 4)]
        return torch.stack(blocks, 1)


def test_a_loop_over_a_traced_range_guards_its_number_of_steps(tmp_path):
    chunks = tracebridge.trace(WholeChunks(), (torch.randn(2, 320),))
    for shape in [(1, 480), (3, 7)]:
        x = torch.randn(shape)
        assert torch.allclose(chunks(x), WholeChunks()(x)), shape
    blocks = tracebridge.trace(Blocks(), (torch.randn(2, 10),))
    path = tmp_path / "m.tb"
    blocks.save(path)
    loaded = tracebridge.load(path)
    for shape in [(2, 12), (1, 9), (3, 10)]:  # three blocks of 4 (the last one short)
        x = torch.randn(shape)
        for fn in (blocks, loaded):
            assert torch.allclose(fn(x), Blocks()(x)), shape
    line = line_of(Blocks, "for i in range(0, x.shape[1], 4)")
    with pytest.raises(
        tracebridge.GuardError, match=f"loop.*== 3, but now it is 4(.|\\n)*{HERE}:{line}"
    ):
        loaded(torch.randn(1, 13))  # four blocks: another unrolled loop


# --- a 0-dim tensor formatted into text that picks a module --------------------------------


class Experts(nn.Module):
    """Switch Transformers' experts: each expert hit runs, picked by its index formatted
    into a key (``self[f"expert_{expert_idx[0]}"]``)."""

    def __init__(self):
        super().__init__()
        self.experts = nn.ModuleDict({f"expert_{i}": nn.Linear(4, 4) for i in range(4)})

    def forward(self, x, choice):
        out = torch.zeros_like(x)
        for expert_idx in torch.unique(choice).reshape(-1, 1):
            rows = (choice == expert_idx[0]).float()[:, None]
            out = out + rows * self.experts[f"expert_{expert_idx[0]}"](x)
        return out


def test_a_tensor_formatted_into_a_key_is_guarded_not_baked():
    model = Experts()
    x = torch.randn(3, 4)
    traced = tracebridge.trace(model, (x, torch.tensor([0, 2, 2])))
    same = torch.tensor([2, 0, 0])  # the same experts: right
    assert torch.allclose(traced(x, same), model(x, same))
    other = torch.tensor([1, 3, 3])  # as many experts, other ones: refused, never wrong
    line = line_of(Experts, 'self.experts[f"expert_{expert_idx[0]}"]')
    with pytest.raises(tracebridge.GuardError, match=f"{HERE}:{line}"):
        traced(x, other)


class FormatsForAMessage(nn.Module):
    def forward(self, x):
        n = x.sum().long()
        warnings.warn(f"the rows add up to {n}", stacklevel=2)  # a message: no guard
        return x * 2


def test_a_tensor_formatted_only_into_a_message_guards_nothing():
    traced = tracebridge.trace(FormatsForAMessage(), (torch.ones(2, 3),))
    guards = [node for node in traced.program.methods["forward"].nodes if node.op == "prim.guard"]
    assert not [g for g in guards if "item()" in g.kwargs["what"]], guards
    x = torch.randn(4, 3)  # another sum
    assert torch.equal(traced(x), x * 2)


def test_a_traced_range_with_a_zero_step_fails_as_range_does():
    class ZeroStep(nn.Module):
        def forward(self, x):
            return torch.stack([x[:, i] for i in range(0, x.shape[1], 0)], 1)

    with pytest.raises(ValueError, match="must not be zero"):
        tracebridge.trace(ZeroStep(), (torch.randn(2, 3),))


_KEPT: list = []


def _keeps_a_float(x):
    _KEPT.append(x.shape[-1] / 2)  # a traced float kept past the trace
    return x * 2


def test_a_traced_float_kept_past_its_trace_acts_as_a_plain_float():
    _KEPT.clear()
    tracebridge.trace(_keeps_a_float, (torch.randn(2, 4),), check_trace=False)
    kept = _KEPT[0]
    assert type(kept).__name__ == "SymFloat"
    assert torch.equal(torch.ones(2) * kept, torch.full((2,), 2.0))  # a number where one is
    with pytest.raises(TypeError, match="must be Tensor, not float.*a traced number"):
        torch.ceil(kept)  # eager's refusal of a number, naming what it was
