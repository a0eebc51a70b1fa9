"""The held-out sweep's tenth round: architectures neither the zoo nor the earlier rounds
hold, chosen for the code paths they take rather than their number: hybrid state-space and
attention decoders, mixture-of-experts routers, differential, latent and sink attention,
encoders with rotary positions, adapters or extra embeddings, vision towers with masking,
query tokens or convolutional token embeddings, speech encoders and music decoders, timm's
halo, bottleneck and spatial-gating families, torchvision's quantizable and video models,
and hand-written modules in the patterns real code uses (masks built with ``torch.where``,
``nonzero``, cumulative positions, scatter and gather, ``einsum``, ``unfold``/``fold``,
interpolation by scale factor, ``grid_sample``, complex FFTs, ``topk``, caches in module
state, ``functools.lru_cache`` on sizes, dataclass outputs). Random weights, tiny
configurations, offline. ``heldout_models.all_cases`` adds them to the list.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from zoo_models import (
    ENC,
    ENC_DEC,
    HF,
    IMG,
    IMG32,
    NO_CACHE,
    SMALL_BERT,
    SMALL_DECODER,
    VOCAB,
    Case,
    _gen,
    _hf,
    _hf_image,
    _timm,
    _timm_class,
    _tv,
    images,
    seq2seq,
    text,
)

DEC, ENC_KIND, S2S = "language/decoder", "language/encoder", "language/encoder-decoder"
CLS = "vision/classification"
HF_, TIMM, TV, HAND = "transformers", "timm", "torchvision", "hand-written"
PATTERN = "pattern"
# The state-space layers chunk the sequence; lengths 8, 5, 1 and 12 cross chunk borders.
SSM = dict(pad_token_id=1)


def _dec(name: str, config: str, model: str, **extra) -> Case:
    kwargs = dict(SMALL_DECODER) | extra
    return Case(name, DEC, HF_, _hf(config, model, ENC, NO_CACHE, **kwargs), text())


def _decoders() -> list[Case]:
    moe = dict(num_local_experts=4, num_experts_per_tok=2)
    return [
        _dec(
            "falcon_h1 (mamba2 and attention side by side)",
            "FalconH1Config",
            "FalconH1ForCausalLM",
            head_dim=8,
            mamba_d_ssm=32,
            mamba_n_heads=4,
            mamba_d_head=8,
            mamba_n_groups=1,
            mamba_d_state=8,
            mamba_d_conv=4,
            mamba_chunk_size=4,
            **SSM,
        ),
        _dec(
            "bamba (mamba2 hybrid)",
            "BambaConfig",
            "BambaForCausalLM",
            attn_layer_indices=[1],
            mamba_n_heads=4,
            mamba_d_head=16,
            mamba_n_groups=1,
            mamba_d_state=8,
            mamba_d_conv=4,
            mamba_chunk_size=4,
            **SSM,
        ),
        _dec(
            "granitemoehybrid (mamba2, MoE)",
            "GraniteMoeHybridConfig",
            "GraniteMoeHybridForCausalLM",
            layer_types=["mamba", "attention"],
            mamba_n_heads=4,
            mamba_d_head=16,
            mamba_n_groups=1,
            mamba_d_state=8,
            mamba_d_conv=4,
            mamba_chunk_size=4,
            shared_intermediate_size=32,
            **moe,
            **SSM,
        ),
        _dec(
            "nemotron_h (mamba2, attention, mlp layers)",
            "NemotronHConfig",
            "NemotronHForCausalLM",
            layers_block_type=["mamba", "attention"],
            mamba_num_heads=4,
            mamba_head_dim=16,
            n_groups=1,
            ssm_state_size=8,
            conv_kernel=4,
            chunk_size=4,
            head_dim=8,
            **SSM,
        ),
        _dec(
            "zamba2 (shared attention blocks)",
            "Zamba2Config",
            "Zamba2ForCausalLM",
            num_hidden_layers=3,
            layers_block_type=["mamba", "hybrid", "mamba"],
            mamba_d_state=8,
            mamba_headdim=8,
            n_mamba_heads=8,
            mamba_ngroups=1,
            chunk_size=4,
            attention_head_dim=8,
            num_mem_blocks=1,
            **SSM,
        ),
        _dec(
            "jamba (mamba, attention, MoE)",
            "JambaConfig",
            "JambaForCausalLM",
            attn_layer_period=2,
            attn_layer_offset=1,
            expert_layer_period=2,
            expert_layer_offset=1,
            mamba_d_state=8,
            mamba_d_conv=4,
            mamba_dt_rank=4,
            use_mamba_kernels=False,
            **moe,
            **SSM,
        ),
        _dec(
            "qwen3_next (gated delta net, MoE)",
            "Qwen3NextConfig",
            "Qwen3NextForCausalLM",
            head_dim=8,
            layer_types=["linear_attention", "full_attention"],
            linear_num_value_heads=4,
            linear_num_key_heads=2,
            linear_key_head_dim=8,
            linear_value_head_dim=8,
            linear_conv_kernel_dim=4,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=32,
            **SSM,
        ),
        _dec(
            "gpt_oss (attention sinks, MoE, sliding)",
            "GptOssConfig",
            "GptOssForCausalLM",
            head_dim=8,
            num_local_experts=4,
            num_experts_per_tok=2,
            sliding_window=4,
            layer_types=["sliding_attention", "full_attention"],
            pad_token_id=1,
        ),
        _dec(
            "deepseek_v3 (latent attention, grouped routing)",
            "DeepseekV3Config",
            "DeepseekV3ForCausalLM",
            q_lora_rank=16,
            kv_lora_rank=16,
            qk_rope_head_dim=4,
            qk_nope_head_dim=8,
            v_head_dim=8,
            n_routed_experts=4,
            num_experts_per_tok=2,
            n_group=2,
            topk_group=1,
            moe_intermediate_size=16,
            first_k_dense_replace=1,
            num_key_value_heads=4,
            pad_token_id=1,
        ),
        _dec(
            "dbrx (MoE, clipped qkv)",
            "DbrxConfig",
            "DbrxForCausalLM",
            d_model=32,
            n_heads=4,
            n_layers=2,
            attn_config={"kv_n_heads": 2, "clip_qkv": 8.0, "rope_theta": 10000.0},
            ffn_config={"ffn_hidden_size": 32, "moe_num_experts": 4, "moe_top_k": 2},
            pad_token_id=1,
        ),
        _dec("phimoe (sparsemixer routing)", "PhimoeConfig", "PhimoeForCausalLM", **moe),
        _dec(
            "granitemoe (MoE, scaled residuals)", "GraniteMoeConfig", "GraniteMoeForCausalLM", **moe
        ),
        _dec("diffllama (differential attention)", "DiffLlamaConfig", "DiffLlamaForCausalLM"),
        _dec("doge (dynamic mask attention)", "DogeConfig", "DogeForCausalLM", pad_token_id=1),
        _dec("bitnet (ternary weights)", "BitNetConfig", "BitNetForCausalLM", pad_token_id=1),
        _dec(
            "llama4 text (chunked attention, no-rope layers, MoE)",
            "Llama4TextConfig",
            "Llama4ForCausalLM",
            head_dim=8,
            intermediate_size_mlp=64,
            num_local_experts=2,
            num_experts_per_tok=1,
            attention_chunk_size=4,
            no_rope_layers=[1, 0],
            pad_token_id=1,
        ),
        _dec(
            "olmo3 (sliding window)",
            "Olmo3Config",
            "Olmo3ForCausalLM",
            sliding_window=4,
            layer_types=["sliding_attention", "full_attention"],
            pad_token_id=1,
        ),
        _dec(
            "minicpm3 (latent attention)",
            "MiniCPM3Config",
            "MiniCPM3ForCausalLM",
            q_lora_rank=16,
            kv_lora_rank=16,
            qk_rope_head_dim=4,
            qk_nope_head_dim=8,
            v_head_dim=8,
            num_key_value_heads=4,
            pad_token_id=1,
        ),
        _dec(
            "hunyuan_v1_moe (qk norm, MoE)",
            "HunYuanMoEV1Config",
            "HunYuanMoEV1ForCausalLM",
            head_dim=8,
            num_experts=4,
            moe_topk=2,
            pad_token_id=1,
        ),
        _dec(
            "ernie4_5_moe (MoE, bias-corrected routing)",
            "Ernie4_5_MoeConfig",
            "Ernie4_5_MoeForCausalLM",
            moe_num_experts=4,
            moe_k=2,
            moe_intermediate_size=32,
            pad_token_id=1,
        ),
        _dec("vaultgemma", "VaultGemmaConfig", "VaultGemmaForCausalLM", head_dim=8),
        _dec(
            "gpt_neox_japanese",
            "GPTNeoXJapaneseConfig",
            "GPTNeoXJapaneseForCausalLM",
            intermediate_multiple_size=2,
        ),
    ]


def _encoders() -> list[Case]:
    def enc(name, config, model, kwargs=SMALL_BERT, **extra):
        return Case(name, ENC_KIND, HF_, _hf(config, model, ENC, **(kwargs | extra)), text())

    return [
        enc(
            "eurobert (bidirectional rotary)",
            "EuroBertConfig",
            "EuroBertModel",
            SMALL_DECODER,
            pad_token_id=1,
            bos_token_id=0,
            eos_token_id=2,
            mask_token_id=3,
        ),
        enc("nomic_bert (rotary encoder)", "NomicBertConfig", "NomicBertModel"),
        enc("roc_bert (shape and pronunciation)", "RoCBertConfig", "RoCBertModel"),
        enc("luke (entity-aware)", "LukeConfig", "LukeModel", entity_vocab_size=16),
        enc("markuplm (xpath embeddings)", "MarkupLMConfig", "MarkupLMModel"),
        enc("splinter", "SplinterConfig", "SplinterModel"),
        enc("bert_generation", "BertGenerationConfig", "BertGenerationEncoder"),
        enc(
            "jina_embeddings_v3 (rotary, lora adapters)",
            "JinaEmbeddingsV3Config",
            "JinaEmbeddingsV3Model",
        ),
        Case(
            "bigbird_pegasus (block sparse encoder-decoder)",
            S2S,
            HF_,
            _hf(
                "BigBirdPegasusConfig",
                "BigBirdPegasusModel",
                ENC_DEC,
                NO_CACHE,
                vocab_size=VOCAB,
                d_model=32,
                encoder_layers=2,
                decoder_layers=2,
                encoder_attention_heads=2,
                decoder_attention_heads=2,
                encoder_ffn_dim=64,
                decoder_ffn_dim=64,
                max_position_embeddings=64,
                block_size=2,
                num_random_blocks=1,
            ),
            seq2seq(),
        ),
        Case(
            "mvp (prompted bart)",
            S2S,
            HF_,
            _hf(
                "MvpConfig",
                "MvpModel",
                ENC_DEC,
                NO_CACHE,
                vocab_size=VOCAB,
                d_model=32,
                encoder_layers=2,
                decoder_layers=2,
                encoder_attention_heads=2,
                decoder_attention_heads=2,
                encoder_ffn_dim=64,
                decoder_ffn_dim=64,
                max_position_embeddings=64,
                use_prompt=True,
                prompt_length=3,
                prompt_mid_dim=16,
            ),
            seq2seq(),
        ),
    ]


def _hf_vision() -> list[Case]:
    small_vit = dict(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=32,
        patch_size=8,
    )
    return [
        Case(
            "videomae (tubelets)",
            "vision/video",
            HF_,
            _hf_image(
                "VideoMAEConfig",
                "VideoMAEModel",
                num_frames=4,
                tubelet_size=2,
                **small_vit,
            ),
            lambda: [
                (torch.randn(b, 4, 3, 32, 32, generator=_gen(i)),) for i, b in enumerate((2, 1, 3))
            ],
        ),
        Case(
            "mgp_str (scene text, a3 modules)",
            "vision/ocr",
            HF_,
            _hf_image(
                "MgpstrConfig",
                "MgpstrForSceneTextRecognition",
                image_size=[16, 32],
                patch_size=4,
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=2,
                max_token_length=8,
                num_character_labels=12,
                num_bpe_labels=20,
                num_wordpiece_labels=20,
            ),
            lambda: [
                (torch.randn(b, 3, 16, 32, generator=_gen(i)),) for i, b in enumerate((2, 1, 3))
            ],
        ),
        Case(
            "vitmatte (matting, vitdet backbone)",
            "vision/matting",
            HF_,
            _vitmatte(),
            images((2, 64), (1, 64), (3, 96), channels=4),
        ),
    ]


def _vitmatte():
    def build():
        import transformers

        backbone = transformers.VitDetConfig(
            num_channels=4,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            mlp_ratio=2,
            image_size=64,
            pretrain_image_size=64,
            patch_size=16,
            out_features=["stage2"],
        )
        cfg = transformers.VitMatteConfig(
            backbone_config=backbone,
            hidden_size=32,
            convstream_hidden_sizes=[8, 16, 16],
            fusion_hidden_sizes=[32, 16, 16, 8],
        )
        return HF(transformers.VitMatteForImageMatting(cfg), ("pixel_values",))

    return build


def _speech() -> list[Case]:
    return [
        Case(
            "musicgen decoder (codebooks, sinusoidal)",
            "audio/generation",
            HF_,
            _musicgen(),
            _codebook_inputs,
        ),
        Case(
            "seamless_m4t_v2 speech encoder (conformer, adapter)",
            "speech",
            HF_,
            _seamless_speech(),
            _features(16),
        ),
    ]


def _features(dim: int):
    def make():
        return [
            (torch.randn(b, n, dim, generator=_gen(i)),)
            for i, (b, n) in enumerate([(2, 24), (1, 24), (3, 17), (2, 40)])
        ]

    return make


def _codebook_inputs() -> list[tuple]:
    out = []
    for i, (b, n) in enumerate([(2, 8), (1, 8), (3, 5), (1, 1)]):
        out.append((torch.randint(0, 32, (b * 2, n), generator=_gen(i)),))
    return out


def _musicgen():
    def build():
        import transformers

        cfg = transformers.MusicgenDecoderConfig(
            vocab_size=32,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            ffn_dim=64,
            num_codebooks=2,
            max_position_embeddings=64,
            pad_token_id=33,
            bos_token_id=33,
        )
        return HF(transformers.MusicgenForCausalLM(cfg), ("input_ids",), use_cache=False)

    return build


def _seamless_speech():
    def build():
        import transformers

        cfg = transformers.SeamlessM4Tv2Config(
            hidden_size=32,
            speech_encoder_layers=2,
            speech_encoder_attention_heads=2,
            speech_encoder_intermediate_size=64,
            feature_projection_input_dim=16,
            adaptor_kernel_size=4,
            adaptor_stride=2,
            num_adapter_layers=1,
            conv_depthwise_kernel_size=5,
            speech_encoder_chunk_size=8,
            speech_encoder_left_chunk_num=1,
        )
        from transformers.models.seamless_m4t_v2 import modeling_seamless_m4t_v2 as m4t

        model = m4t.SeamlessM4Tv2SpeechEncoder(cfg)
        return HF(model, ("input_features",))

    return build


# --- timm ---------------------------------------------------------------------------------------


def _timm_tenth() -> list[Case]:
    def tm(name, model, inputs=IMG, **kwargs):
        return Case(name, CLS, TIMM, _timm(model, num_classes=10, **kwargs), inputs)

    img_fixed64 = images((2, 64), (1, 64), (3, 64))
    return [
        tm("timm halonet26t (halo attention)", "halonet26t", images((2, 256), (1, 256), (3, 256))),
        tm(
            "timm sebotnet33ts (self-attention, fixed size)",
            "sebotnet33ts_256",
            img_fixed64,
            img_size=64,
        ),
        tm("timm gmlp (spatial gating)", "gmlp_ti16_224", img_fixed64, img_size=64),
        Case(
            "timm convmixer",
            CLS,
            TIMM,
            _timm_class(
                "convmixer",
                "ConvMixer",
                dim=32,
                depth=2,
                kernel_size=5,
                patch_size=4,
                num_classes=10,
            ),
            IMG,
        ),
        tm("timm mobilenetv4_hybrid (mobile mqa)", "mobilenetv4_hybrid_medium"),
        tm("timm nfnet_l0 (scaled weight standardization)", "nfnet_l0"),
        tm("timm xception41 (separable, tf style)", "xception41"),
        tm("timm selecsls42b", "selecsls42b"),
        tm("timm inception_v4", "inception_v4", images((2, 96), (1, 96), (3, 128))),
        tm("timm efficientvit_l1 (linear attention)", "efficientvit_l1"),
        tm("timm darknet53", "darknet53"),
        tm("timm vgg11 (conv mlp head)", "vgg11", images((2, 64), (1, 64), (3, 96))),
        tm("timm resnetrs50", "resnetrs50"),
        tm(
            "timm vit siglip (attention pooling head)",
            "vit_base_patch16_siglip_224",
            images((2, 32), (1, 32), (3, 32), (2, 48)),
            img_size=32,
            patch_size=8,
            embed_dim=32,
            depth=2,
            num_heads=2,
            dynamic_img_size=True,
        ),
        tm(
            "timm swinv2_cr (scaled cosine, padded windows)",
            "swinv2_cr_tiny_ns_224",
            images((2, 64), (1, 64), (3, 64)),
            img_size=64,
            window_size=4,
            embed_dim=16,
            depths=(1, 1),
            num_heads=(1, 2),
        ),
    ]


# --- torchvision --------------------------------------------------------------------------------


def _torchvision_tenth() -> list[Case]:
    return [
        Case(
            "quantizable resnet18 (float functional)",
            CLS,
            TV,
            _quantizable("resnet18"),
            IMG,
        ),
        Case(
            "quantizable mobilenet_v3_large (float functional)",
            CLS,
            TV,
            _quantizable("mobilenet_v3_large"),
            IMG,
        ),
        Case("vgg11_bn (adaptive pool grows)", CLS, TV, _tv("vgg11_bn", num_classes=10), IMG32),
    ]


def _quantizable(name: str):
    def build():
        import torchvision

        return getattr(torchvision.models.quantization, name)(
            weights=None, quantize=False, num_classes=10
        )

    return build


# --- hand-written patterns ----------------------------------------------------------------------


class LengthMasked(nn.Module):
    """Attention pooling over padded sequences: a mask from lengths with ``torch.where``."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 16)
        self.score = nn.Linear(16, 1)

    def forward(self, ids, mask):
        lengths = mask.sum(-1)
        positions = torch.arange(ids.shape[1], device=ids.device)
        valid = positions[None, :] < lengths[:, None]
        h = self.embed(ids)
        scores = torch.where(valid, self.score(h).squeeze(-1), torch.finfo(h.dtype).min)
        weights = scores.softmax(-1)
        return (weights.unsqueeze(-1) * h).sum(1)


