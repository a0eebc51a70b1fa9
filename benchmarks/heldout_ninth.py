"""The held-out sweep's ninth round: published architectures neither ``heldout_models.py``'s
earlier rounds nor the zoo hold (newer decoders, encoders and encoder-decoders of
transformers 5, its vision and multimodal towers, timm's newer and older families,
torchvision's video and detection models), built the zoo's way: random weights, tiny
configurations, offline. ``heldout_models.all_cases`` adds them to the list.
"""

from __future__ import annotations

import torch

from zoo_models import (
    DET,
    ENC,
    ENC_DEC,
    HF,
    IMG,
    IMG32,
    NO_CACHE,
    SMALL_BERT,
    SMALL_DECODER,
    SMALL_T5,
    VOCAB,
    Case,
    Detection,
    _gen,
    _hf,
    _hf_image,
    _timm,
    _tv,
    _video,
    images,
    seq2seq,
    text,
    tokens,
)

DEC, ENC_KIND, S2S = "language/decoder", "language/encoder", "language/encoder-decoder"
CLS = "vision/classification"
HF_ = "transformers"
SMALL_S2S = dict(
    vocab_size=VOCAB,
    d_model=32,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=2,
    decoder_attention_heads=2,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    max_position_embeddings=64,
    pad_token_id=1,
    bos_token_id=0,
    eos_token_id=2,
    decoder_start_token_id=2,
)


def _dec(name: str, config: str, model: str, **extra) -> Case:
    kwargs = dict(SMALL_DECODER) | extra
    return Case(name, DEC, HF_, _hf(config, model, ENC, NO_CACHE, **kwargs), text())


def _decoders() -> list[Case]:
    return [
        _dec(
            "gemma3 (text, sliding + global)",
            "Gemma3TextConfig",
            "Gemma3ForCausalLM",
            head_dim=8,
            sliding_window=4,
            layer_types=["sliding_attention", "full_attention"],
        ),
        _dec("granite (scaled residuals)", "GraniteConfig", "GraniteForCausalLM"),
        _dec(
            "cohere2 (sliding window)",
            "Cohere2Config",
            "Cohere2ForCausalLM",
            sliding_window=4,
            layer_types=["sliding_attention", "full_attention"],
        ),
        _dec("helium", "HeliumConfig", "HeliumForCausalLM", head_dim=8, pad_token_id=1),
        _dec("persimmon (qk layernorm)", "PersimmonConfig", "PersimmonForCausalLM"),
        Case(
            "biogpt",
            DEC,
            HF_,
            _hf("BioGptConfig", "BioGptForCausalLM", ENC, NO_CACHE, **SMALL_BERT),
            text(),
        ),
        _dec("smollm3 (no-rope layers)", "SmolLM3Config", "SmolLM3ForCausalLM", pad_token_id=1),
        _dec(
            "qwen3_moe (MoE)",
            "Qwen3MoeConfig",
            "Qwen3MoeForCausalLM",
            head_dim=8,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
        ),
        _dec(
            "jetmoe (attention experts)",
            "JetMoeConfig",
            "JetMoeForCausalLM",
            kv_channels=8,
            num_local_experts=4,
            num_experts_per_tok=2,
        ),
        _dec("exaone4", "Exaone4Config", "Exaone4ForCausalLM", head_dim=8, sliding_window=4),
        _dec(
            "lfm2 (short conv + attention)",
            "Lfm2Config",
            "Lfm2ForCausalLM",
            layer_types=["conv", "full_attention"],
            pad_token_id=1,
        ),
        _dec("apertus (xielu)", "ApertusConfig", "ApertusForCausalLM", pad_token_id=1),
    ]


def _encoders() -> list[Case]:
    def enc(name, config, model, **extra):
        return Case(name, ENC_KIND, HF_, _hf(config, model, ENC, **(SMALL_BERT | extra)), text())

    return [
        enc("ernie (task type)", "ErnieConfig", "ErnieModel"),
        enc(
            "rembert (decoupled embeddings)",
            "RemBertConfig",
            "RemBertModel",
            input_embedding_size=16,
            output_embedding_size=24,
        ),
        enc("roberta_prelayernorm", "RobertaPreLayerNormConfig", "RobertaPreLayerNormModel"),
        enc("megatron_bert", "MegatronBertConfig", "MegatronBertModel"),
        enc("ibert (integer-only, fp mode)", "IBertConfig", "IBertModel"),
        enc(
            "yoso (lsh attention, cumulation)",
            "YosoConfig",
            "YosoModel",
            max_position_embeddings=66,
        ),
        enc(
            "mra (multi-resolution attention)", "MraConfig", "MraModel", max_position_embeddings=66
        ),
    ]


