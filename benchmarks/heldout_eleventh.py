"""The held-out sweep's eleventh round: architectures neither the zoo nor the earlier rounds
hold, chosen for code paths not yet exercised: timm families no round tried (CSPNeXt,
EfficientFormer, EfficientViM, LCNetV2, LowFormer, MViTv2, legacy SE-ResNet and Xception,
hybrid ResNet-ViTs, Inception-ResNet), transformers model types no round tried (decoders
with their own routing, attention or MLP, encoders, vision backbones, grouping and 2D-rotary
vision towers), torchvision models not held, and hand-written modules in the patterns real
code uses around sizes and state: sizes formatted into asserts and log records (f-strings,
``str``, ``%``, ``format``), strings built from sizes that pick a branch, ``functools``
caches on sizes, ``torch.compiler.disable``d helpers, ``torch.jit.is_tracing`` branches,
``torch._assert``, NamedTuple and dict outputs, dict and ``*args/**kwargs`` forwards,
in-place ops on views, masks and ranges from sizes, growing non-persistent buffers, RNG under
``torch.random.fork_rng``, ``torch.autocast`` regions, ``torch.no_grad`` inside forward,
state read back through ``modules()``, weight tying, ``math``/``numpy`` on sizes,
``torch.autograd.grad`` in forward. Random weights, tiny configurations, offline.
``heldout_models.all_cases`` adds them to the list.
"""

from __future__ import annotations

import functools
import io
import logging
import math
from typing import NamedTuple

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from heldout_tenth import (
    CLS,
    DEC,
    ENC_KIND,
    HAND,
    HF_,
    PATTERN,
    S2S,
    TIMM,
    TV,
    _dec,
    _quantizable,
)
from zoo_models import (
    ENC,
    HF,
    IMG,
    IMG32,
    SMALL_BERT,
    SMALL_DECODER,
    VOCAB,
    Case,
    _gen,
    _hf,
    _hf_image,
    _timm,
    _tv,
    images,
    seq2seq,
    text,
)

MOE = dict(num_experts_per_tok=2)


# --- transformers: decoders ---------------------------------------------------------------------


def _decoders() -> list[Case]:
    return [
        _dec("arcee (relu squared mlp)", "ArceeConfig", "ArceeForCausalLM", pad_token_id=1),
        _dec("seed_oss", "SeedOssConfig", "SeedOssForCausalLM", head_dim=8, pad_token_id=1),
        _dec("ernie4_5", "Ernie4_5Config", "Ernie4_5ForCausalLM", head_dim=8, pad_token_id=1),
        _dec("glm (partial rotary)", "GlmConfig", "GlmForCausalLM", head_dim=8, pad_token_id=1),
        _dec(
            "hunyuan_v1_dense (qk norm)",
            "HunYuanDenseV1Config",
            "HunYuanDenseV1ForCausalLM",
            head_dim=8,
            pad_token_id=1,
        ),
        _dec(
            "deepseek_v2 (latent attention, MoE)",
            "DeepseekV2Config",
            "DeepseekV2ForCausalLM",
            q_lora_rank=16,
            kv_lora_rank=16,
            qk_rope_head_dim=4,
            qk_nope_head_dim=8,
            v_head_dim=8,
            n_routed_experts=4,
            n_shared_experts=1,
            moe_intermediate_size=16,
            first_k_dense_replace=1,
            num_key_value_heads=4,
            pad_token_id=1,
            **MOE,
        ),
        _dec(
            "glm4_moe (sigmoid routing, shared expert)",
            "Glm4MoeConfig",
            "Glm4MoeForCausalLM",
            head_dim=8,
            n_routed_experts=4,
            n_shared_experts=1,
            moe_intermediate_size=16,
            first_k_dense_replace=1,
            n_group=1,
            topk_group=1,
            pad_token_id=1,
            **MOE,
        ),
        _dec(
            "lfm2_moe (short convolutions, MoE)",
            "Lfm2MoeConfig",
            "Lfm2MoeForCausalLM",
            num_experts=4,
            moe_intermediate_size=16,
            num_dense_layers=1,
            layer_types=["conv", "full_attention"],
            pad_token_id=1,
            **MOE,
        ),
        _dec(
            "flex_olmo (MoE)",
            "FlexOlmoConfig",
            "FlexOlmoForCausalLM",
            num_experts=4,
            pad_token_id=1,
            **MOE,
        ),
        _dec(
            "dots1 (MoE, shared experts)",
            "Dots1Config",
            "Dots1ForCausalLM",
            head_dim=8,
            n_routed_experts=4,
            n_shared_experts=1,
            moe_intermediate_size=16,
            first_k_dense_replace=1,
            n_group=1,
            topk_group=1,
            pad_token_id=1,
            **MOE,
        ),
        _dec(
            "minimax (lightning attention)",
            "MiniMaxConfig",
            "MiniMaxForCausalLM",
            head_dim=8,
            num_local_experts=2,
            block_size=4,
            layer_types=["linear_attention", "full_attention"],
            pad_token_id=1,
            **MOE,
        ),
        _dec("nanochat (relu squared, qk norm)", "NanoChatConfig", "NanoChatForCausalLM"),
        _dec(
            "falcon_mamba (selective scan)",
            "FalconMambaConfig",
            "FalconMambaForCausalLM",
            state_size=8,
            expand=2,
            conv_kernel=4,
            use_mambapy=False,
            pad_token_id=1,
        ),
        Case(
            "openai-gpt (learned positions, no cache)",
            DEC,
            HF_,
            _hf(
                "OpenAIGPTConfig",
                "OpenAIGPTLMHeadModel",
                ENC,
                vocab_size=VOCAB,
                n_positions=64,
                n_embd=32,
                n_layer=2,
                n_head=2,
            ),
            text(),
        ),
    ]