class CumsumPositions(nn.Module):
    """Position ids that skip padding (``mask.cumsum(1) * mask``), as RoBERTa-style
    embeddings count them, plus a learned table."""

    def __init__(self):
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, 16)
        self.positions = nn.Embedding(32, 16)
        self.out = nn.Linear(16, 8)

    def forward(self, ids, mask):
        pos = (mask.cumsum(1) * mask).long()
        return self.out(self.tokens(ids) + self.positions(pos))


class SelectedMean(nn.Module):
    """The mean of the entries a mask keeps, with ``masked_select`` and ``nonzero``: the
    count of kept entries decides the sizes in between."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 16)

    def forward(self, x):
        h = self.proj(x)
        kept = torch.masked_select(h, h > 0)
        where = torch.nonzero(h > 0)
        return kept.sum() / max(kept.numel(), 1), where.float().mean(0)


class SegmentPool(nn.Module):
    """A graph layer: messages along edges with ``index_add_``, degrees with
    ``scatter_add``, then a per-graph mean with ``scatter_reduce`` (node and edge counts
    change between calls)."""

    def __init__(self):
        super().__init__()
        self.msg = nn.Linear(8, 16)
        self.upd = nn.Linear(8 + 16, 16)

    def forward(self, x, edges, graph):
        src, dst = edges
        m = self.msg(x)[src]
        agg = torch.zeros(x.shape[0], 16, dtype=x.dtype).index_add_(0, dst, m)
        deg = torch.zeros(x.shape[0], dtype=x.dtype).scatter_add_(
            0, dst, torch.ones_like(dst, dtype=x.dtype)
        )
        h = F.relu(self.upd(torch.cat([x, agg / deg.clamp(min=1)[:, None]], -1)))
        groups = int(graph.max()) + 1
        out = torch.zeros(groups, 16, dtype=h.dtype)
        index = graph[:, None].expand(-1, 16)
        return out.scatter_reduce(0, index, h, reduce="mean", include_self=False)


def _graph_inputs() -> list[tuple]:
    out = []
    for i, (n, e, g) in enumerate([(10, 20, 2), (7, 9, 1), (13, 30, 3)]):
        gen = _gen(i)
        graph = torch.sort(torch.randint(0, g, (n,), generator=gen)).values
        graph[:g] = torch.arange(g)
        graph = torch.sort(graph).values
        edges = torch.randint(0, n, (2, e), generator=gen)
        out.append((torch.randn(n, 8, generator=gen), edges, graph))
    return out


class EinsumRelative(nn.Module):
    """Attention with a learned relative-position table, indexed by an ``arange``
    difference and mixed in with ``einsum`` (Transformer-XL / Music Transformer style)."""

    def __init__(self, dim: int = 16, heads: int = 2, span: int = 16):
        super().__init__()
        self.heads, self.span = heads, span
        self.qkv = nn.Linear(dim, 3 * dim)
        self.rel = nn.Parameter(torch.randn(2 * span - 1, dim // heads) * 0.1)
        self.out = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).unbind(2)
        pos = torch.arange(n)
        rel = self.rel[
            (pos[:, None] - pos[None, :]).clamp(-self.span + 1, self.span - 1) + self.span - 1
        ]
        logits = torch.einsum("bihd,bjhd->bhij", q, k) + torch.einsum("bihd,ijd->bhij", q, rel)
        att = (logits / math.sqrt(d // self.heads)).softmax(-1)
        return self.out(torch.einsum("bhij,bjhd->bihd", att, v).reshape(b, n, d))


class OverlapAdd(nn.Module):
    """Patch processing with ``F.unfold``, a per-patch MLP, and ``F.fold`` back with overlap
    normalised by folding ones (the image size is read from the input)."""

    def __init__(self):
        super().__init__()
        self.mlp = nn.Linear(3 * 4 * 4, 3 * 4 * 4)

    def forward(self, x):
        size = x.shape[-2:]
        cols = F.unfold(x, kernel_size=4, stride=2, padding=1)
        cols = self.mlp(cols.transpose(1, 2)).transpose(1, 2)
        out = F.fold(cols, size, kernel_size=4, stride=2, padding=1)
        norm = F.fold(
            F.unfold(torch.ones_like(x), 4, stride=2, padding=1), size, 4, stride=2, padding=1
        )
        return out / norm


class ScaleFactorFPN(nn.Module):
    """A top-down pyramid: ``interpolate`` by ``scale_factor`` (nearest) and to another
    map's size (bilinear, align_corners), then a recomputed-scale upsample."""

    def __init__(self):
        super().__init__()
        self.down1 = nn.Conv2d(3, 8, 3, 2, 1)
        self.down2 = nn.Conv2d(8, 8, 3, 2, 1)
        self.head = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        a = self.down1(x)
        b = self.down2(a)
        top = F.interpolate(b, scale_factor=2.0, mode="nearest") + a
        top = F.interpolate(top, size=x.shape[-2:], mode="bilinear", align_corners=True)
        small = F.interpolate(x, scale_factor=0.5, mode="bilinear", recompute_scale_factor=True)
        return self.head(top), small