def _seq2seq_cases() -> list[Case]:
    def s2s(name, config, model, **kwargs):
        return Case(name, S2S, HF_, _hf(config, model, ENC_DEC, NO_CACHE, **kwargs), seq2seq())

    return [
        s2s("mt5", "MT5Config", "MT5Model", **SMALL_T5),
        s2s("pegasus (sinusoidal)", "PegasusConfig", "PegasusModel", **SMALL_S2S),
        s2s("blenderbot_small", "BlenderbotSmallConfig", "BlenderbotSmallModel", **SMALL_S2S),
        s2s("m2m_100 (sinusoidal offsets)", "M2M100Config", "M2M100Model", **SMALL_S2S),
        s2s(
            "fsmt (two vocabularies)",
            "FSMTConfig",
            "FSMTModel",
            langs=["en", "de"],
            src_vocab_size=VOCAB,
            tgt_vocab_size=VOCAB,
            **{k: v for k, v in SMALL_S2S.items() if k != "vocab_size"},
        ),
        s2s("plbart", "PLBartConfig", "PLBartModel", **SMALL_S2S),
    ]


def _hf_vision() -> list[Case]:
    img64 = images((2, 64), (1, 64), (3, 64), (2, 96))
    return [
        Case(
            "hf beit (relative bias, image size follows)",
            CLS,
            HF_,
            _hf_image(
                "BeitConfig",
                "BeitForImageClassification",
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=2,
                intermediate_size=64,
                image_size=32,
                patch_size=8,
                use_relative_position_bias=True,
                num_labels=10,
            ),
            IMG32,
        ),
        Case(
            "hf swinv2",
            CLS,
            HF_,
            _hf_image(
                "Swinv2Config",
                "Swinv2ForImageClassification",
                image_size=64,
                embed_dim=16,
                depths=[1, 1],
                num_heads=[1, 2],
                window_size=4,
                num_labels=10,
            ),
            img64,
        ),
        Case(
            "hf focalnet",
            CLS,
            HF_,
            _hf_image(
                "FocalNetConfig",
                "FocalNetForImageClassification",
                image_size=64,
                embed_dim=16,
                depths=[1, 1],
                num_labels=10,
            ),
            img64,
        ),
        Case(
            "hf pvt_v2",
            CLS,
            HF_,
            _hf_image(
                "PvtV2Config",
                "PvtV2ForImageClassification",
                hidden_sizes=[8, 16, 32, 64],
                depths=[1, 1, 1, 1],
                num_attention_heads=[1, 1, 2, 2],
                num_labels=10,
            ),
            img64,
        ),
        Case(
            "textnet (text detection backbone)",
            CLS,
            HF_,
            _hf_image("TextNetConfig", "TextNetModel"),
            img64,
        ),
        Case(
            "vitdet (windowed, abs pos interpolated)",
            "vision/backbone",
            HF_,
            _hf_image(
                "VitDetConfig",
                "VitDetModel",
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=2,
                mlp_ratio=2,
                image_size=64,
                pretrain_image_size=64,
                patch_size=8,
                window_size=4,
                window_block_indices=[0],
                use_relative_position_embeddings=True,
            ),
            images((2, 64), (1, 64), (3, 64)),
        ),
        Case(
            "hf hiera",
            CLS,
            HF_,
            _hf_image(
                "HieraConfig",
                "HieraForImageClassification",
                image_size=[64, 64],
                embed_dim=16,
                depths=[1, 1, 1, 1],
                num_heads=[1, 1, 2, 2],
                num_labels=10,
            ),
            images((2, 64), (1, 64), (3, 64)),
        ),
        Case(
            "hf mobilevitv2",
            CLS,
            HF_,
            _hf_image(
                "MobileViTV2Config",
                "MobileViTV2ForImageClassification",
                image_size=64,
                width_multiplier=0.5,
                num_labels=10,
            ),
            images((2, 64), (1, 64), (3, 64)),
        ),
        Case(
            "dinov2_with_registers",
            CLS,
            HF_,
            _hf_image(
                "Dinov2WithRegistersConfig",
                "Dinov2WithRegistersModel",
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=2,
                mlp_ratio=2,
                image_size=32,
                patch_size=8,
                num_register_tokens=2,
            ),
            IMG32,
        ),
        Case(
            "ijepa",
            CLS,
            HF_,
            _hf_image(
                "IJepaConfig",
                "IJepaModel",
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=2,
                intermediate_size=64,
                image_size=32,
                patch_size=8,
            ),
            images((2, 32), (1, 32), (3, 32)),
        ),
    ]