def _encoders() -> list[Case]:
    def enc(name, config, model, kwargs=SMALL_BERT, **extra):
        return Case(name, ENC_KIND, HF_, _hf(config, model, ENC, **(kwargs | extra)), text())

    return [
        Case(
            "flaubert (xlm, layerdrop off)",
            ENC_KIND,
            HF_,
            _hf(
                "FlaubertConfig",
                "FlaubertModel",
                ENC,
                vocab_size=VOCAB,
                emb_dim=32,
                n_layers=2,
                n_heads=2,
                max_position_embeddings=64,
            ),
            text(),
        ),
        enc("camembert", "CamembertConfig", "CamembertModel", pad_token_id=1),
        Case(
            "t5gemma (encoder-decoder, gemma blocks)",
            S2S,
            HF_,
            _t5gemma(),
            seq2seq(),
        ),
    ]


def _t5gemma():
    def build():
        import transformers

        small = dict(SMALL_DECODER) | dict(head_dim=8, pad_token_id=1)
        cfg = transformers.T5GemmaConfig(
            encoder=transformers.T5GemmaModuleConfig(**small),
            decoder=transformers.T5GemmaModuleConfig(**small),
            vocab_size=VOCAB,
        )
        return HF(
            transformers.T5GemmaModel(cfg),
            ("input_ids", "attention_mask", "decoder_input_ids"),
            use_cache=False,
        )

    return build


# --- transformers: vision -----------------------------------------------------------------------


def _hf_vision() -> list[Case]:
    small_stages = dict(hidden_sizes=[16, 32], depths=[1, 1], num_labels=10)
    return [
        Case(
            "hf convnext",
            CLS,
            HF_,
            _hf_image(
                "ConvNextConfig", "ConvNextForImageClassification", num_stages=2, **small_stages
            ),
            IMG,
        ),
        Case(
            "cvt (convolutional projections)",
            CLS,
            HF_,
            _hf_image(
                "CvtConfig",
                "CvtForImageClassification",
                num_labels=10,
                patch_sizes=[7, 3, 3],
                patch_stride=[4, 2, 2],
                patch_padding=[2, 1, 1],
                embed_dim=[16, 16, 32],
                num_heads=[1, 1, 2],
                depth=[1, 2, 3],
                mlp_ratio=[2.0, 2.0, 2.0],
                drop_path_rate=[0.0, 0.0, 0.0],
            ),
            IMG,
        ),
        Case(
            "hf swin (padded windows)",
            CLS,
            HF_,
            _hf_image(
                "SwinConfig",
                "SwinForImageClassification",
                image_size=64,
                patch_size=4,
                embed_dim=16,
                depths=[1, 1],
                num_heads=[1, 2],
                window_size=4,
                num_labels=10,
            ),
            images((2, 64), (1, 64), (3, 48), (2, 72)),
        ),
        Case(
            "groupvit vision (hard grouping)",
            CLS,
            HF_,
            _hf_image(
                "GroupViTVisionConfig",
                "GroupViTVisionModel",
                hidden_size=32,
                intermediate_size=64,
                depths=[1, 1],
                num_group_tokens=[8, 4],
                num_output_groups=[8, 4],
                num_attention_heads=2,
                image_size=32,
                patch_size=8,
            ),
            images((2, 32), (1, 32), (3, 32)),
        ),
        Case(
            "swiftformer (efficient additive attention)",
            CLS,
            HF_,
            _hf_image(
                "SwiftFormerConfig",
                "SwiftFormerForImageClassification",
                depths=[1, 1, 1, 1],
                embed_dims=[8, 16, 24, 32],
                num_labels=10,
            ),
            IMG,
        ),
        Case(
            "hf hgnet_v2 (learnable affine blocks)",
            CLS,
            HF_,
            _hf_image("HGNetV2Config", "HGNetV2ForImageClassification", num_labels=10),
            IMG,
        ),
        Case(
            "pixtral vision (2d rotary, block mask)",
            "vision/encoder",
            HF_,
            _pixtral(),
            images((1, 32), (1, 48), (1, 16)),
        ),
    ]


