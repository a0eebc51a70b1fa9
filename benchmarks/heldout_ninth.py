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
SMALL_T5 = dict(
    vocab_size=VOCAB,
    d_model=32,
    d_kv=8,
    d_ff=64,
    num_layers=2,
    num_decoder_layers=2,
    num_heads=4,
    relative_attention_num_buckets=8,
    relative_attention_max_distance=16,
    decoder_start_token_id=0,
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
        _dec("cohere (parallel block)", "CohereConfig", "CohereForCausalLM"),
        _dec(
            "cohere2 (sliding window)",
            "Cohere2Config",
            "Cohere2ForCausalLM",
            sliding_window=4,
            layer_types=["sliding_attention", "full_attention"],
        ),
        _dec("olmo2 (qk norm)", "Olmo2Config", "Olmo2ForCausalLM", pad_token_id=1),
        _dec("helium", "HeliumConfig", "HeliumForCausalLM", head_dim=8, pad_token_id=1),
        _dec(
            "glm4 (interleaved rotary)", "Glm4Config", "Glm4ForCausalLM", head_dim=8, pad_token_id=1
        ),
        _dec(
            "nemotron (relu2, partial rotary)", "NemotronConfig", "NemotronForCausalLM", head_dim=8
        ),
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
        s2s("umt5 (per-layer relative bias)", "UMT5Config", "UMT5Model", **SMALL_T5),
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
            "hf levit (attention biases)",
            CLS,
            HF_,
            _hf_image(
                "LevitConfig",
                "LevitForImageClassification",
                image_size=64,
                hidden_sizes=[32, 48, 64],
                num_attention_heads=[1, 2, 2],
                depths=[1, 1, 1],
                key_dim=[8, 8, 8],
                num_labels=10,
            ),
            images((2, 64), (1, 64), (3, 64)),
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