def _multimodal() -> list[Case]:
    return [
        Case(
            "blip vision tower",
            "multimodal/vision",
            HF_,
            lambda: _blip_vision(),
            images((2, 32), (1, 32), (3, 32)),
        ),
        Case(
            "owlv2 (vision tower)",
            "multimodal/vision",
            HF_,
            _hf_image(
                "Owlv2VisionConfig",
                "Owlv2VisionModel",
                hidden_size=32,
                intermediate_size=64,
                num_hidden_layers=2,
                num_attention_heads=2,
                image_size=32,
                patch_size=8,
            ),
            images((2, 32), (1, 32), (3, 32)),
        ),
        Case(
            "aimv2 vision (rms norm, swiglu)",
            "multimodal/vision",
            HF_,
            _hf_image(
                "Aimv2VisionConfig",
                "Aimv2VisionModel",
                hidden_size=32,
                intermediate_size=64,
                num_hidden_layers=2,
                num_attention_heads=2,
                image_size=32,
                patch_size=8,
            ),
            images((2, 32), (1, 32), (3, 32)),
        ),
        Case(
            "chinese_clip text",
            "multimodal/text",
            HF_,
            _hf("ChineseCLIPTextConfig", "ChineseCLIPTextModel", ENC, **SMALL_BERT),
            text(),
        ),
    ]


def _blip_vision():
    import transformers

    cfg = transformers.BlipVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=32,
        patch_size=8,
    )
    return HF(transformers.BlipVisionModel(cfg), ("pixel_values",))


def _timm_ninth() -> list[Case]:
    t = "timm"

    def tm(name, model, inputs=IMG, **kwargs):
        return Case(name, CLS, t, _timm(model, num_classes=10, **kwargs), inputs)

    return [
        tm("timm nextvit_small", "nextvit_small"),
        tm("timm ghostnetv2_100", "ghostnetv2_100"),
        tm("timm mobileone_s0 (reparam branches)", "mobileone_s0"),
        tm("timm rexnet_100", "rexnet_100"),
        tm("timm cs3darknet_s (cross stage)", "cs3darknet_s"),
        tm("timm lcnet_050", "lcnet_050"),
        tm("timm fbnetv3_b", "fbnetv3_b"),
        tm("timm convit_tiny (gated positional attention)", "convit_tiny", IMG32, img_size=32),
        tm("timm caformer_s18 (metaformer)", "caformer_s18"),
        tm("timm regnetz_b16", "regnetz_b16"),
        tm("timm ese_vovnet19b_dw", "ese_vovnet19b_dw"),
        tm("timm ecaresnet26t (efficient channel attention)", "ecaresnet26t"),
        tm("timm gernet_s", "gernet_s"),
        tm("timm hgnet_tiny", "hgnet_tiny"),
        tm("timm repvgg_a0", "repvgg_a0"),
        tm("timm fasternet_t0 (partial conv)", "fasternet_t0"),
        tm("timm fastvit_mci0", "fastvit_mci0"),
        tm("timm resnetv2_18 (pre-activation)", "resnetv2_18"),
        tm(
            "timm vit rope (mixed axial)",
            "vit_small_patch16_rope_mixed_224",
            images((2, 32), (1, 32), (3, 32), (2, 48)),
            img_size=32,
            patch_size=8,
            embed_dim=32,
            depth=2,
            num_heads=2,
            dynamic_img_size=True,
        ),
        tm("timm csatv2", "csatv2"),
    ]