class SpatialTransformer(nn.Module):
    """A spatial transformer: a small localisation net predicts an affine matrix;
    ``affine_grid`` and ``grid_sample`` resample the input."""

    def __init__(self):
        super().__init__()
        self.loc = nn.Sequential(nn.Conv2d(3, 8, 5, 2), nn.ReLU(), nn.AdaptiveAvgPool2d(2))
        self.fc = nn.Linear(32, 6)

    def forward(self, x):
        theta = self.fc(self.loc(x).flatten(1)).view(-1, 2, 3) * 0.1
        theta = theta + torch.tensor([[1.0, 0, 0], [0, 1.0, 0]])
        grid = F.affine_grid(theta, list(x.shape), align_corners=False)
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)


class GlobalFilter(nn.Module):
    """GFNet's global filter: ``rfft2``, a complex weight (``view_as_complex``) interpolated
    to the spectrum's size, ``irfft2`` back at the input's size."""

    def __init__(self, dim: int = 8, h: int = 8, w: int = 5):
        super().__init__()
        self.proj = nn.Conv2d(3, dim, 1)
        self.weight = nn.Parameter(torch.randn(dim, h, w, 2) * 0.02 + 0.5)

    def forward(self, x):
        x = self.proj(x)
        h, w = x.shape[-2:]
        spec = torch.fft.rfft2(x, norm="ortho")
        weight = self.weight.permute(0, 3, 1, 2)
        weight = F.interpolate(weight, size=spec.shape[-2:], mode="bilinear", align_corners=True)
        weight = torch.view_as_complex(weight.permute(0, 2, 3, 1).contiguous())
        return torch.fft.irfft2(spec * weight, s=(h, w), norm="ortho")