class PixtralImages(nn.Module):
    """Pixtral's vision tower: images with their sizes, patch tokens of every image in one
    sequence, a block-diagonal mask between images, 2D rotary positions."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, pixels):
        sizes = torch.tensor([list(pixels.shape[-2:])] * pixels.shape[0])
        return self.model(pixels, image_sizes=sizes, return_dict=False)[0]


def _pixtral():
    def build():
        import transformers

        cfg = transformers.PixtralVisionConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            head_dim=16,
            image_size=64,
            patch_size=8,
        )
        return PixtralImages(transformers.PixtralVisionModel(cfg))

    return build


# --- timm ---------------------------------------------------------------------------------------


def _timm_eleventh() -> list[Case]:
    def tm(name, model, inputs=IMG, **kwargs):
        return Case(name, CLS, TIMM, _timm(model, num_classes=10, **kwargs), inputs)

    img64 = images((2, 64), (1, 64), (3, 64))
    return [
        tm("timm cspnext_tiny", "cspnext_tiny"),
        tm(
            "timm efficientformer_l1 (meta3d attention bias)",
            "efficientformer_l1",
            images((1, 224), (2, 224)),
        ),
        tm("timm efficientvim_m1 (hidden state mixer)", "efficientvim_m1"),
        tm("timm lcnetv2_small (reparameterisable)", "lcnetv2_small"),
        tm("timm lowformer_b0", "lowformer_b0"),
        Case("timm mvitv2 (pooling attention, rel pos)", CLS, TIMM, _mvitv2, img64),
        tm("timm legacy_seresnet18", "legacy_seresnet18"),
        tm("timm legacy_xception", "legacy_xception", images((2, 96), (1, 96), (3, 128))),
        tm(
            "timm vit_tiny_r_s16_p8 (resnet stem hybrid)",
            "vit_tiny_r_s16_p8_224",
            img64,
            img_size=64,
        ),
        tm("timm inception_resnet_v2", "inception_resnet_v2", images((2, 96), (1, 96), (3, 128))),
        tm("timm iformer_t (inception mixer)", "iformer_t", IMG),
        tm("timm cpubone_b0", "cpubone_b0_bfrobust"),
    ]


def _mvitv2() -> nn.Module:
    from timm.models import mvitv2

    cfg = mvitv2.MultiScaleVitCfg(depths=(1, 1, 1, 1), embed_dim=16, num_heads=1)
    return mvitv2.MultiScaleVit(cfg, img_size=(64, 64), num_classes=10)


# --- torchvision --------------------------------------------------------------------------------


def _torchvision_eleventh() -> list[Case]:
    return [
        Case(
            "quantizable mobilenet_v2 (float functional add)",
            CLS,
            TV,
            _quantizable("mobilenet_v2"),
            IMG,
        ),
        Case(
            "quantizable shufflenet_v2 (float functional cat)",
            CLS,
            TV,
            _quantizable("shufflenet_v2_x0_5"),
            IMG,
        ),
        Case("resnext50_32x4d (grouped)", CLS, TV, _tv("resnext50_32x4d", num_classes=10), IMG32),
    ]


# --- hand-written patterns ----------------------------------------------------------------------

_log = logging.getLogger("tracebridge.heldout.eleventh")
_log.setLevel(logging.DEBUG)
_log.addHandler(logging.StreamHandler(io.StringIO()))  # records are formatted, not shown
_log.propagate = False


class FormattedAsserts(nn.Module):
    """timm's patch embedding checks: sizes formatted into assert messages with an f-string,
    ``%``, ``str`` and ``format``, into a message kept in a local for an assert, into a
    ``print`` and into log records that are formatted (DEBUG on)."""

    def __init__(self, patch: int = 4):
        super().__init__()
        self.patch = patch
        self.proj = nn.Conv2d(3, 16, patch, patch)

    def forward(self, x):
        b, c, h, w = x.shape
        p = self.patch
        torch._assert(h % p == 0, f"Input height ({h}) should be divisible by patch size ({p}).")
        assert w % p == 0, "width %d is not divisible by %d" % (w, p)  # noqa: UP031
        assert c == 3, "expected 3 channels, got " + str(c)
        shape_msg = "patch grid %s of an input %s" % ((h // p, w // p), tuple(x.shape))  # noqa: UP031
        assert h >= p, shape_msg
        print("tokens: %s" % (h // p * (w // p),), file=io.StringIO())  # noqa: UP031
        _log.debug("grid %s for input %s", (h // p, w // p), tuple(x.shape))
        _log.info("input {}x{}".format(h, w))  # noqa: UP032
        return self.proj(x).flatten(2).transpose(1, 2)


class StringKeyedHeads(nn.Module):
    """One head per input size, picked by a string made from the size: the string decides
    which weights run (a size that another head serves must not reuse the traced head)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, 2, 1)
        self.heads = nn.ModuleDict({str(s): nn.Linear(8, 10) for s in (32, 48)})

    def forward(self, x):
        key = str(x.shape[-1])
        return self.heads[key](self.stem(x).mean((2, 3)))