def _torchvision_ninth() -> list[Case]:
    tv = "torchvision"
    return [
        Case(
            "efficientnet_v2_s",
            CLS,
            tv,
            _tv("efficientnet_v2_s", num_classes=10),
            IMG,
        ),
        Case(
            "mvit_v2_s (video, small)",
            "vision/video",
            tv,
            _mvit_video(),
            _video((2, 4, 64), (1, 4, 64), (3, 4, 64)),
        ),
        Case(
            "fasterrcnn_mobilenet_v3_large_320_fpn (two-stage detector)",
            "vision/detection",
            tv,
            lambda: Detection(
                _tv(
                    "fasterrcnn_mobilenet_v3_large_320_fpn",
                    weights_backbone=None,
                    num_classes=3,
                )()
            ),
            DET,
        ),
    ]


def _mvit_video():
    def build():
        from torchvision.models.video import mvit

        config = [
            mvit.MSBlockConfig(
                num_heads=1,
                input_channels=16,
                output_channels=16,
                kernel_q=[3, 3, 3],
                kernel_kv=[3, 3, 3],
                stride_q=[1, 1, 1],
                stride_kv=[1, 4, 4],
            ),
            mvit.MSBlockConfig(
                num_heads=2,
                input_channels=16,
                output_channels=32,
                kernel_q=[3, 3, 3],
                kernel_kv=[3, 3, 3],
                stride_q=[1, 2, 2],
                stride_kv=[1, 2, 2],
            ),
        ]
        return mvit.MViT(
            spatial_size=(64, 64),
            temporal_size=4,
            block_setting=config,
            residual_pool=True,
            residual_with_cls_embed=False,
            rel_pos_embed=True,
            proj_after_attn=True,
            num_classes=10,
        )

    return build


def _audio_text_ids() -> list[tuple]:
    out = []
    for i, (b, n, d) in enumerate([(2, 1600, 4), (1, 1600, 4), (3, 1200, 2)]):
        decoder = torch.randint(4, VOCAB, (b, d), generator=_gen(70 + i))
        out.append((torch.randn(b, n, generator=_gen(i)), decoder))
    return out


def _speech() -> list[Case]:
    return [
        Case(
            "moonshine (speech to text, rotary)",
            "speech",
            HF_,
            _hf(
                "MoonshineConfig",
                "MoonshineModel",
                ("input_values", "decoder_input_ids"),
                NO_CACHE,
                vocab_size=VOCAB,
                hidden_size=32,
                intermediate_size=64,
                encoder_num_hidden_layers=2,
                decoder_num_hidden_layers=2,
                encoder_num_attention_heads=2,
                decoder_num_attention_heads=2,
                max_position_embeddings=128,
                pad_token_id=1,
            ),
            _audio_text_ids,
        ),
    ]


def ninth_cases() -> list[Case]:
    """Every case of the ninth round."""
    return (
        _decoders()
        + _encoders()
        + _seq2seq_cases()
        + _hf_vision()
        + _multimodal()
        + _speech()
        + _timm_ninth()
        + _torchvision_ninth()
    )


def tenth_cases() -> list[Case]:
    """The same round's harder patterns (codecs, native-aspect patches, layout, trajectories,
    2d rotary positions), run after the first part."""
    return _harder() + _timm_harder()


# --- harder patterns of the same round ------------------------------------------------------


def _boxes(b: int, n: int, seed: int) -> torch.Tensor:
    corner = torch.randint(0, 500, (b, n, 2), generator=_gen(30 + seed))
    size = torch.randint(0, 500, (b, n, 2), generator=_gen(40 + seed))
    return torch.cat([corner, corner + size], -1)


def _layout_text() -> list[tuple]:
    out = []
    for i, (b, n, pad) in enumerate([(2, 8, 0), (1, 8, 0), (3, 5, 0), (2, 8, 3)]):
        ids, mask = tokens(b, n, i, pad)
        out.append((ids, _boxes(b, n, i), mask))
    return out