class ComplexRotary(nn.Module):
    """Llama's original rotary embedding: frequencies as ``torch.polar``, queries as
    complex numbers (``view_as_complex``), rotated, and back with ``view_as_real``."""

    def __init__(self, dim: int = 16):
        super().__init__()
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        freqs = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("freqs", freqs, persistent=False)

    def forward(self, x):
        n = x.shape[1]
        angles = torch.outer(torch.arange(n, dtype=torch.float32), self.freqs)
        rot = torch.polar(torch.ones_like(angles), angles)
        q = torch.view_as_complex(self.q(x).float().reshape(*x.shape[:-1], -1, 2))
        k = torch.view_as_complex(self.k(x).float().reshape(*x.shape[:-1], -1, 2))
        q = torch.view_as_real(q * rot).flatten(2)
        k = torch.view_as_real(k * rot).flatten(2)
        return (q @ k.transpose(1, 2)).softmax(-1)


class TokenPruning(nn.Module):
    """Keep the top half of the tokens by a learned score (``topk`` then ``gather``), run a
    layer, and put them back in order (``sort`` of the kept indices, ``scatter``)."""

    def __init__(self, dim: int = 16):
        super().__init__()
        self.score = nn.Linear(dim, 1)
        self.layer = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, d = x.shape
        keep = max(1, n // 2)
        idx = self.score(x).squeeze(-1).topk(keep, dim=1).indices
        idx = idx.sort(dim=1).values
        picked = x.gather(1, idx[..., None].expand(-1, -1, d))
        out = x.clone()
        out.scatter_(1, idx[..., None].expand(-1, -1, d), self.layer(picked))
        return out


class CachedMask(nn.Module):
    """A causal mask cached in module state, keyed by the length (the pattern of
    ``self._mask_cache`` in decoders written before cache classes)."""

    def __init__(self, dim: int = 16):
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, 2, batch_first=True)
        self._masks: dict[int, torch.Tensor] = {}

    def mask(self, n: int) -> torch.Tensor:
        if n not in self._masks:
            self._masks[n] = torch.triu(torch.full((n, n), float("-inf")), diagonal=1)
        return self._masks[n]

    def forward(self, x):
        return self.attn(x, x, x, attn_mask=self.mask(x.shape[1]), need_weights=False)[0]