class PercentKeyedHeads(StringKeyedHeads):
    """The same, with the key made by ``"%d" % size`` (Python formats it in C)."""

    def forward(self, x):
        b, c, h, w = x.shape
        key = "%d" % w  # noqa: UP031 - the pattern under test
        return self.heads[key](self.stem(x).mean((2, 3)))


class StringKeyedScales(nn.Module):
    """A Python float cached per size in a dict keyed by an f-string of the size: a hit
    returns a number that no traced op computes."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Conv2d(3, 8, 1)
        self._scales: dict[str, float] = {}

    def forward(self, x):
        h, w = x.shape[-2:]
        key = f"{h}x{w}"
        if key not in self._scales:
            self._scales[key] = 1.0 / math.sqrt(h * w)
        return self.proj(x).sum((2, 3)) * self._scales[key]


@functools.cache
def _inverse_sqrt(n: int) -> float:
    return 1.0 / math.sqrt(n)


@functools.cache
def _coords(h: int, w: int) -> torch.Tensor:
    ys = torch.linspace(-1.0, 1.0, h)
    xs = torch.linspace(-1.0, 1.0, w)
    return torch.stack(torch.meshgrid(ys, xs, indexing="ij"))


class CachedCoords(nn.Module):
    """CoordConv with ``functools.cache``d coordinate grids (a tensor per size) and a cached
    float of the size (a number per size)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(5, 8, 3, padding=1)

    def forward(self, x):
        b, _, h, w = x.shape
        grid = _coords(h, w).expand(b, -1, -1, -1)
        return self.conv(torch.cat([x, grid], 1)) * _inverse_sqrt(h * w)


class CachedWeightNorm(nn.Module):
    """A weight normalised once per weight by a ``functools.cache``d method (the key holds
    the parameter tensor), as inference code caches a derived weight."""

    def __init__(self, dim: int = 16):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim, dim))
        self.bias = nn.Parameter(torch.randn(dim) * 0.1)

    @functools.cache  # noqa: B019 - the pattern under test
    def _normed(self, weight: torch.Tensor) -> torch.Tensor:
        return weight / weight.norm(dim=1, keepdim=True)

    def forward(self, x):
        return F.linear(x, self._normed(self.weight), self.bias).relu()


@torch.compiler.disable
def _relative_index(n: int, span: int) -> torch.Tensor:
    pos = torch.arange(n)
    return (pos[:, None] - pos[None, :]).clamp(-span + 1, span - 1) + span - 1


class CompilerDisabled(nn.Module):
    """A relative-position bias from a helper under ``torch.compiler.disable`` (libraries
    keep index arithmetic out of ``torch.compile``), and a disabled method."""

    def __init__(self, dim: int = 16, span: int = 8):
        super().__init__()
        self.span = span
        self.qk = nn.Linear(dim, 2 * dim)
        self.table = nn.Parameter(torch.randn(2 * span - 1) * 0.1)

    @torch.compiler.disable
    def bias(self, n: int) -> torch.Tensor:
        return self.table[_relative_index(n, self.span)]

    def forward(self, x):
        q, k = self.qk(x).chunk(2, -1)
        return (q @ k.transpose(1, 2) + self.bias(x.shape[1])).softmax(-1)


class TracingBranches(nn.Module):
    """``torch.jit.is_scripting()`` / ``is_tracing()`` branches written for torch.jit: a
    traced size becomes a tensor when tracing, a Python float otherwise."""

    def __init__(self, dim: int = 16):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        if torch.jit.is_scripting():
            n = float(x.shape[1])
        elif torch.jit.is_tracing():
            n = torch.tensor(x.shape[1], dtype=torch.float32)
        else:
            n = float(x.shape[1])
        if not torch.jit.is_tracing():
            assert x.dim() == 3, f"expected (batch, length, dim), got {tuple(x.shape)}"
        return self.proj(x).cumsum(1) / n


class TensorAsserts(nn.Module):
    """``torch._assert`` on a size and on the data (every row has a token)."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 16)

    def forward(self, ids, mask):
        torch._assert(ids.dim() == 2, "ids must be (batch, length)")
        torch._assert((mask.sum(-1) > 0).all(), "every row needs at least one token")
        h = self.embed(ids) * mask[..., None]
        return h.sum(1) / mask.sum(-1, keepdim=True)


class Encoded(NamedTuple):
    pooled: torch.Tensor
    tokens: torch.Tensor
    length: int


class NamedTupleOut(nn.Module):
    """A NamedTuple output holding a size as a Python int beside the tensors."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 16)
        self.proj = nn.Linear(16, 16)

    def forward(self, ids, mask):
        h = self.proj(self.embed(ids))
        return Encoded(pooled=h.mean(1), tokens=h, length=ids.shape[1])