def _flattened_patches() -> list[tuple]:
    """Pix2Struct's input: rows of (row, column, patch pixels), padded rows masked."""
    out = []
    for i, (b, n, pad) in enumerate([(2, 12, 0), (1, 12, 0), (3, 8, 2)]):
        g = _gen(i)
        pixels = torch.randn(b, n, 4 * 4 * 3, generator=g)
        rows = torch.arange(n).div(4, rounding_mode="floor").float() + 1
        cols = torch.arange(n).remainder(4).float() + 1
        place = torch.stack([rows, cols], -1).expand(b, n, 2)
        mask = torch.ones(b, n)
        if pad:
            mask[0, n - pad :] = 0
        out.append((torch.cat([place, pixels], -1), mask))
    return out


def _trajectories() -> list[tuple]:
    """Decision transformer: states, actions, rewards, returns to go, timesteps, mask."""
    out = []
    for i, (b, n) in enumerate([(2, 6), (1, 6), (3, 4)]):
        g = _gen(i)
        out.append(
            (
                torch.randn(b, n, 5, generator=g),
                torch.randn(b, n, 3, generator=g),
                torch.randn(b, n, 1, generator=g),
                torch.randn(b, n, 1, generator=g),
                torch.randint(0, 20, (b, n), generator=g),
                torch.ones(b, n, dtype=torch.long),
            )
        )
    return out


def _series_values() -> list[tuple]:
    """TimesFM: past values, their padding (none) and a frequency class per series."""
    return [
        (
            torch.randn(b, n, generator=_gen(i)),
            torch.zeros(b, n),
            torch.zeros(b, 1, dtype=torch.long),
        )
        for i, (b, n) in enumerate([(2, 64), (1, 64), (3, 48)])
    ]


def _mel() -> list[tuple]:
    return [
        (torch.randn(b, 16, n, generator=_gen(i)),)
        for i, (b, n) in enumerate([(2, 40), (1, 40), (3, 24)])
    ]


def _features() -> list[tuple]:
    """Log-mel features (batch, frames, bins)."""
    return [
        (torch.randn(b, n, 16, generator=_gen(i)),)
        for i, (b, n) in enumerate([(2, 64), (1, 64), (3, 40)])
    ]


def _pixel_video() -> list[tuple]:
    """V-JEPA 2 takes (batch, frames, channels, height, width)."""
    return [
        (torch.randn(b, t, 3, s, s, generator=_gen(i)),)
        for i, (b, t, s) in enumerate([(2, 4, 32), (1, 4, 32), (3, 4, 32)])
    ]