@functools.lru_cache(maxsize=8)
def _sinusoids(n: int, dim: int) -> torch.Tensor:
    position = torch.arange(n, dtype=torch.float32)[:, None]
    scale = torch.exp(torch.arange(0, dim, 2).float() * (-math.log(10000.0) / dim))
    table = torch.zeros(n, dim)
    table[:, 0::2] = torch.sin(position * scale)
    table[:, 1::2] = torch.cos(position * scale)
    return table


class LruSinusoids(nn.Module):
    """Sinusoidal positions from a ``functools.lru_cache``'d function of the length."""

    def __init__(self, dim: int = 16):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, ids, mask):
        return self.out(self.embed(ids) + _sinusoids(ids.shape[1], 16)) * mask[..., None]


@dataclass
class PoolerOutput:
    """A dataclass output with an optional field, as libraries return."""

    pooled: torch.Tensor
    tokens: torch.Tensor
    attention: torch.Tensor | None = None


class DataclassOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 16)
        self.proj = nn.Linear(16, 16)

    def forward(self, ids, mask):
        h = self.proj(self.embed(ids))
        pooled = (h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True).clamp(min=1)
        return PoolerOutput(pooled=pooled, tokens=h)


class KnnEdgeConv(nn.Module):
    """DGCNN's edge convolution: ``cdist`` nearest neighbours by ``topk``, features of the
    neighbours by advanced indexing, max over them."""

    def __init__(self, k: int = 4):
        super().__init__()
        self.k = k
        self.mlp = nn.Linear(6, 16)

    def forward(self, points):
        b, n, _ = points.shape
        idx = torch.cdist(points, points).topk(self.k, dim=-1, largest=False).indices
        base = torch.arange(b)[:, None, None] * n
        neighbours = points.reshape(b * n, 3)[(idx + base).reshape(-1)].view(b, n, self.k, 3)
        centre = points[:, :, None, :].expand(-1, -1, self.k, -1)
        edge = torch.cat([centre, neighbours - centre], -1)
        return self.mlp(edge).amax(2)