class DictBatch(nn.Module):
    """A model that takes a dict batch (nested, with a Python number) and returns a dict."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 16)
        self.out = nn.Linear(16, 4)

    def forward(self, batch: dict):
        h = self.embed(batch["ids"]) * batch["mask"][..., None] * batch["options"]["scale"]
        return {"logits": self.out(h), "pooled": h.sum(1)}


class DictWrapper(nn.Module):
    """How the model above is called: a dict built from the tensors."""

    def __init__(self):
        super().__init__()
        self.model = DictBatch()

    def forward(self, ids, mask):
        return self.model({"ids": ids, "mask": mask, "options": {"scale": 0.5}})


class KwargsInner(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 16)
        self.proj = nn.Linear(16, 16)

    def forward(self, input_ids, attention_mask=None, **kwargs):
        h = self.proj(self.embed(input_ids))
        if attention_mask is not None:
            h = h * attention_mask[..., None]
        if kwargs.get("output_pooled", False):
            return h.sum(1) * kwargs.get("scale", 1.0)
        return h


class ArgsKwargs(nn.Module):
    """A ``*inputs, **kwargs`` forward passing its arguments on by keyword."""

    def __init__(self):
        super().__init__()
        self.inner = KwargsInner()
        self.extra = {"output_pooled": True}

    def forward(self, *inputs, **kwargs):
        ids, mask = inputs
        return self.inner(ids, attention_mask=mask, **self.extra, scale=2.0, **kwargs)


class InplaceViews(nn.Module):
    """In-place ops through views: ``+=`` on an index, ``narrow`` with a traced length,
    ``diagonal().zero_()``, an activation on a slice, ``fill_`` through a transpose, and a
    masked assignment."""

    def __init__(self, dim: int = 16):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.cls = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        h = self.proj(x).clone()
        n = h.shape[1]
        h[:, 0] += self.cls
        h.narrow(1, 1, n - 1).mul_(0.5)
        h.diagonal(dim1=1, dim2=2).zero_()
        h[:, :, :4].sigmoid_()
        h.transpose(1, 2)[..., -1].fill_(1.0)
        h[h > 1.5] = 1.5
        return h


class WhereFromSizes(nn.Module):
    """A banded causal mask from sizes, applied with ``torch.where``."""

    def __init__(self, dim: int = 16):
        super().__init__()
        self.qk = nn.Linear(dim, 2 * dim)

    def forward(self, x):
        n = x.shape[1]
        q, k = self.qk(x).chunk(2, -1)
        scores = q @ k.transpose(1, 2)
        i = torch.arange(n, device=x.device)
        band = (i[:, None] - i[None, :]).abs() <= max(1, n // 4)
        causal = torch.where(i[None, :] <= i[:, None], 0.0, float("-inf"))
        scores = torch.where(band, scores, torch.full_like(scores, -1e4)) + causal
        return scores.softmax(-1)


class ArangeDtypes(nn.Module):
    """``arange`` and ``linspace`` on traced sizes with dtypes and devices: float positions,
    a float64 frequency table, a reversed range, a range divided by a size."""

    def __init__(self, dim: int = 16):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, d = x.shape
        pos = torch.arange(n, dtype=x.dtype, device=x.device)
        freqs = torch.arange(0, d, 2, dtype=torch.float64).div(d).neg().exp2().to(x.dtype)
        angles = pos[:, None] * freqs[None, :]
        table = torch.cat([angles.sin(), angles.cos()], -1)
        back = torch.arange(n - 1, -1, -1, device=x.device)
        frac = torch.arange(n) / n
        ramp = torch.linspace(0, 1, n, dtype=x.dtype)
        h = self.proj(x) + table
        return h[:, back] * (frac + ramp)[None, :, None]


class GrowingBuffer(nn.Module):
    """A rotary table in a non-persistent buffer that grows when a longer sequence comes
    (the pattern of ``_set_cos_sin_cache`` in decoders before cache classes)."""

    def __init__(self, dim: int = 16, start: int = 4):
        super().__init__()
        self.dim = dim
        self.proj = nn.Linear(dim, dim)
        self._set_cache(start)

    def _set_cache(self, n: int) -> None:
        self.max_seq = n
        inv = 1.0 / (10000 ** (torch.arange(0, self.dim, 2).float() / self.dim))
        freqs = torch.outer(torch.arange(n).float(), inv)
        self.register_buffer("cos_cached", torch.cat([freqs, freqs], -1).cos(), persistent=False)

    def forward(self, x):
        n = x.shape[1]
        if n > self.max_seq:
            self._set_cache(n)
        return self.proj(x) * self.cos_cached[:n]


class ForkedNoise(nn.Module):
    """Fixed noise drawn under ``torch.random.fork_rng`` with its own seed (the global RNG
    is left as it was): the same noise on every call."""

    def __init__(self, dim: int = 16):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        with torch.random.fork_rng():
            torch.manual_seed(1234)
            noise = torch.randn_like(x)
        return self.proj(x + 0.1 * noise)


class AutocastRegion(nn.Module):
    """A bfloat16 ``torch.autocast`` region on the CPU with a float32 island inside."""

    def __init__(self, dim: int = 16):
        super().__init__()
        self.fc1 = nn.Linear(dim, 32)
        self.fc2 = nn.Linear(32, dim)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = F.gelu(self.fc1(x))
            with torch.autocast("cpu", enabled=False):
                norm = h.float().pow(2).mean(-1, keepdim=True).rsqrt()
            y = self.fc2(h * norm)
        return y.float()


class NoGradInside(nn.Module):
    """Fake quantisation whose scale is computed under ``torch.no_grad()`` and by a
    ``@torch.no_grad()`` method, then used with a straight-through estimator."""

    def __init__(self, dim: int = 16):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    @torch.no_grad()
    def _zero_point(self, h):
        return h.mean(-1, keepdim=True)

    def forward(self, x):
        h = self.proj(x)
        with torch.no_grad():
            scale = h.abs().amax(-1, keepdim=True).clamp(min=1e-5) / 127
        zp = self._zero_point(h)
        q = ((h - zp) / scale).round().clamp(-128, 127) * scale + zp
        return h + (q - h).detach()


class Gate(nn.Module):
    def __init__(self, dim: int = 16, experts: int = 4):
        super().__init__()
        self.router = nn.Linear(dim, experts)
        self.experts = nn.Linear(dim, dim * experts)
        self.count = experts
        self.load: torch.Tensor | None = None

    def forward(self, x):
        probs = self.router(x).softmax(-1)
        self.load = probs.flatten(0, -2).mean(0)  # read back by the parent
        outs = self.experts(x).unflatten(-1, (self.count, -1))
        return (outs * probs[..., None]).sum(-2)


class StateThroughModules(nn.Module):
    """Weights initialised by ``self.apply``; a load-balancing loss that each gate leaves
    in its state during forward, summed over ``self.modules()`` (MoE auxiliary losses)."""

    def __init__(self, dim: int = 16):
        super().__init__()
        self.layers = nn.Sequential(Gate(dim), nn.GELU(), Gate(dim))
        self.apply(self._init)

    @staticmethod
    def _init(module):
        if isinstance(module, nn.Linear):
            nn.init.trunc_normal_(module.weight, std=0.2)
            nn.init.constant_(module.bias, 0.01)

    def forward(self, x):
        y = self.layers(x)
        aux = sum(m.count * (m.load**2).sum() for m in self.modules() if isinstance(m, Gate))
        return y, aux


class TiedLM(nn.Module):
    """Weight tying: the output layer's weight is the embedding's, plus a second use of the
    embedding through ``F.linear``."""

    def __init__(self, dim: int = 16):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim)
        self.mix = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, VOCAB, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids, mask):
        h = torch.tanh(self.mix(self.embed(ids))) * mask[..., None]
        return self.head(h) + F.linear(h, self.embed.weight).softmax(-1)


class MathOnSizes(nn.Module):
    """``math`` on sizes: a square token grid from ``int(math.sqrt(n))``, padding to a
    multiple with ``%``, ``math.ceil`` for the window count, ``math.prod`` to flatten."""

    def __init__(self, dim: int = 8):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, d = x.shape
        side = int(math.sqrt(n))
        assert side * side == n, f"{n} tokens are not a square grid"
        grid = self.proj(x).transpose(1, 2).reshape(b, d, side, side)
        pad = (-side) % 2
        grid = F.pad(grid, (0, pad, 0, pad))
        windows = math.ceil(side / 2)
        pooled = F.avg_pool2d(grid, 2).reshape(b, d, windows * windows)
        return pooled.reshape(b, math.prod(pooled.shape[1:]))


def _square_tokens() -> list[tuple]:
    return [
        (torch.randn(b, n, 8, generator=_gen(i)),)
        for i, (b, n) in enumerate([(2, 16), (1, 16), (3, 9), (2, 25), (1, 4)])
    ]


class NumpyOnSizes(nn.Module):
    """numpy on sizes: ``np.prod`` of the shape, and a position table computed by numpy
    from the length (``np.linspace``) and turned into a tensor."""

    def __init__(self, dim: int = 16):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, d = x.shape
        ramp = torch.from_numpy(np.linspace(0.0, 1.0, n)).to(x.dtype)
        flat = int(np.prod(x.shape[1:]))
        return (self.proj(x) * ramp[None, :, None]).reshape(b, flat)


class DownUp(nn.Module):
    """A U-Net whose decoder resizes only when the skip's size differs
    (``if x.shape[-2:] != skip.shape[-2:]``): odd sizes take the other branch."""

    def __init__(self):
        super().__init__()
        self.downs = nn.ModuleList([nn.Conv2d(3, 8, 3, 2, 1), nn.Conv2d(8, 8, 3, 2, 1)])
        self.ups = nn.ModuleList([nn.Conv2d(16, 8, 3, 1, 1), nn.Conv2d(11, 4, 3, 1, 1)])

    def forward(self, x):
        skips = [x]
        for down in self.downs:
            skips.append(F.relu(down(skips[-1])))
        h = skips.pop()
        for up in self.ups:
            skip = skips.pop()
            h = F.interpolate(h, scale_factor=2.0, mode="nearest")
            if h.shape[-2:] != skip.shape[-2:]:
                h = F.interpolate(h, size=skip.shape[-2:], mode="bilinear", align_corners=False)
            h = up(torch.cat([h, skip], 1))
        return h


class SizesAsValues(nn.Module):
    """Sizes used as numbers in tensors: ``new_tensor`` of the image size to normalise box
    centres, ``torch.full`` with a size as the fill value, ``torch.tensor(d).sqrt()``."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        b, _, h, w = x.shape
        heat = self.conv(x)
        flat = heat.flatten(2).softmax(-1)
        ys = torch.arange(h, dtype=x.dtype).repeat_interleave(w)
        xs = torch.arange(w, dtype=x.dtype).repeat(h)
        centres = torch.stack([(flat * xs).sum(-1), (flat * ys).sum(-1)], -1)
        centres = centres / x.new_tensor([w, h])
        count = torch.full((b, 1), h * w, dtype=x.dtype)
        return centres * torch.tensor(h, dtype=torch.float32).sqrt(), count


