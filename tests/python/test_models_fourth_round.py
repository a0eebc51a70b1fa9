"""Patterns from the fourth round of held-out models (benchmarks/heldout_models.py,
``_fourth_cases``), each reproduced without the model: what tracebridge refused or got
wrong where ``torch.jit.trace`` was right, fixed in the tracer or the checker generally.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tracebridge
from tracebridge.check.program import LIMITS

from .graph_helpers import loaded

# Every test here runs with warnings ignored (the fixture lives in conftest.py).
pytestmark = pytest.mark.usefixtures("quiet_warnings")


class Fuse(nn.Module):
    """HRNet's fuse layer: a low-resolution branch brought up to the high one by
    ``nn.Upsample(scale_factor=2 ** k)`` (timm/models/hrnet.py), here by 8 in 2-D and 4 in
    3-D."""

    def __init__(self):
        super().__init__()
        self.up2d = nn.Upsample(scale_factor=8, mode="nearest")
        self.up3d = nn.Upsample(scale_factor=4, mode="nearest")

    def forward(self, x, v):
        return self.up2d(x) + 1, self.up3d(v) * 2


@pytest.mark.parametrize("runtime", ["codegen", "interpreter"])
def test_an_upsampling_by_8_is_within_the_scale_limit(runtime, tmp_path):
    """Each scale argument counts once: upsample_nearest2d's third position is named
    ``scale_factors`` in one overload and ``scales_h`` in the other, and the checker counted
    [8.0, 8.0] under both names (4096, over the limit of 1024), refusing the file at save."""
    model = Fuse()
    x, v = torch.randn(2, 3, 4, 4), torch.randn(1, 2, 2, 3, 3)
    traced = tracebridge.trace(model, (x, v), runtime=runtime)
    again = loaded(traced, tmp_path, runtime=runtime)
    for shapes in [((2, 3, 4, 4), (1, 2, 2, 3, 3)), ((1, 3, 5, 6), (2, 1, 3, 2, 2))]:
        call = tuple(torch.randn(*s) for s in shapes)
        for got, want in zip(again(*call), model(*call)):
            assert torch.equal(got, want)


def test_scale_factors_past_the_limit_are_still_refused():
    """Counted once, a product past ``scale_product`` is still refused (64 x 64 = 4096)."""
    from .test_check_program import node_doc, refused

    doc = node_doc("upsample_nearest2d", [{"ref": 0}, None, [64.0, 64.0]])
    assert 64.0 * 64.0 > LIMITS["scale_product"] >= 8.0 * 8.0
    refused(doc, "scale factors that multiply to 4096")


class SampledPatches(nn.Module):
    """ViLT's visual embedding: every image's patches in an order drawn with
    ``torch.multinomial`` (without replacement: a random permutation), in evaluation too."""

    def forward(self, patches):
        b, n, d = patches.shape
        picked = [patches[i, torch.multinomial(torch.ones(n), n)] for i in range(b)]
        return torch.stack(picked) * 2


@pytest.mark.parametrize("runtime", ["codegen", "interpreter"])
def test_a_model_that_draws_in_evaluation_replays_eager_s_draws(runtime, tmp_path):
    """The random op is recorded, not its draw: from the same seed, the traced and the
    reloaded program draw what eager draws (benchmarks/zoo.py seeds every call alike)."""
    model = SampledPatches()
    x = torch.randn(2, 6, 3)
    traced = tracebridge.trace(model, x, runtime=runtime)
    assert "multinomial" in {n.op for n in traced.program.methods["forward"].nodes}
    again = loaded(traced, tmp_path, runtime=runtime)
    for seed, patches in ((1, x), (2, torch.randn(2, 9, 3))):
        torch.manual_seed(seed)
        want = model(patches)
        for fn in (traced, again):
            torch.manual_seed(seed)
            assert torch.equal(fn(patches), want)
    with pytest.raises(tracebridge.GuardError, match="unrolled|gives 2 results|range"):
        again(torch.randn(3, 6, 3))  # the loop over the batch was unrolled for 2 images


def test_a_limit_refused_at_save_says_what_to_do_about_a_limit(unchecked_programs, tmp_path):
    """The message at save named only the names rule's remedy (rename a module), also for a
    resource limit, where renaming does nothing."""
    model = nn.Upsample(scale_factor=64, mode="nearest")
    traced = tracebridge.trace(model, torch.randn(1, 1, 2, 2))
    with pytest.raises(tracebridge.ArtifactError) as refused:
        traced.save(tmp_path / "big.tb")
    text = str(refused.value)
    assert "scale factors that multiply to 4096" in text and "[rule: resource limits]" in text
    assert "for a limit (shared_ir/SPEC.md, section 3), change the traced code" in text


class RangeChecked(nn.Module):
    """transformers' ``torch_compilable_check`` while a tracer records (VITS's spline flow):
    a tensor condition goes to ``torch._check_tensor_all``, which reads
    ``cond._is_all_true().item()``, a private op outside the op set."""

    def forward(self, x):
        torch._check_tensor_all((x.min() >= -3) & (x.max() <= 3), lambda: "outside [-3, 3]")
        torch._check_tensor_all_with(ValueError, torch.all(x > -5))
        return x * 2 + (x < 100)._is_all_true()


@pytest.mark.parametrize("runtime", ["codegen", "interpreter"])
def test_a_tensor_check_is_a_guard_checked_on_every_call(runtime, tmp_path):
    model = RangeChecked()
    traced = tracebridge.trace(model, torch.rand(4), runtime=runtime)
    ops = [n.op for n in traced.program.methods["forward"].nodes]
    assert ops.count("prim.guard") == 2 and "all" in ops and "prim.dtype" not in ops
    again = loaded(traced, tmp_path, runtime=runtime)
    x = torch.rand(7) * 2
    assert torch.equal(again(x), model(x))
    with pytest.raises(tracebridge.GuardError, match="outside \\[-3, 3\\]"):
        again(torch.full((3,), 4.0))  # eager raises too: RuntimeError("outside [-3, 3]")
    with pytest.raises(RuntimeError, match="outside"):
        model(torch.full((3,), 4.0))


def test_a_tensor_check_that_fails_on_the_example_raises_as_eager_does():
    with pytest.raises(ValueError, match="Expected cond to be True"):
        tracebridge.trace(lambda x: torch._check_tensor_all_with(ValueError, x > 0), -torch.ones(2))
    with pytest.raises(TypeError, match="dtype torch.bool"):  # PyTorch's own refusal
        tracebridge.trace(lambda x: torch._check_tensor_all(x), torch.ones(2))


class SineEmbedding(nn.Module):
    """DAB-DETR's sine position embedding halves its frequency indices in place
    (``dim_tx //= 2``, modeling_dab_detr.py): ``//=`` on a tensor runs ``floor_divide_``."""

    def forward(self, x):
        dim = torch.arange(x.shape[-1], dtype=torch.float32)
        dim //= 2
        dim.mul_(2 / x.shape[-1])
        return x / 20**dim


@pytest.mark.parametrize("runtime", ["codegen", "interpreter"])
def test_floor_division_in_place_is_recorded(runtime, tmp_path):
    model = SineEmbedding()
    traced = tracebridge.trace(model, torch.rand(2, 8), runtime=runtime)
    assert "Tensor.floor_divide_" in {n.op for n in traced.program.methods["forward"].nodes}
    again = loaded(traced, tmp_path, runtime=runtime)
    for shape in ((2, 8), (3, 6), (1, 1)):
        x = torch.rand(*shape)
        assert torch.equal(again(x), model(x))


class UndoSort(nn.Module):
    """Reformer's bucket sort and its inverse: the inverse permutation is made with the
    legacy constructor ``x.new(*x.size())`` and filled by ``scatter_``."""

    def forward(self, x):
        order = x.argsort(-1)
        undo = order.new(*order.size())
        undo.scatter_(-1, order, torch.arange(order.shape[-1]).expand(order.shape))
        return x.gather(-1, order).gather(-1, undo)


@pytest.mark.parametrize("runtime", ["codegen", "interpreter"])
def test_the_legacy_constructor_with_sizes_is_new_empty(runtime, tmp_path):
    model = UndoSort()
    traced = tracebridge.trace(model, torch.randn(2, 5), runtime=runtime)
    assert "Tensor.new_empty" in {n.op for n in traced.program.methods["forward"].nodes}
    again = loaded(traced, tmp_path, runtime=runtime)
    for shape in ((2, 5), (3, 7)):
        x = torch.randn(*shape)
        assert torch.equal(again(x), model(x)) and torch.equal(again(x), x)


def test_the_legacy_constructor_from_data_is_refused_naming_the_line():
    with pytest.raises(tracebridge.UnsupportedOpError, match="legacy constructor Tensor.new"):
        tracebridge.trace(lambda x: x + x.new([1.0, 2.0]), torch.ones(2))


class PaddedTable(nn.Module):
    """VITS's relative-position attention: the embedding table is padded by
    ``max(length - 5, 0)`` only ``if`` that is positive, then a window is cut from it
    (modeling_vits.py ``_get_relative_embeddings``)."""

    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn(1, 9, 4))

    def forward(self, x):
        length = x.shape[1]
        pad = max(length - 5, 0)
        table = self.table
        if pad > 0:
            table = nn.functional.pad(table, [0, 0, pad, pad, 0, 0])
        start = max(5 - length, 0)
        window = table[:, start : start + 2 * length - 1]
        return x @ window[0, :length].T


@pytest.mark.parametrize("runtime", ["codegen", "interpreter"])
def test_a_size_threshold_below_the_example_gets_its_own_graph(runtime, tmp_path):
    """Traced at length 8, the branches of ``length - 5`` and ``5 - length`` flip at 5
    and at 4: the code is traced again there, and every length down to 1 is served."""
    from tracebridge.check.specialise import threshold_cuts

    model = PaddedTable()
    traced = tracebridge.trace(model, torch.randn(2, 8, 4), runtime=runtime)
    assert threshold_cuts(traced.program.methods["forward"], 8) == [5, 4]
    again = loaded(traced, tmp_path, runtime=runtime)
    for length in (8, 12, 6, 5, 4, 3, 2, 1):
        x = torch.randn(3, length, 4)
        assert torch.equal(again(x), model(x)), length