class FeatureTokenizer(nn.Module):
    """FT-Transformer's tokenizer for tabular rows: categorical columns looked up in one
    table at per-column offsets, numerical columns as ``x * weight + bias`` tokens, a CLS
    token, one encoder layer."""

    def __init__(self, cards=(3, 5, 4), numeric: int = 3, dim: int = 16):
        super().__init__()
        self.register_buffer("offsets", torch.tensor([0, *cards[:-1]]).cumsum(0))
        self.cat = nn.Embedding(sum(cards), dim)
        self.num_w = nn.Parameter(torch.randn(numeric, dim))
        self.num_b = nn.Parameter(torch.randn(numeric, dim))
        self.cls = nn.Parameter(torch.randn(1, 1, dim))
        self.layer = nn.TransformerEncoderLayer(dim, 2, 32, dropout=0.0, batch_first=True)

    def forward(self, categorical, numerical):
        tokens = torch.cat(
            [
                self.cls.expand(categorical.shape[0], -1, -1),
                self.cat(categorical + self.offsets),
                numerical[..., None] * self.num_w + self.num_b,
            ],
            1,
        )
        return self.layer(tokens)[:, 0]


def _table_rows() -> list[tuple]:
    out = []
    for i, b in enumerate((4, 1, 7)):
        g = _gen(i)
        cat = torch.stack([torch.randint(0, c, (b,), generator=g) for c in (3, 5, 4)], 1)
        out.append((cat, torch.randn(b, 3, generator=g)))
    return out