class SplitSizes(nn.Module):
    """Shapes built from sizes: ``split`` by computed sections, ``unflatten`` with -1,
    ``view(*x.shape[:-1], heads, -1)``, a ``torch.Size`` concatenation, ``new_zeros``."""

    def __init__(self, dim: int = 16, heads: int = 2):
        super().__init__()
        self.heads = heads
        self.proj = nn.Linear(dim, 3 * dim)

    def forward(self, x):
        n = x.shape[1]
        first, second = torch.split(x, [n // 2, n - n // 2], dim=1)
        x = torch.cat([second, first], 1)
        q, k, v = self.proj(x).view(*x.shape[:-1], 3, -1).unbind(-2)
        q = q.unflatten(-1, (self.heads, -1))
        k = k.reshape(k.shape[:-1] + (self.heads, -1))
        att = torch.einsum("bihd,bjhd->bhij", q, k).softmax(-1)
        out = x.new_zeros(torch.Size([x.shape[0], n]) + v.shape[-1:])
        return out + torch.einsum("bhij,bjd->bid", att, v)


class ForcesFromEnergy(nn.Module):
    """An interatomic potential: the energy from positions, forces as its gradient with
    ``torch.autograd.grad`` inside forward (under ``torch.enable_grad``)."""

    def __init__(self):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 1))

    def forward(self, positions):
        with torch.enable_grad():
            pos = positions.detach().requires_grad_(True)
            dist = (pos[:, :, None] - pos[:, None, :]).pow(2).sum(-1).add(1.0).sqrt()
            energy = self.mlp(pos).sum() + dist.reciprocal().sum()
            (grad,) = torch.autograd.grad(energy, pos, create_graph=self.training)
        return energy.detach(), -grad