def _harder() -> list[Case]:
    tiny_vit = dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=32,
        patch_size=8,
    )
    return [
        _dec(
            "gemma3n text (altup, laurel, per-layer inputs)",
            "Gemma3nTextConfig",
            "Gemma3nForCausalLM",
            head_dim=8,
            vocab_size_per_layer_input=VOCAB,
            hidden_size_per_layer_input=8,
            laurel_rank=4,
            altup_num_inputs=2,
            num_kv_shared_layers=0,
            sliding_window=4,
            layer_types=["sliding_attention", "full_attention"],
            intermediate_size=[64, 64],
            activation_sparsity_pattern=[0.95, 0.0],
        ),
        Case(
            "modernbert_decoder",
            DEC,
            HF_,
            _hf(
                "ModernBertDecoderConfig",
                "ModernBertDecoderForCausalLM",
                ENC,
                NO_CACHE,
                **(
                    SMALL_BERT
                    | dict(
                        local_attention=4,
                        global_attn_every_n_layers=2,
                        pad_token_id=1,
                        bos_token_id=2,
                        eos_token_id=3,
                        cls_token_id=2,
                        sep_token_id=3,
                    )
                ),
            ),
            text(),
        ),
        Case(
            "xlm_roberta_xl",
            ENC_KIND,
            HF_,
            _hf("XLMRobertaXLConfig", "XLMRobertaXLModel", ENC, **SMALL_BERT),
            text(),
        ),
        Case(
            "layoutlmv3 (text, boxes, 2d relative bias)",
            "document",
            HF_,
            _hf(
                "LayoutLMv3Config",
                "LayoutLMv3Model",
                ("input_ids", "bbox", "attention_mask"),
                **(
                    SMALL_BERT
                    | dict(coordinate_size=4, shape_size=8, max_2d_position_embeddings=1024)
                ),
            ),
            _layout_text,
        ),
        Case(
            "lilt (layout flow)",
            "document",
            HF_,
            _hf(
                "LiltConfig",
                "LiltModel",
                ("input_ids", "bbox", "attention_mask"),
                **(
                    SMALL_BERT
                    | dict(hidden_size=48, channel_shrink_ratio=2, max_2d_position_embeddings=1024)
                ),
            ),
            _layout_text,
        ),
        Case(
            "pix2struct vision (flattened patches)",
            "document",
            HF_,
            _hf(
                "Pix2StructVisionConfig",
                "Pix2StructVisionModel",
                ("flattened_patches", "attention_mask"),
                hidden_size=32,
                d_ff=64,
                d_kv=16,
                num_hidden_layers=2,
                num_attention_heads=2,
                patch_embed_hidden_size=48,
                seq_len=64,
            ),
            _flattened_patches,
        ),
        Case(
            "decision_transformer (trajectories)",
            "reinforcement learning",
            HF_,
            _hf(
                "DecisionTransformerConfig",
                "DecisionTransformerModel",
                ("states", "actions", "rewards", "returns_to_go", "timesteps", "attention_mask"),
                state_dim=5,
                act_dim=3,
                hidden_size=32,
                n_layer=2,
                n_head=2,
                max_ep_len=32,
                n_positions=64,
            ),
            _trajectories,
        ),
        Case(
            "timesfm (patched time series)",
            "time series",
            HF_,
            _hf(
                "TimesFmConfig",
                "TimesFmModel",
                ("past_values", "past_values_padding", "freq"),
                patch_length=8,
                context_length=64,
                horizon_length=8,
                hidden_size=32,
                intermediate_size=64,
                head_dim=16,
                num_hidden_layers=2,
                num_attention_heads=2,
            ),
            _series_values,
        ),
        Case(
            "dinov3 vit (2d rope, registers)",
            CLS,
            HF_,
            _hf_image(
                "DINOv3ViTConfig",
                "DINOv3ViTModel",
                hidden_size=32,
                intermediate_size=64,
                num_hidden_layers=2,
                num_attention_heads=2,
                image_size=32,
                patch_size=8,
                num_register_tokens=2,
            ),
            images((2, 32), (1, 32), (3, 32), (2, 48)),
        ),
        Case(
            "dinov3 convnext",
            CLS,
            HF_,
            _hf_image(
                "DINOv3ConvNextConfig",
                "DINOv3ConvNextModel",
                hidden_sizes=[16, 32, 48, 64],
                depths=[1, 1, 1, 1],
            ),
            IMG,
        ),
        Case(
            "sam vision encoder (windowed, rel pos)",
            "vision/segmentation",
            HF_,
            _hf_image(
                "SamVisionConfig",
                "SamVisionModel",
                hidden_size=32,
                output_channels=16,
                num_hidden_layers=2,
                num_attention_heads=2,
                mlp_dim=64,
                image_size=64,
                patch_size=8,
                window_size=4,
                global_attn_indexes=[1],
            ),
            images((2, 64), (1, 64), (3, 64)),
        ),
        Case(
            "mlcd vision (2d rope)",
            "multimodal/vision",
            HF_,
            _hf_image("MLCDVisionConfig", "MLCDVisionModel", **tiny_vit),
            images((2, 32), (1, 32), (3, 32)),
        ),
        Case(
            "siglip2 vision (naflex)",
            "multimodal/vision",
            HF_,
            lambda: _siglip2_vision(),
            _naflex_inputs,
        ),
        Case(
            "vjepa2 (video)",
            "vision/video",
            HF_,
            _hf(
                "VJEPA2Config",
                "VJEPA2Model",
                ("pixel_values_videos",),
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=2,
                mlp_ratio=2,
                crop_size=32,
                frames_per_clip=4,
                patch_size=8,
                tubelet_size=2,
                pred_hidden_size=16,
                pred_num_hidden_layers=1,
                pred_num_attention_heads=2,
                pred_num_mask_tokens=2,
            ),
            _pixel_video,
        ),
        Case(
            "dac (residual vector quantisation)",
            "speech/codec",
            HF_,
            lambda: _codec("DacConfig", "DacModel", _DAC),
            _audio_channel,
        ),
        Case(
            "parakeet encoder (fastconformer)",
            "speech",
            HF_,
            _hf(
                "ParakeetEncoderConfig",
                "ParakeetEncoder",
                ("input_features",),
                hidden_size=32,
                intermediate_size=64,
                num_hidden_layers=2,
                num_attention_heads=2,
                num_mel_bins=16,
                subsampling_conv_channels=8,
                conv_kernel_size=9,
            ),
            _features,
        ),
        Case(
            "univnet (vocoder, location-variable conv)",
            "speech/synthesis",
            HF_,
            _hf(
                "UnivNetConfig",
                "UnivNetModel",
                ("input_features",),
                model_in_channels=16,
                model_hidden_channels=8,
                num_mel_bins=16,
                resblock_stride_sizes=[8, 8],
                resblock_kernel_sizes=[3, 3],
                resblock_dilation_sizes=[[1, 3], [1, 3]],
                kernel_predictor_num_blocks=1,
                kernel_predictor_hidden_channels=16,
            ),
            _mel_frames,
        ),
    ]