class PackedGRU(nn.Module):
    """A GRU over padded sequences with ``pack_padded_sequence`` (lengths from the mask)."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 16)
        self.gru = nn.GRU(16, 16, batch_first=True)

    def forward(self, ids, mask):
        lengths = mask.sum(1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(
            self.embed(ids), lengths, batch_first=True, enforce_sorted=False
        )
        out, h = self.gru(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=ids.shape[1])
        return out, h[-1]


def _points() -> list[tuple]:
    return [
        (torch.randn(b, n, 3, generator=_gen(i)),)
        for i, (b, n) in enumerate([(2, 16), (1, 16), (3, 10)])
    ]


def _seqs() -> list[tuple]:
    return [
        (torch.randn(b, n, 16, generator=_gen(i)),)
        for i, (b, n) in enumerate([(2, 8), (1, 8), (3, 5), (1, 1), (2, 12)])
    ]


def _patterns() -> list[Case]:
    text_calls = text([(2, 8, 0), (1, 8, 0), (3, 5, 0), (2, 8, 3), (1, 1, 0), (3, 12, 2)])
    return [
        Case("where mask from lengths", PATTERN, HAND, LengthMasked, text_calls),
        Case("cumsum positions", PATTERN, HAND, CumsumPositions, text_calls),
        Case("masked_select and nonzero", PATTERN, HAND, SelectedMean, _seqs),
        Case("graph layer (index_add, scatter_reduce)", "graph", HAND, SegmentPool, _graph_inputs),
        Case("einsum relative attention", PATTERN, HAND, EinsumRelative, _seqs),
        Case("unfold and fold (overlap-add)", PATTERN, HAND, OverlapAdd, IMG32),
        Case("interpolate by scale factor", PATTERN, HAND, ScaleFactorFPN, IMG32),
        Case("spatial transformer (grid_sample)", PATTERN, HAND, SpatialTransformer, IMG32),
        Case("global filter (complex fft)", PATTERN, HAND, GlobalFilter, IMG32),
        Case("complex rotary (polar)", PATTERN, HAND, ComplexRotary, _seqs),
        Case("token pruning (topk, sort, scatter)", PATTERN, HAND, TokenPruning, _seqs),
        Case("mask cached in module state", PATTERN, HAND, CachedMask, _seqs),
        Case("lru_cache on a size function", PATTERN, HAND, LruSinusoids, text_calls),
        Case("dataclass output", PATTERN, HAND, DataclassOut, text_calls),
        Case("knn edge conv (cdist, topk)", "point cloud", HAND, KnnEdgeConv, _points),
        Case("feature tokenizer (tabular)", "tabular", HAND, FeatureTokenizer, _table_rows),
        Case("packed gru (lengths)", PATTERN, HAND, PackedGRU, text_calls),
    ]


def tenth_round() -> list[Case]:
    """Every case of the tenth round."""
    return (
        _decoders()
        + _encoders()
        + _hf_vision()
        + _speech()
        + _timm_tenth()
        + _torchvision_tenth()
        + _patterns()
    )