class JitDecorated(nn.Module):
    """Methods decorated for TorchScript (``@torch.jit.ignore``, ``@torch.jit.unused``,
    ``torch.jit.annotate``) called from forward."""

    def __init__(self, dim: int = 16):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(dim, dim) for _ in range(2)])

    @torch.jit.ignore
    def _scale(self, x):
        return x * (x.shape[-1] ** -0.5)

    @torch.jit.unused
    def _extra(self, x):
        return x.flip(1)

    def forward(self, x):
        outs = torch.jit.annotate(list[torch.Tensor], [])
        for layer in self.layers:
            x = self._scale(layer(x))
            outs.append(x)
        return torch.stack(outs).sum(0) + self._extra(x)


class DtypeBranches(nn.Module):
    """Branches on dtype, device and kind (``is_floating_point``, ``device.type``,
    ``torch.get_default_dtype``) and conversions ``type_as``, ``to(other)``,
    ``to(dtype, copy=True)``."""

    def __init__(self, dim: int = 16):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        if not x.is_floating_point():
            x = x.float()
        if x.device.type == "cpu" and x.dtype == torch.get_default_dtype():
            h = self.proj(x).to(dtype=torch.float64, copy=True)
        else:
            h = self.proj(x).double()
        h = h.softmax(-1).type_as(x)
        return h.to(x) + x.to(torch.float16).to(x.dtype)