def _mel_frames() -> list[tuple]:
    """UnivNet takes (batch, frames, mel bins)."""
    return [
        (torch.randn(b, n, 16, generator=_gen(i)),)
        for i, (b, n) in enumerate([(2, 12), (1, 12), (3, 8)])
    ]


_DAC = dict(
    encoder_hidden_size=8,
    downsampling_ratios=[2, 4],
    decoder_hidden_size=32,
    n_codebooks=4,
    codebook_size=16,
    codebook_dim=4,
    hidden_size=32,
)


def _codec(config: str, model: str, kwargs: dict):
    import transformers

    cfg = getattr(transformers, config)(**kwargs)
    return HF(getattr(transformers, model)(cfg), ("input_values",))


def _audio_channel() -> list[tuple]:
    return [
        (torch.randn(b, 1, n, generator=_gen(i)),)
        for i, (b, n) in enumerate([(2, 640), (1, 640), (3, 480)])
    ]


def _siglip2_vision():
    import transformers

    cfg = transformers.Siglip2VisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_patches=16,
        patch_size=8,
    )
    return HF(
        transformers.Siglip2VisionModel(cfg),
        ("pixel_values", "pixel_attention_mask", "spatial_shapes"),
    )


def _naflex_inputs() -> list[tuple]:
    """Patches of images of native aspect (rows x columns of patches, padded to 16)."""
    out = []
    for i, (b, shape) in enumerate([(2, (4, 4)), (1, (4, 4)), (3, (2, 8)), (2, (3, 5))]):
        n = shape[0] * shape[1]
        pixels = torch.randn(b, 16, 8 * 8 * 3, generator=_gen(i))
        mask = torch.zeros(b, 16, dtype=torch.long)
        mask[:, :n] = 1
        out.append((pixels, mask, torch.tensor([shape] * b)))
    return out


def _timm_harder() -> list[Case]:
    t = "timm"

    def tm(name, model, inputs=IMG, **kwargs):
        return Case(name, CLS, t, _timm(model, num_classes=10, **kwargs), inputs)

    small_vit = dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2)
    return [
        tm(
            "timm deit distilled (two heads)",
            "deit_tiny_distilled_patch16_224",
            images((2, 32), (1, 32), (3, 32)),
            **small_vit,
        ),
        tm(
            "timm vit with registers (dynamic size)",
            "vit_little_patch16_reg1_gap_256",
            images((2, 32), (1, 32), (3, 32), (2, 48)),
            dynamic_img_size=True,
            **small_vit,
        ),
        tm("timm hieradet_small (sam2 hiera)", "hieradet_small", images((2, 64), (1, 64), (3, 64))),
        tm("timm ghostnetv3_050", "ghostnetv3_050"),
        tm(
            "timm levit_conv_128s",
            "levit_conv_128s",
            images((2, 64), (1, 64), (3, 64)),
            img_size=64,
        ),
        tm("timm tinynet_e", "tinynet_e"),
        tm("timm hardcorenas_a", "hardcorenas_a"),
        tm("timm cspresnet50", "cspresnet50"),
        tm("timm resnet10t (tiered stem)", "resnet10t"),
        tm("timm test_byobnet", "test_byobnet"),
        tm("timm test_efficientnet_evos (evo norm)", "test_efficientnet_evos"),
        tm("timm test_vit4", "test_vit4", images((2, 160), (1, 160), (3, 160))),
    ]