class Letterbox(nn.Module):
    """Pads an image to a square of its longer side (``max(h, w)``), as SAM's preprocessing
    does, then a convolution."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, 2, 1)

    def forward(self, x):
        h, w = x.shape[-2:]
        side = max(h, w)
        x = F.pad(x, (0, side - w, 0, side - h))
        return self.conv(x)


def _rectangles() -> list[tuple]:
    shapes = [(2, 32, 24), (1, 32, 24), (3, 40, 28), (2, 24, 32), (1, 30, 30)]
    return [(torch.randn(b, 3, h, w, generator=_gen(i)),) for i, (b, h, w) in enumerate(shapes)]


def _seqs() -> list[tuple]:
    return [
        (torch.randn(b, n, 16, generator=_gen(i)),)
        for i, (b, n) in enumerate([(2, 8), (1, 8), (3, 5), (1, 1), (2, 12)])
    ]


def _points() -> list[tuple]:
    return [
        (torch.randn(b, n, 3, generator=_gen(i)),)
        for i, (b, n) in enumerate([(2, 6), (1, 6), (3, 4)])
    ]


def _patterns() -> list[Case]:
    text_calls = text([(2, 8, 0), (1, 8, 0), (3, 5, 0), (2, 8, 3), (1, 1, 0), (3, 12, 2)])
    img_sizes = images((2, 32), (1, 32), (3, 48), (2, 64))
    return [
        Case("sizes formatted in asserts and logs", PATTERN, HAND, FormattedAsserts, img_sizes),
        Case("head picked by a size string", PATTERN, HAND, StringKeyedHeads, img_sizes),
        Case("head picked by a %d size string", PATTERN, HAND, PercentKeyedHeads, img_sizes),
        Case("float cached by a size string", PATTERN, HAND, StringKeyedScales, img_sizes),
        Case("functools.cache on sizes (tensor, float)", PATTERN, HAND, CachedCoords, img_sizes),
        Case("functools.cache keyed on a weight", PATTERN, HAND, CachedWeightNorm, _seqs),
        Case("torch.compiler.disable helpers", PATTERN, HAND, CompilerDisabled, _seqs),
        Case("jit.is_tracing branches", PATTERN, HAND, TracingBranches, _seqs),
        Case("torch._assert on sizes and data", PATTERN, HAND, TensorAsserts, text_calls),
        Case("NamedTuple output with an int", PATTERN, HAND, NamedTupleOut, text_calls),
        Case("dict batch in, dict out", PATTERN, HAND, DictWrapper, text_calls),
        Case("*args/**kwargs forward", PATTERN, HAND, ArgsKwargs, text_calls),
        Case("in-place ops on views", PATTERN, HAND, InplaceViews, _seqs),
        Case("torch.where band mask from sizes", PATTERN, HAND, WhereFromSizes, _seqs),
        Case("arange/linspace with dtypes", PATTERN, HAND, ArangeDtypes, _seqs),
        Case("growing non-persistent buffer", PATTERN, HAND, GrowingBuffer, _seqs),
        Case("noise under fork_rng", PATTERN, HAND, ForkedNoise, _seqs),
        Case("autocast region (bfloat16)", PATTERN, HAND, AutocastRegion, _seqs),
        Case("no_grad inside forward", PATTERN, HAND, NoGradInside, _seqs),
        Case("state read through modules()", PATTERN, HAND, StateThroughModules, _seqs),
        Case("weight tying", PATTERN, HAND, TiedLM, text_calls),
        Case("math on sizes (sqrt, ceil, prod)", PATTERN, HAND, MathOnSizes, _square_tokens),
        Case("numpy on sizes", PATTERN, HAND, NumpyOnSizes, _seqs),
        Case(
            "unet resize when sizes differ",
            PATTERN,
            HAND,
            DownUp,
            images((2, 32), (1, 32), (3, 48), (2, 36)),
        ),
        Case("sizes as tensor values", PATTERN, HAND, SizesAsValues, img_sizes),
        Case("split and views from sizes", PATTERN, HAND, SplitSizes, _seqs),
        Case("autograd.grad in forward (forces)", "physics", HAND, ForcesFromEnergy, _points),
        Case("torch.jit decorated methods", PATTERN, HAND, JitDecorated, _seqs),
        Case("dtype and device branches", PATTERN, HAND, DtypeBranches, _seqs),
        Case("letterbox to a square (max of sizes)", PATTERN, HAND, Letterbox, _rectangles),
    ]


def eleventh_round() -> list[Case]:
    """Every case of the eleventh round."""
    return (
        _patterns()
        + _decoders()
        + _encoders()
        + _hf_vision()
        + _timm_eleventh()
        + _torchvision_eleventh()
    )
