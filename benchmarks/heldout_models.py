"""Held-out models: published architectures that ``zoo_models.py`` does NOT hold.

The zoo (``make zoo``) is what tracebridge is developed against; these cases are the check
"from outside": kinds the zoo lacks, traced by ``benchmarks/heldout.py`` with tracebridge and
``torch.jit.trace`` side by side. They are built the zoo's way (random weights, tiny
configurations, offline) from the same helpers, so a case that proves worth keeping moves to
``zoo_models.py`` unchanged. A test (``heldout.py --check-names``) keeps the two lists
disjoint.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from heldout_eleventh import eleventh_round
from heldout_ninth import ninth_cases, tenth_cases
from heldout_tenth import tenth_round
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
    TINY_VIT,
    VOCAB,
    Case,
    Detection,
    Segmentation,
    _audio,
    _gen,
    _hf,
    _hf_detr,
    _hf_image,
    _timm,
    _timm_class,
    _tv,
    _tv_class,
    _video,
    image,
    images,
    live,
    seq2seq,
    text,
    tokens,
)

# Hierarchical models that downsample by 32: sizes that are multiples of 32.
IMG64 = images((2, 64), (1, 64), (3, 64), (2, 96))


SMALL_AUDIO = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    conv_dim=(16, 16),
    conv_stride=(5, 2),
    conv_kernel=(10, 3),
    num_conv_pos_embeddings=16,
    num_conv_pos_embedding_groups=2,
    vocab_size=VOCAB,
)
AUDIO = _audio((2, 400), (1, 400), (3, 320), (1, 200))


def _ast_inputs() -> list[tuple]:
    # The audio spectrogram transformer takes exactly ``max_length`` frames: batch varies.
    return [(torch.randn(b, 32, 16, generator=_gen(i)),) for i, b in enumerate((2, 1, 3))]


def _timm_cases() -> list[Case]:
    t, cls = "timm", "vision/classification"
    return [
        Case("timm convnextv2_atto", cls, t, _timm("convnextv2_atto", num_classes=10), IMG),
        Case(
            "timm coatnet (small)",
            cls,
            t,
            _timm("coatnet_nano_rw_224", img_size=64, num_classes=10),
            images((2, 64), (1, 64), (3, 64)),
        ),
        Case("timm mobilevitv2_050", cls, t, _timm("mobilevitv2_050", num_classes=10), IMG),
        Case(
            "timm efficientformerv2_s0",
            cls,
            t,
            _timm("efficientformerv2_s0", img_size=64, num_classes=10),
            images((2, 64), (1, 64), (3, 64)),
        ),
        Case("timm poolformer_s12", cls, t, _timm("poolformer_s12", num_classes=10), IMG),
        Case("timm regnety_002", cls, t, _timm("regnety_002", num_classes=10), IMG),
        Case("timm nf_regnet_b0 (nfnet)", cls, t, _timm("nf_regnet_b0", num_classes=10), IMG),
        Case(
            "timm xcit (small)",
            cls,
            t,
            _timm_class("xcit", "Xcit", **TINY_VIT),
            IMG32,
        ),
        Case(
            "timm twins_pcpvt (small)",
            cls,
            t,
            _timm_class(
                "twins",
                "Twins",
                img_size=64,
                embed_dims=(16, 32, 32, 64),
                num_heads=(1, 2, 2, 4),
                depths=(1, 1, 1, 1),
                num_classes=10,
            ),
            IMG64,
        ),
        Case(
            "timm focalnet (small)",
            cls,
            t,
            _timm_class("focalnet", "FocalNet", embed_dim=16, depths=(1, 1, 1, 1), num_classes=10),
            IMG64,
        ),
        Case(
            "timm hiera (small)",
            cls,
            t,
            _timm_class(
                "hiera",
                "Hiera",
                img_size=(64, 64),
                embed_dim=16,
                stages=(1, 1, 1, 1),
                num_classes=10,
            ),
            images((2, 64), (1, 64), (3, 64)),
        ),
        Case("timm fastvit_t8", cls, t, _timm("fastvit_t8", num_classes=10), IMG64),
        Case(
            "timm tiny_vit (small)",
            cls,
            t,
            _timm_class(
                "tiny_vit",
                "TinyVit",
                embed_dims=(16, 32, 32, 64),
                depths=(1, 1, 1, 1),
                num_heads=(1, 2, 2, 4),
                window_sizes=(2, 2, 2, 2),
                num_classes=10,
            ),
            images((2, 64), (1, 64), (3, 64)),
        ),
        Case("timm edgenext_xx_small", cls, t, _timm("edgenext_xx_small", num_classes=10), IMG64),
        Case("timm repvit_m0_9", cls, t, _timm("repvit_m0_9", num_classes=10), IMG64),
        Case(
            "timm mobilenetv4_conv_small",
            cls,
            t,
            _timm("mobilenetv4_conv_small", num_classes=10),
            IMG64,
        ),
        Case(
            "timm davit (small)",
            cls,
            t,
            _timm_class(
                "davit",
                "DaVit",
                depths=(1, 1, 1, 1),
                embed_dims=(16, 32, 32, 64),
                num_heads=(1, 2, 2, 4),
                window_size=2,
                num_classes=10,
            ),
            IMG64,
        ),
        Case("timm efficientvit_b0 (mit)", cls, t, _timm("efficientvit_b0", num_classes=10), IMG64),
        Case(
            "timm efficientvit_m0 (msra)",
            cls,
            t,
            _timm("efficientvit_m0", img_size=64, num_classes=10),
            images((2, 64), (1, 64), (3, 64)),
        ),
        Case("timm mambaout_femto", cls, t, _timm("mambaout_femto", num_classes=10), IMG64),
        Case(
            "timm inception_next (atto)",
            cls,
            t,
            _timm("inception_next_atto", num_classes=10),
            IMG64,
        ),
        Case(
            "timm sequencer2d (lstm)",
            cls,
            t,
            _timm_class(
                "sequencer",
                "Sequencer2d",
                layers=(1, 1, 1, 1),
                embed_dims=(16, 32, 32, 32),
                hidden_sizes=(8, 16, 16, 16),
                num_classes=10,
            ),
            IMG64,
        ),
        Case(
            "timm pit (small)",
            cls,
            t,
            _timm_class(
                "pit",
                "PoolingVisionTransformer",
                img_size=64,
                patch_size=8,
                stride=4,
                base_dims=(16, 16),
                depth=(1, 1),
                heads=(2, 2),
                num_classes=10,
            ),
            images((2, 64), (1, 64), (3, 64)),
        ),
        Case("timm starnet_s1", cls, t, _timm("starnet_s1", num_classes=10), IMG64),
        Case("timm hgnetv2_b0", cls, t, _timm("hgnetv2_b0", num_classes=10), IMG64),
    ]


def _hf_text_cases() -> list[Case]:
    hf = "transformers"
    enc, dec, s2s = "language/encoder", "language/decoder", "language/encoder-decoder"
    tiny_dec = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4)
    return [
        Case(
            "gpt_neox",
            dec,
            hf,
            _hf(
                "GPTNeoXConfig",
                "GPTNeoXForCausalLM",
                ENC,
                NO_CACHE,
                intermediate_size=64,
                max_position_embeddings=64,
                **tiny_dec,
            ),
            text(),
        ),
        Case(
            "gptj",
            dec,
            hf,
            _hf(
                "GPTJConfig",
                "GPTJForCausalLM",
                ENC,
                NO_CACHE,
                vocab_size=VOCAB,
                n_embd=32,
                n_layer=2,
                n_head=4,
                rotary_dim=4,
                n_positions=64,
            ),
            text(),
        ),
        Case(
            "falcon",
            dec,
            hf,
            _hf("FalconConfig", "FalconForCausalLM", ENC, NO_CACHE, **tiny_dec),
            text(),
        ),
        Case(
            "qwen3",
            dec,
            hf,
            _hf("Qwen3Config", "Qwen3ForCausalLM", ENC, NO_CACHE, head_dim=8, **SMALL_DECODER),
            text(),
        ),
        Case(
            "phi3",
            dec,
            hf,
            _hf(
                "Phi3Config",
                "Phi3ForCausalLM",
                ENC,
                NO_CACHE,
                pad_token_id=1,
                bos_token_id=2,
                eos_token_id=3,
                **SMALL_DECODER,
            ),
            text(),
        ),
        Case(
            "stablelm (partial rotary)",
            dec,
            hf,
            _hf("StableLmConfig", "StableLmForCausalLM", ENC, NO_CACHE, **SMALL_DECODER),
            text(),
        ),
        Case(
            "olmo",
            dec,
            hf,
            _hf("OlmoConfig", "OlmoForCausalLM", ENC, NO_CACHE, pad_token_id=1, **SMALL_DECODER),
            text(),
        ),
        Case(
            "starcoder2",
            dec,
            hf,
            _hf("Starcoder2Config", "Starcoder2ForCausalLM", ENC, NO_CACHE, **SMALL_DECODER),
            text(),
        ),
        Case(
            "mpt (alibi)",
            dec,
            hf,
            _hf(
                "MptConfig",
                "MptForCausalLM",
                ENC,
                NO_CACHE,
                vocab_size=VOCAB,
                d_model=32,
                n_heads=4,
                n_layers=2,
                expansion_ratio=2,
                max_seq_len=64,
            ),
            text(),
        ),
        Case(
            "codegen",
            dec,
            hf,
            _hf(
                "CodeGenConfig",
                "CodeGenForCausalLM",
                ENC,
                NO_CACHE,
                vocab_size=VOCAB,
                n_embd=32,
                n_layer=2,
                n_head=4,
                rotary_dim=4,
                n_positions=64,
                n_ctx=64,
            ),
            text(),
        ),
        Case(
            "gpt_bigcode (multi-query)",
            dec,
            hf,
            _hf(
                "GPTBigCodeConfig",
                "GPTBigCodeForCausalLM",
                ENC,
                NO_CACHE,
                vocab_size=VOCAB,
                n_embd=32,
                n_layer=2,
                n_head=4,
                n_positions=64,
            ),
            text(),
        ),
        Case(
            "gemma2 (sliding, softcap)",
            dec,
            hf,
            _hf(
                "Gemma2Config",
                "Gemma2ForCausalLM",
                ENC,
                NO_CACHE,
                head_dim=8,
                sliding_window=4,
                **SMALL_DECODER,
            ),
            text(),
        ),
        Case(
            "xglm (sinusoidal)",
            dec,
            hf,
            _hf(
                "XGLMConfig",
                "XGLMForCausalLM",
                ENC,
                NO_CACHE,
                vocab_size=VOCAB,
                d_model=32,
                num_layers=2,
                attention_heads=2,
                ffn_dim=64,
                max_position_embeddings=64,
            ),
            text(),
        ),
        Case(
            "mamba (state space)",
            dec,
            hf,
            _hf(
                "MambaConfig",
                "MambaForCausalLM",
                ("input_ids",),
                NO_CACHE,
                vocab_size=VOCAB,
                hidden_size=32,
                state_size=8,
                num_hidden_layers=2,
            ),
            lambda: [(ids,) for ids, _ in (t for t in text()())],
        ),
        Case(
            "xlm_roberta",
            enc,
            hf,
            _hf("XLMRobertaConfig", "XLMRobertaModel", ENC, **SMALL_BERT),
            text(),
        ),
        Case(
            "mobilebert (bottleneck)",
            enc,
            hf,
            _hf(
                "MobileBertConfig",
                "MobileBertModel",
                ENC,
                vocab_size=VOCAB,
                hidden_size=32,
                embedding_size=16,
                intra_bottleneck_size=16,
                true_hidden_size=16,
                num_attention_heads=2,
                intermediate_size=32,
                num_hidden_layers=2,
                num_feedforward_networks=2,
                max_position_embeddings=64,
            ),
            text(),
        ),
        Case(
            "squeezebert (grouped conv)",
            enc,
            hf,
            _hf(
                "SqueezeBertConfig",
                "SqueezeBertModel",
                ENC,
                embedding_size=32,
                q_groups=2,
                k_groups=2,
                v_groups=2,
                post_attention_groups=2,
                intermediate_groups=2,
                output_groups=2,
                **SMALL_BERT,
            ),
            text(),
        ),
        Case(
            "convbert (span conv)",
            enc,
            hf,
            _hf(
                "ConvBertConfig",
                "ConvBertModel",
                ENC,
                embedding_size=32,
                conv_kernel_size=3,
                **SMALL_BERT,
            ),
            text(),
        ),
        Case(
            "data2vec_text",
            enc,
            hf,
            _hf("Data2VecTextConfig", "Data2VecTextModel", ENC, **SMALL_BERT),
            text(),
        ),
        Case(
            "fnet (fourier)",
            enc,
            hf,
            _hf(
                "FNetConfig",
                "FNetModel",
                ("input_ids",),
                vocab_size=VOCAB,
                hidden_size=32,
                num_hidden_layers=2,
                intermediate_size=64,
                max_position_embeddings=64,
                use_tpu_fourier_optimizations=False,
            ),
            lambda: [(ids,) for ids, _ in (t for t in text()())],
        ),
        Case(
            "mbart",
            s2s,
            hf,
            _hf(
                "MBartConfig",
                "MBartModel",
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
            ),
            seq2seq(),
        ),
        Case(
            "marian (sinusoidal)",
            s2s,
            hf,
            _hf(
                "MarianConfig",
                "MarianModel",
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
                pad_token_id=1,
                decoder_start_token_id=1,
            ),
            seq2seq(),
        ),
    ]


def _hf_other_cases() -> list[Case]:
    hf = "transformers"
    return [
        Case(
            "unispeech",
            "speech",
            hf,
            _hf("UniSpeechConfig", "UniSpeechModel", ("input_values",), **SMALL_AUDIO),
            AUDIO,
        ),
        Case(
            "unispeech_sat",
            "speech",
            hf,
            _hf("UniSpeechSatConfig", "UniSpeechSatModel", ("input_values",), **SMALL_AUDIO),
            AUDIO,
        ),
        Case(
            "audio spectrogram transformer",
            "speech",
            hf,
            _hf(
                "ASTConfig",
                "ASTModel",
                ("input_values",),
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=2,
                intermediate_size=64,
                patch_size=8,
                frequency_stride=8,
                time_stride=8,
                max_length=32,
                num_mel_bins=16,
            ),
            _ast_inputs,
        ),
        Case(
            "dinov2",
            "vision/classification",
            hf,
            _hf_image(
                "Dinov2Config",
                "Dinov2Model",
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=2,
                mlp_ratio=2,
                image_size=32,
                patch_size=8,
            ),
            IMG32,
        ),
        Case(
            "bit (weight standardization)",
            "vision/classification",
            hf,
            _hf_image(
                "BitConfig",
                "BitForImageClassification",
                embedding_size=32,
                hidden_sizes=[128, 128, 128, 128],
                depths=[1, 1, 1, 1],
                num_labels=10,
            ),
            IMG,
        ),
        Case(
            "hf mobilevit",
            "vision/classification",
            hf,
            _hf_image(
                "MobileViTConfig",
                "MobileViTForImageClassification",
                image_size=64,
                hidden_sizes=[32, 48, 64],
                neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64],
                num_labels=10,
            ),
            IMG,
        ),
    ]


def _torchvision_cases() -> list[Case]:
    tv, cls = "torchvision", "vision/classification"
    return [
        Case("mobilenet_v2", cls, tv, _tv("mobilenet_v2", num_classes=10), IMG),
        Case("alexnet", cls, tv, _tv("alexnet", num_classes=10), images((2, 64), (1, 64), (3, 96))),
        Case(
            "resnext (small)",
            cls,
            tv,
            _tv_class_lazy(
                "ResNet",
                block=_bottleneck,
                layers=[1, 1, 1, 1],
                groups=4,
                width_per_group=8,
                num_classes=10,
            ),
            IMG,
        ),
        Case(
            "inception_v3",
            cls,
            tv,
            _tv("inception_v3", num_classes=10, aux_logits=False, init_weights=False),
            images((2, 80), (1, 80), (2, 96)),
        ),
        Case(
            "maxvit_t (small)",
            cls,
            tv,
            _tv_class(
                "MaxVit",
                input_size=(64, 64),
                stem_channels=16,
                partition_size=2,
                block_channels=[16, 32],
                block_layers=[1, 1],
                head_dim=8,
                stochastic_depth_prob=0.0,
                num_classes=10,
            ),
            images((2, 64), (1, 64), (3, 64)),
        ),
        Case(
            "swin_v2_t (small)",
            cls,
            tv,
            _tv_class_lazy(
                "SwinTransformer",
                patch_size=[4, 4],
                embed_dim=16,
                depths=[1, 1],
                num_heads=[1, 2],
                window_size=[4, 4],
                block=_swin_v2_block,
                downsample_layer=_swin_v2_merging,
                num_classes=10,
            ),
            IMG,
        ),
        Case(
            "fcn_resnet50 (segmentation)",
            "vision/segmentation",
            tv,
            _segmentation(
                _tv("fcn_resnet50", num_classes=3, weights_backbone=None, aux_loss=False)
            ),
            images((2, 64), (1, 64), (2, 80)),
        ),
        Case(
            "r2plus1d_18 (video)",
            "vision/video",
            tv,
            _tv("r2plus1d_18", num_classes=10),
            _video((2, 4, 32), (1, 4, 32), (2, 8, 48)),
        ),
    ]


def _segmentation(build: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    """torchvision's segmentation models return a dict: a user keeps its "out"."""
    return lambda: Segmentation(build())


def _tv_class_lazy(cls: str, **kwargs) -> Callable[[], nn.Module]:
    """``_tv_class`` whose callable arguments are torchvision classes looked up at build
    time: the case list is made without torchvision (CI has none)."""

    def build():
        resolved = {k: v() if callable(v) and k in _TV_LAZY else v for k, v in kwargs.items()}
        return _tv_class(cls, **resolved)()

    return build


_TV_LAZY = frozenset({"block", "downsample_layer"})


def _bottleneck():
    import torchvision.models.resnet as resnet

    return resnet.Bottleneck


def _swin_v2_block():
    import torchvision.models.swin_transformer as swin

    return swin.SwinTransformerBlockV2


def _swin_v2_merging():
    import torchvision.models.swin_transformer as swin

    return swin.PatchMergingV2


def _swin3d(**kwargs) -> Callable[[], nn.Module]:
    def build():
        from torchvision.models.video import swin_transformer

        return swin_transformer.SwinTransformer3d(**kwargs)

    return build


def _mvitv2():
    def build():
        from timm.models import mvitv2

        cfg = mvitv2.MultiScaleVitCfg(
            depths=(1, 1), embed_dim=(16, 32), num_heads=(1, 2), stride_q=((1, 1), (2, 2))
        )
        return mvitv2.MultiScaleVit(cfg, img_size=(64, 64), num_classes=10)

    return build


def _harder_cases() -> list[Case]:
    """A second round: kinds whose code is further from the zoo's (data-dependent routing,
    padding computed from sizes, local and global attention mixes, video, time series)."""
    t, hf, tv, cls = "timm", "transformers", "torchvision", "vision/classification"
    return [
        Case("timm res2net (split loop)", cls, t, _timm("res2net50_14w_8s", num_classes=10), IMG),
        Case("timm resnest14d (split attention)", cls, t, _timm("resnest14d", num_classes=10), IMG),
        Case(
            "timm volo (outlook)",
            cls,
            t,
            _timm_class(
                "volo",
                "VOLO",
                layers=[1, 1, 1, 1],
                img_size=64,
                embed_dims=[32, 64, 64, 64],
                num_heads=[1, 2, 2, 2],
                stem_hidden_dim=16,
                num_classes=10,
            ),
            images((2, 64), (1, 64), (3, 64)),
        ),
        Case(
            "timm nest (small)",
            cls,
            t,
            _timm_class(
                "nest",
                "Nest",
                img_size=32,
                embed_dims=(16, 32, 32),
                num_heads=(1, 2, 2),
                depths=(1, 1, 1),
                num_classes=10,
            ),
            images((2, 32), (1, 32), (3, 32)),
        ),
        Case(
            "timm sam vit (windowed, rel pos)",
            cls,
            t,
            _timm_class(
                "vision_transformer_sam",
                "VisionTransformerSAM",
                img_size=64,
                patch_size=8,
                embed_dim=32,
                depth=2,
                num_heads=2,
                window_size=3,
                global_attn_indexes=(1,),
                use_rel_pos=True,
                neck_chans=16,
                num_classes=10,
                global_pool="avg",
            ),
            images((2, 64), (1, 64), (3, 64)),
        ),
        Case(
            "timm mvitv2 (pooling attention)", cls, t, _mvitv2(), images((2, 64), (1, 64), (3, 64))
        ),
        Case(
            "timm gcvit (small)",
            cls,
            t,
            _timm_class(
                "gcvit",
                "GlobalContextVit",
                img_size=64,
                window_size=(2, 2, 2, 2),
                embed_dim=16,
                depths=(1, 1, 1, 1),
                num_heads=(1, 2, 2, 4),
                num_classes=10,
            ),
            images((2, 64), (1, 64), (3, 64)),
        ),
        Case(
            "swin3d (video, small)",
            "vision/video",
            tv,
            _swin3d(
                patch_size=[2, 4, 4],
                embed_dim=16,
                depths=[1, 1],
                num_heads=[1, 2],
                window_size=[2, 4, 4],
                stochastic_depth_prob=0.0,
                num_classes=10,
            ),
            _video((2, 4, 32), (1, 4, 32), (2, 6, 40)),
        ),
        Case(
            "canine (character)",
            "language/encoder",
            hf,
            _hf(
                "CanineConfig",
                "CanineModel",
                ENC,
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=2,
                intermediate_size=64,
                downsampling_rate=2,
                num_hash_buckets=64,
                local_transformer_stride=4,
                max_position_embeddings=128,
            ),
            text([(2, 8, 0), (1, 8, 0), (3, 6, 0), (2, 8, 3), (1, 12, 2)]),
        ),
        Case(
            "deberta (v1)",
            "language/encoder",
            hf,
            _hf("DebertaConfig", "DebertaModel", ENC, relative_attention=True, **SMALL_BERT),
            text(),
        ),
        Case(
            "nystromformer",
            "language/encoder",
            hf,
            _hf(
                "NystromformerConfig",
                "NystromformerModel",
                ("input_ids",),
                num_landmarks=4,
                segment_means_seq_len=8,
                conv_kernel_size=3,
                **SMALL_BERT,
            ),
            # Its landmarks need exactly segment_means_seq_len tokens, and it fails with a
            # mask that has padding (eager too): ids alone, of that length.
            lambda: [(ids,) for ids, _ in text([(2, 8, 0), (1, 8, 0), (3, 8, 0)])()],
        ),
        Case(
            "longt5 (transient global)",
            "language/encoder-decoder",
            hf,
            _hf(
                "LongT5Config",
                "LongT5Model",
                ENC_DEC,
                NO_CACHE,
                vocab_size=VOCAB,
                d_model=32,
                d_kv=16,
                d_ff=64,
                num_layers=2,
                num_heads=2,
                encoder_attention_type="transient-global",
                local_radius=2,
                global_block_size=4,
            ),
            seq2seq(),
        ),
        Case(
            "pegasus_x (block local)",
            "language/encoder-decoder",
            hf,
            _hf(
                "PegasusXConfig",
                "PegasusXModel",
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
                num_global_tokens=2,
                block_size=4,
                max_position_embeddings=64,
            ),
            seq2seq([(2, 8, 0), (1, 8, 0), (3, 12, 0), (2, 8, 3), (1, 4, 0)]),
        ),
        Case(
            "switch_transformers (MoE)",
            "language/encoder-decoder",
            hf,
            _hf(
                "SwitchTransformersConfig",
                "SwitchTransformersModel",
                ENC_DEC,
                NO_CACHE,
                vocab_size=VOCAB,
                d_model=32,
                d_kv=16,
                d_ff=64,
                num_layers=2,
                num_decoder_layers=2,
                num_heads=2,
                num_experts=4,
                expert_capacity=4,
                num_sparse_encoder_layers=1,
                num_sparse_decoder_layers=1,
            ),
            seq2seq(),
        ),
        Case(
            "prophetnet (n-gram)",
            "language/encoder-decoder",
            hf,
            _hf(
                "ProphetNetConfig",
                "ProphetNetModel",
                ENC_DEC,
                NO_CACHE,
                vocab_size=VOCAB,
                hidden_size=32,
                encoder_ffn_dim=64,
                decoder_ffn_dim=64,
                num_encoder_layers=2,
                num_decoder_layers=2,
                num_encoder_attention_heads=2,
                num_decoder_attention_heads=2,
                ngram=2,
                num_buckets=8,
                max_position_embeddings=64,
            ),
            seq2seq(),
        ),
        Case(
            "olmoe (MoE)",
            "language/decoder",
            hf,
            _hf(
                "OlmoeConfig",
                "OlmoeForCausalLM",
                ENC,
                NO_CACHE,
                num_experts=4,
                num_experts_per_tok=2,
                pad_token_id=1,
                **SMALL_DECODER,
            ),
            text(),
        ),
        Case(
            "recurrent_gemma (linear recurrence)",
            "language/decoder",
            hf,
            _hf(
                "RecurrentGemmaConfig",
                "RecurrentGemmaForCausalLM",
                ("input_ids",),
                NO_CACHE,
                vocab_size=VOCAB,
                hidden_size=32,
                lru_width=32,
                num_hidden_layers=2,
                num_attention_heads=2,
                num_key_value_heads=1,
                intermediate_size=64,
                attention_window_size=4,
                block_types=["recurrent", "attention"],
            ),
            lambda: [(ids,) for ids, _ in text()()],
        ),
        Case(
            "speech_to_text",
            "speech",
            hf,
            _hf(
                "Speech2TextConfig",
                "Speech2TextModel",
                ("input_features", "attention_mask", "decoder_input_ids"),
                NO_CACHE,
                vocab_size=VOCAB,
                d_model=32,
                encoder_layers=2,
                decoder_layers=2,
                encoder_attention_heads=2,
                decoder_attention_heads=2,
                encoder_ffn_dim=64,
                decoder_ffn_dim=64,
                input_feat_per_channel=16,
                conv_channels=32,
                num_conv_layers=2,
                max_source_positions=64,
                max_target_positions=64,
            ),
            _s2t_inputs,
        ),
        Case(
            "vivit (video)",
            "vision/video",
            hf,
            _hf_image(
                "VivitConfig",
                "VivitModel",
                image_size=32,
                num_frames=4,
                tubelet_size=[2, 8, 8],
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=2,
                intermediate_size=64,
            ),
            lambda: [
                (torch.randn(b, 4, 3, 32, 32, generator=_gen(i)),) for i, b in enumerate((2, 1, 3))
            ],
        ),
    ]


def _third_cases() -> list[Case]:
    """A third round: lambda layers and fixed-size relative positions, padding that TensorFlow
    computes from the input size, vector quantisation, detectors that make anchors per
    feature-map size, and time series."""
    t, hf, cls = "timm", "transformers", "vision/classification"
    return [
        Case(
            "timm lambda_resnet26t (lambda layer)",
            cls,
            t,
            _timm("lambda_resnet26t", num_classes=10),
            IMG64,
        ),
        Case(
            "timm botnet26t (fixed-size rel pos)",
            cls,
            t,
            _timm("botnet26t_256", img_size=64, num_classes=10),
            images((2, 64), (1, 64), (3, 64)),
        ),
        Case(
            "timm tf_mixnet_s (same padding, mixed conv)",
            cls,
            t,
            _timm("tf_mixnet_s", num_classes=10),
            images((2, 64), (1, 64), (3, 65), (2, 97)),
        ),
        Case(
            "timm skresnet18 (selective kernel)", cls, t, _timm("skresnet18", num_classes=10), IMG
        ),
        Case("timm dpn68 (dual path)", cls, t, _timm("dpn68", num_classes=10), IMG),
        Case(
            "timm eva02_tiny (rope, swiglu)",
            cls,
            t,
            _timm("eva02_tiny_patch14_224", img_size=56, dynamic_img_size=True, num_classes=10),
            images((2, 56), (1, 56), (3, 56), (2, 84)),
        ),
        Case(
            "timm vit_relpos (small)",
            cls,
            t,
            _timm(
                "vit_relpos_small_patch16_224",
                img_size=32,
                patch_size=8,
                embed_dim=32,
                depth=2,
                num_heads=2,
                num_classes=10,
            ),
            images((2, 32), (1, 32), (3, 32)),
        ),
        Case("timm repghostnet_050", cls, t, _timm("repghostnet_050", num_classes=10), IMG64),
        Case(
            "timm swiftformer_xs",
            cls,
            t,
            _timm("swiftformer_xs", num_classes=10),
            IMG64,
        ),
        Case("timm tresnet_m (space to depth)", cls, t, _timm("tresnet_m", num_classes=10), IMG64),
        Case(
            "hf mobilenet_v2 (tf padding)",
            cls,
            hf,
            _hf_image(
                "MobileNetV2Config",
                "MobileNetV2ForImageClassification",
                depth_multiplier=0.35,
                image_size=64,
                tf_padding=True,
                num_labels=10,
                # At the default 0.02 its 17 layers shrink the logits to about 1e-25: every
                # padding compares as right. At 0.3 they are O(10), so a padding baked for
                # another image size (torch.jit.trace's) shows as wrong.
                initializer_range=0.3,
            ),
            # The padding branches on each stride-2 layer's input parity: 96 has the
            # example's parities at every layer, 65 and 97 do not.
            images((2, 64), (1, 64), (2, 96), (3, 65), (2, 97)),
        ),
        Case(
            "hf efficientnet",
            cls,
            hf,
            _hf_image(
                "EfficientNetConfig",
                "EfficientNetForImageClassification",
                width_coefficient=0.25,
                depth_coefficient=0.25,
                image_size=64,
                hidden_dim=320,
                num_labels=10,
            ),
            images((2, 64), (1, 64), (3, 65), (2, 97)),
        ),
        Case(
            "data2vec_vision (rel pos bias)",
            cls,
            hf,
            _hf_image(
                "Data2VecVisionConfig",
                "Data2VecVisionModel",
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=2,
                intermediate_size=64,
                image_size=32,
                patch_size=8,
                use_relative_position_bias=True,
            ),
            images((2, 32), (1, 32), (3, 32)),
        ),
        Case(
            "rt_detr (detector)",
            "vision/detection-transformer",
            hf,
            _rt_detr(),
            images((2, 64), (1, 64), (3, 96)),
        ),
        Case(
            "xlm (flaubert)",
            "language/encoder",
            hf,
            _hf(
                "XLMConfig",
                "XLMModel",
                ENC,
                vocab_size=VOCAB,
                emb_dim=32,
                n_layers=2,
                n_heads=2,
                max_position_embeddings=64,
                sinusoidal_embeddings=True,
            ),
            text(),
        ),
        Case(
            "ctrl",
            "language/decoder",
            hf,
            _hf(
                "CTRLConfig",
                "CTRLLMHeadModel",
                ENC,
                NO_CACHE,
                vocab_size=VOCAB,
                n_embd=32,
                dff=64,
                n_layer=2,
                n_head=2,
                n_positions=64,
            ),
            text(),
        ),
        Case(
            "patchtst (time series)",
            "time series",
            hf,
            _hf(
                "PatchTSTConfig",
                "PatchTSTModel",
                ("past_values",),
                num_input_channels=3,
                context_length=32,
                patch_length=8,
                patch_stride=8,
                d_model=16,
                num_attention_heads=2,
                num_hidden_layers=2,
                ffn_dim=32,
            ),
            lambda: [(torch.randn(b, 32, 3, generator=_gen(i)),) for i, b in enumerate((2, 1, 3))],
        ),
        Case(
            "wav2vec2_bert (conformer)",
            "speech",
            hf,
            _hf(
                "Wav2Vec2BertConfig",
                "Wav2Vec2BertModel",
                ("input_features", "attention_mask"),
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=2,
                intermediate_size=64,
                feature_projection_input_dim=16,
                conv_depthwise_kernel_size=3,
                position_embeddings_type="relative_key",
                left_max_position_embeddings=8,
                right_max_position_embeddings=8,
                vocab_size=VOCAB,
            ),
            _w2v_bert_inputs,
        ),
    ]


def _w2v_bert_inputs() -> list[tuple]:
    out = []
    for i, (b, n, pad) in enumerate([(2, 20, 0), (1, 20, 0), (3, 12, 0), (2, 20, 5)]):
        mask = torch.ones(b, n, dtype=torch.long)
        if pad:
            mask[0, n - pad :] = 0
        out.append((torch.randn(b, n, 16, generator=_gen(i)), mask))
    return out


def _rt_detr():
    def build():
        import transformers

        backbone = transformers.RTDetrResNetConfig(
            embedding_size=16,
            hidden_sizes=[16, 32, 32, 64],
            depths=[1, 1, 1, 1],
            out_features=["stage2", "stage3", "stage4"],
        )
        cfg = transformers.RTDetrConfig(
            backbone_config=backbone,
            use_timm_backbone=False,
            use_pretrained_backbone=False,
            encoder_in_channels=[32, 32, 64],
            encoder_hidden_dim=32,
            encoder_ffn_dim=64,
            d_model=32,
            decoder_in_channels=[32, 32, 32],
            decoder_ffn_dim=64,
            decoder_layers=1,
            num_queries=10,
            num_labels=3,
            decoder_n_points=2,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
        )
        return HF(transformers.RTDetrForObjectDetection(cfg), ("pixel_values",))

    return build


def _s2t_inputs() -> list[tuple]:
    out = []
    for i, (b, n, d) in enumerate([(2, 24, 4), (1, 24, 4), (3, 16, 2), (1, 32, 1)]):
        feats = torch.randn(b, n, 16, generator=_gen(i))
        mask = torch.ones(b, n, dtype=torch.long)
        out.append((feats, mask, torch.randint(4, VOCAB, (b, d), generator=_gen(50 + i))))
    return out


def all_cases() -> list[Case]:
    """Every held-out model, vision first (no parameter all zeros: zoo_models.live)."""
    cases = (
        _timm_cases()
        + _torchvision_cases()
        + _hf_other_cases()
        + _hf_text_cases()
        + _harder_cases()
        + _third_cases()
        + _fourth_cases()
        + _fifth_cases()
        + _sixth_cases()
        + _seventh_cases()
        + _eighth_cases()
        + ninth_cases()
        + tenth_cases()
        + tenth_round()
        + eleventh_round()
    )
    return [live(case) for case in cases]


# --- a fourth round ----------------------------------------------------------------------------


def _fourth_cases() -> list[Case]:
    """A fourth round: multi-scale and nested vision transformers, multi-resolution and MLP
    networks, a one-stage detector (non-maximum suppression), time series, text with layout
    boxes, image-text models, video, speech-to-text, depth and segmentation heads."""
    t, hf, cls = "timm", "transformers", "vision/classification"
    return [
        Case(
            "timm crossvit (multi-scale)",
            cls,
            t,
            _timm("crossvit_tiny_240", img_size=120, num_classes=10),
            images((2, 120), (1, 120), (3, 120)),
        ),
        Case(
            "timm tnt (pixels in patches)",
            cls,
            t,
            _timm("tnt_s_patch16_224", img_size=32, depth=2, num_classes=10),
            images((2, 32), (1, 32), (3, 32)),
        ),
        Case(
            "timm coat_lite_tiny (conv attention)",
            cls,
            t,
            _timm("coat_lite_tiny", img_size=64, num_classes=10),
            images((2, 64), (1, 64), (3, 64)),
        ),
        Case(
            "timm hrnet_w18_small (multi-resolution)",
            cls,
            t,
            _timm("hrnet_w18_small", num_classes=10),
            IMG64,
        ),
        Case(
            "timm resmlp (affine mlp)",
            cls,
            t,
            _timm("resmlp_12_224", img_size=32, num_classes=10),
            images((2, 32), (1, 32), (3, 32)),
        ),
        Case(
            "timm visformer_tiny",
            cls,
            t,
            _timm("visformer_tiny", img_size=64, num_classes=10),
            images((2, 64), (1, 64), (3, 64)),
        ),
        Case(
            "fcos_resnet50_fpn (detector, nms)",
            "vision/detection",
            "torchvision",
            lambda: Detection(
                _tv(
                    "fcos_resnet50_fpn",
                    weights_backbone=None,
                    num_classes=3,
                    min_size=96,
                    max_size=128,
                    topk_candidates=50,
                )()
            ),
            DET,
        ),
        Case(
            "patchtsmixer (time series)",
            "time series",
            hf,
            _hf(
                "PatchTSMixerConfig",
                "PatchTSMixerModel",
                ("past_values",),
                context_length=32,
                patch_length=8,
                patch_stride=8,
                num_input_channels=3,
                d_model=16,
                num_layers=2,
            ),
            lambda: [(torch.randn(b, 32, 3, generator=_gen(i)),) for i, b in enumerate((2, 1, 3))],
        ),
        Case(
            "time_series_transformer (lags)",
            "time series",
            hf,
            _hf(
                "TimeSeriesTransformerConfig",
                "TimeSeriesTransformerModel",
                ("past_values", "past_time_features", "past_observed_mask", "future_time_features"),
                prediction_length=4,
                context_length=12,
                lags_sequence=[1, 2],
                num_time_features=2,
                d_model=16,
                encoder_layers=1,
                decoder_layers=1,
                encoder_attention_heads=2,
                decoder_attention_heads=2,
                encoder_ffn_dim=32,
                decoder_ffn_dim=32,
            ),
            _series(14, 4),
        ),
        Case(
            "layoutlm (text and layout boxes)",
            "multimodal/document",
            hf,
            _hf(
                "LayoutLMConfig",
                "LayoutLMModel",
                ("input_ids", "bbox", "attention_mask"),
                **SMALL_BERT,
            ),
            _layout_inputs,
        ),
        Case(
            "vilt (image and text)",
            "multimodal",
            hf,
            _hf(
                "ViltConfig",
                "ViltModel",
                ("input_ids", "pixel_values", "attention_mask"),
                max_image_length=-1,
                image_size=32,
                patch_size=8,
                **SMALL_BERT,
            ),
            _image_text_inputs,
        ),
        Case(
            "owlvit (open-vocabulary detector)",
            "vision/detection-transformer",
            hf,
            _owlvit(),
            _image_text_inputs,
        ),
        Case(
            "timesformer (video)",
            "vision/video",
            hf,
            _hf_image(
                "TimesformerConfig",
                "TimesformerModel",
                image_size=32,
                patch_size=8,
                num_frames=4,
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=2,
                intermediate_size=64,
            ),
            lambda: [
                (torch.randn(b, 4, 3, 32, 32, generator=_gen(i)),) for i, b in enumerate((2, 1, 3))
            ],
        ),
        Case(
            "speecht5 (speech to text)",
            "speech",
            hf,
            _hf(
                "SpeechT5Config",
                "SpeechT5ForSpeechToText",
                ("input_values", "attention_mask", "decoder_input_ids"),
                NO_CACHE,
                hidden_size=32,
                encoder_layers=2,
                decoder_layers=2,
                encoder_attention_heads=2,
                decoder_attention_heads=2,
                encoder_ffn_dim=64,
                decoder_ffn_dim=64,
                conv_dim=(16, 16),
                conv_stride=(5, 2),
                conv_kernel=(10, 3),
                num_conv_pos_embeddings=16,
                num_conv_pos_embedding_groups=2,
                vocab_size=VOCAB,
                max_speech_positions=256,
                max_text_positions=64,
            ),
            _speech_text_inputs,
        ),
        Case(
            "glpn (depth)",
            "vision/depth",
            hf,
            _hf_image(
                "GLPNConfig",
                "GLPNForDepthEstimation",
                hidden_sizes=[8, 16, 32, 64],
                depths=[1, 1, 1, 1],
                num_attention_heads=[1, 1, 2, 2],
                decoder_hidden_size=16,
            ),
            IMG64,
        ),
        Case(
            "informer (prob-sparse attention)",
            "time series",
            hf,
            _hf(
                "InformerConfig",
                "InformerModel",
                ("past_values", "past_time_features", "past_observed_mask", "future_time_features"),
                prediction_length=4,
                context_length=12,
                lags_sequence=[1, 2],
                num_time_features=2,
                d_model=16,
                encoder_layers=2,
                decoder_layers=1,
                encoder_attention_heads=2,
                decoder_attention_heads=2,
                encoder_ffn_dim=32,
                decoder_ffn_dim=32,
                attention_type="prob",
                sampling_factor=2,
                distil=True,
            ),
            _series(14, 4),
        ),
        Case("clap (audio and text)", "multimodal/audio", hf, _clap(), _audio_text_inputs),
        Case(
            "depth_anything (dinov2, dpt head)",
            "vision/depth",
            hf,
            _depth_anything(),
            images((2, 28), (1, 28), (3, 28), (2, 42)),
        ),
        Case(
            "upernet (segmentation head)",
            "vision/segmentation",
            hf,
            _upernet(),
            IMG64,
        ),
    ]


def _series(length: int, pred: int):
    """Past values, time features and an observed mask, and future time features."""

    def make():
        out = []
        for i, b in enumerate((2, 1, 3)):
            g = _gen(i)
            past = torch.randn(b, length, generator=g)
            out.append(
                (past, torch.randn(b, length, 2, generator=g), torch.ones(b, length),
                 torch.randn(b, pred, 2, generator=g))
            )  # fmt: skip
        return out

    return make


def _layout_inputs() -> list[tuple]:
    """Token ids, one box per token (x0 <= x1, y0 <= y1 within 0..1000), and a mask."""
    out = []
    for i, (b, n, pad) in enumerate([(2, 8, 0), (1, 8, 0), (3, 5, 0), (2, 8, 3)]):
        ids, mask = tokens(b, n, i, pad)
        corner = torch.randint(0, 500, (b, n, 2), generator=_gen(30 + i))
        size = torch.randint(0, 500, (b, n, 2), generator=_gen(40 + i))
        out.append((ids, torch.cat([corner, corner + size], -1), mask))
    return out


def _image_text_inputs() -> list[tuple]:
    out = []
    for i, (b, n, pad) in enumerate([(2, 8, 0), (1, 8, 0), (3, 5, 0), (2, 8, 3)]):
        ids, mask = tokens(b, n, i, pad)
        out.append((ids, image(b, 32, i), mask))
    return out


def _speech_text_inputs() -> list[tuple]:
    out = []
    for i, (b, n, d, pad) in enumerate([(2, 400, 4, 0), (1, 400, 4, 0), (3, 320, 2, 0),
                                        (2, 400, 3, 80)]):  # fmt: skip
        mask = torch.ones(b, n, dtype=torch.long)
        if pad:
            mask[0, n - pad :] = 0
        decoder = torch.randint(4, VOCAB, (b, d), generator=_gen(60 + i))
        out.append((torch.randn(b, n, generator=_gen(i)), mask, decoder))
    return out


def _owlvit():
    def build():
        import transformers

        cfg = transformers.OwlViTConfig(
            text_config=dict(
                vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=2, max_position_embeddings=16,
            ),
            vision_config=dict(
                hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                image_size=32, patch_size=8,
            ),
            projection_dim=32,
        )  # fmt: skip
        return HF(
            transformers.OwlViTForObjectDetection(cfg),
            ("input_ids", "pixel_values", "attention_mask"),
        )

    return build


def _upernet():
    def build():
        import transformers

        backbone = transformers.ConvNextConfig(
            hidden_sizes=[8, 16, 32, 64],
            depths=[1, 1, 1, 1],
            out_features=["stage1", "stage2", "stage3", "stage4"],
        )
        cfg = transformers.UperNetConfig(
            backbone_config=backbone,
            hidden_size=16,
            auxiliary_in_channels=32,
            auxiliary_channels=16,
            num_labels=3,
        )
        return HF(transformers.UperNetForSemanticSegmentation(cfg), ("pixel_values",))

    return build


def _audio_text_inputs() -> list[tuple]:
    """Token ids, a 64 x 16 mel spectrogram per clip (CLAP's fixed size), and a mask."""
    out = []
    for i, (b, n, pad) in enumerate([(2, 8, 0), (1, 8, 0), (3, 5, 0), (2, 8, 3)]):
        ids, mask = tokens(b, n, i, pad)
        out.append((ids, torch.randn(b, 1, 64, 16, generator=_gen(i)), mask))
    return out


def _clap():
    def build():
        import transformers

        cfg = transformers.ClapConfig(
            text_config=dict(
                vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=64, max_position_embeddings=64, projection_dim=16,
            ),
            audio_config=dict(
                spec_size=64, patch_size=4, num_mel_bins=16, window_size=4, depths=[1, 1],
                num_attention_heads=[2, 2], patch_embeds_hidden_size=16, hidden_size=32,
                projection_dim=16, enable_fusion=False, patch_stride=[4, 4],
            ),
            projection_dim=16,
        )  # fmt: skip
        return HF(transformers.ClapModel(cfg), ("input_ids", "input_features", "attention_mask"))

    return build


def _depth_anything():
    def build():
        import transformers

        backbone = transformers.Dinov2Config(
            image_size=28, patch_size=14, hidden_size=32, num_hidden_layers=4,
            num_attention_heads=2, intermediate_size=64,
            out_features=["stage1", "stage2", "stage3", "stage4"], reshape_hidden_states=False,
            initializer_range=0.5,
        )  # fmt: skip
        cfg = transformers.DepthAnythingConfig(
            backbone_config=backbone,
            use_timm_backbone=False,
            neck_hidden_sizes=[8, 16, 32, 32],
            fusion_hidden_size=16,
            head_hidden_size=8,
            reassemble_hidden_size=32,
            patch_size=14,
            # The relative head ends in a ReLU that is 0 everywhere at random weights, and at
            # the default initializer_range of 0.02 the metric head (a sigmoid times
            # max_depth) is 5.0 to within 1e-4 everywhere: the comparison would accept any
            # result. At 0.5 (and 0.5 in the backbone) its depths spread over 0 to 10.
            depth_estimation_type="metric",
            max_depth=10,
            initializer_range=0.5,
        )
        return HF(transformers.DepthAnythingForDepthEstimation(cfg), ("pixel_values",))

    return build


def _fifth_cases() -> list[Case]:
    """A fifth round: native-aspect patches, single-head and hybrid vision transformers,
    dense aggregation networks, and outputs whose size the data decides (a speech
    synthesiser's durations, a keypoint detector's threshold)."""
    t, hf, cls = "timm", "transformers", "vision/classification"
    return [
        Case(
            "timm naflexvit (native aspect patches)",
            cls,
            t,
            _timm("naflexvit_base_patch16_gap", embed_dim=32, depth=2, num_heads=2, num_classes=10),
            IMG64,
        ),
        Case("timm shvit_s1 (single-head)", cls, t, _timm("shvit_s1", num_classes=10), IMG64),
        Case(
            "timm vitamin_small (mbconv + vit)",
            cls,
            t,
            _timm("vitamin_small_224", img_size=64, num_classes=10),
            images((2, 64), (1, 64), (3, 64)),
        ),
        Case(
            "timm rdnet_tiny (dense revisited)", cls, t, _timm("rdnet_tiny", num_classes=10), IMG64
        ),
        Case("timm dla34 (layer aggregation)", cls, t, _timm("dla34", num_classes=10), IMG64),
        Case(
            "fastspeech2_conformer (durations)",
            "speech/synthesis",
            hf,
            _hf(
                "FastSpeech2ConformerConfig",
                "FastSpeech2ConformerModel",
                ENC,
                hidden_size=32,
                vocab_size=VOCAB,
                num_mel_bins=16,
                encoder_num_attention_heads=2,
                decoder_num_attention_heads=2,
                encoder_layers=1,
                decoder_layers=1,
                encoder_linear_units=64,
                decoder_linear_units=64,
                speech_decoder_postnet_layers=2,
                speech_decoder_postnet_units=16,
                duration_predictor_channels=16,
                pitch_predictor_channels=16,
                energy_predictor_channels=16,
            ),
            text([(2, 8, 0), (1, 8, 0), (3, 5, 0), (2, 8, 3)]),
        ),
        Case(
            "superpoint (keypoints)",
            "vision/keypoints",
            hf,
            _hf_image(
                "SuperPointConfig",
                "SuperPointForKeypointDetection",
                encoder_hidden_sizes=[8, 8, 16, 16],
                decoder_hidden_size=32,
                keypoint_decoder_dim=65,
                descriptor_decoder_dim=32,
                max_keypoints=16,
                keypoint_threshold=0.0,
                border_removal_distance=2,
            ),
            lambda: [
                (torch.randn(b, 1, s, s, generator=_gen(i)),)
                for i, (b, s) in enumerate([(2, 64), (1, 64), (3, 64), (2, 96)])
            ],
        ),
    ]


def _sixth_cases() -> list[Case]:
    """A sixth round, language models with unusual machinery: a chunked state-space scan,
    hashed (random) attention buckets, latent cross-attention, table positions, experts
    with a capacity, per-language adapters, pixel tokens and a linear recurrence."""
    hf = "transformers"
    padded = [(2, 8, 0), (1, 8, 0), (3, 16, 0), (2, 8, 3)]  # Reformer: chunks of 4 tokens
    return [
        Case(
            "mamba2 (chunked scan)",
            "language/decoder",
            hf,
            _hf(
                "Mamba2Config",
                "Mamba2ForCausalLM",
                ("input_ids",),
                NO_CACHE,
                vocab_size=VOCAB,
                hidden_size=32,
                num_hidden_layers=2,
                num_heads=4,
                head_dim=16,
                state_size=8,
                n_groups=1,
                chunk_size=4,
                expand=2,
            ),
            _ids_only(text()),
        ),
        Case(
            "reformer (lsh attention)",
            "language/encoder",
            hf,
            _hf(
                "ReformerConfig",
                "ReformerModel",
                ENC,
                vocab_size=VOCAB,
                hidden_size=32,
                num_attention_heads=2,
                attention_head_size=16,
                feed_forward_size=64,
                attn_layers=["local", "lsh"],
                axial_pos_embds=False,
                max_position_embeddings=64,
                lsh_attn_chunk_length=4,
                local_attn_chunk_length=4,
                num_buckets=2,
                num_hashes=1,
                is_decoder=False,
            ),
            text(padded),
        ),
        Case(
            "perceiver (latent cross-attention)",
            "language/encoder",
            hf,
            _hf(
                "PerceiverConfig",
                "PerceiverForMaskedLM",
                ENC,
                vocab_size=VOCAB,
                num_latents=8,
                d_latents=32,
                d_model=32,
                num_blocks=1,
                num_self_attends_per_block=2,
                num_self_attention_heads=2,
                num_cross_attention_heads=1,
                qk_channels=32,
                v_channels=32,
                max_position_embeddings=64,
                initializer_range=0.2,
            ),
            text(),
        ),
        Case(
            "tapas (table positions)",
            "language/encoder",
            hf,
            _hf("TapasConfig", "TapasModel", (*ENC, "token_type_ids"), **SMALL_BERT),
            _table_inputs,
        ),
        Case(
            "nllb_moe (expert capacity)",
            "language/encoder-decoder",
            hf,
            _hf(
                "NllbMoeConfig",
                "NllbMoeModel",
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
                num_experts=4,
                expert_capacity=4,
                sparse_step=1,
                max_position_embeddings=64,
            ),
            seq2seq(),
        ),
        Case(
            "xmod (language adapters)",
            "language/encoder",
            hf,
            _hf(
                "XmodConfig",
                "XmodModel",
                ENC,
                languages=["en_XX", "de_DE"],
                default_language="en_XX",
                **SMALL_BERT,
            ),
            text(),
        ),
        Case(
            "imagegpt (pixel tokens)",
            "vision/generative",
            hf,
            _hf(
                "ImageGPTConfig",
                "ImageGPTModel",
                ("input_ids",),
                NO_CACHE,
                vocab_size=VOCAB + 1,
                n_positions=64,
                n_embd=32,
                n_layer=2,
                n_head=2,
            ),
            _ids_only(text()),
        ),
        Case(
            "rwkv (linear recurrence)",
            "language/decoder",
            hf,
            _hf(
                "RwkvConfig",
                "RwkvModel",
                ("input_ids",),
                NO_CACHE,
                vocab_size=VOCAB,
                hidden_size=32,
                num_hidden_layers=2,
                attention_hidden_size=32,
                intermediate_size=64,
                context_length=64,
            ),
            _ids_only(text()),
        ),
    ]


def _ids_only(make: Callable[[], list[tuple]]) -> Callable[[], list[tuple]]:
    """Token ids alone, for decoders that take no attention mask."""
    return lambda: [(ids,) for ids, *_ in make()]


def _table_inputs() -> list[tuple]:
    """Token ids, a mask and TAPAS's seven token types per token (segment, column, row,
    previous label, column rank, inverse column rank, numeric relation)."""
    out = []
    for i, (ids, mask) in enumerate(text()()):
        types = torch.randint(0, 2, ids.shape + (7,), generator=_gen(70 + i))
        out.append((ids, mask, types))
    return out


def _seventh_cases() -> list[Case]:
    """A seventh round: a second one-stage torchvision detector, a pyramid vision
    transformer, a text-to-speech model (a stochastic duration predictor and a spline flow:
    random draws and lengths the data decides), grouping tokens over image and text, and a
    detection transformer with anchor boxes as queries."""
    hf = "transformers"
    return [
        Case(
            "ssd300_vgg16 (detector, nms)",
            "vision/detection",
            "torchvision",
            lambda: Detection(_tv("ssd300_vgg16", weights_backbone=None, num_classes=3)()),
            DET,
        ),
        Case(
            "pvt (pyramid vision transformer)",
            "vision/classification",
            hf,
            _hf_image(
                "PvtConfig",
                "PvtForImageClassification",
                image_size=64,
                hidden_sizes=[8, 16, 32, 64],
                depths=[1, 1, 1, 1],
                num_attention_heads=[1, 1, 2, 2],
                num_labels=10,
            ),
            images((2, 64), (1, 64), (3, 64)),
        ),
        Case(
            "vits (text to speech)",
            "speech/synthesis",
            hf,
            _hf(
                "VitsConfig",
                "VitsModel",
                ENC,
                vocab_size=VOCAB,
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=2,
                ffn_dim=64,
                flow_size=16,
                spectrogram_bins=17,
                upsample_initial_channel=32,
                upsample_rates=[4, 4],
                upsample_kernel_sizes=[8, 8],
                resblock_kernel_sizes=[3],
                resblock_dilation_sizes=[[1, 3]],
                prior_encoder_num_flows=2,
                prior_encoder_num_wavenet_layers=2,
                posterior_encoder_num_wavenet_layers=2,
                duration_predictor_num_flows=2,
                duration_predictor_filter_channels=16,
                depth_separable_num_layers=2,
                window_size=4,
            ),
            text([(2, 8, 0), (1, 8, 0), (3, 5, 0), (2, 8, 3)]),
        ),
        Case("groupvit (grouping tokens)", "multimodal", hf, _groupvit(), _image_text_inputs),
        Case(
            "dab_detr (anchor queries)",
            "vision/detection-transformer",
            hf,
            _hf_detr("DabDetrConfig", "DabDetrForObjectDetection"),
            images((2, 64), (1, 64), (3, 96)),
        ),
    ]


def _eighth_cases() -> list[Case]:
    """An eighth round: a speech model's CTC training loss (op-set 7's ``ctc_loss``), with
    labels padded by -100 as transformers' data collators pad them."""
    return [
        Case(
            "wav2vec2 ctc loss (speech training)",
            "speech",
            "transformers",
            _hf(
                "Wav2Vec2Config",
                "Wav2Vec2ForCTC",
                ("input_values", "labels"),
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=2,
                intermediate_size=37,
                conv_dim=(16, 16),
                conv_stride=(5, 4),
                conv_kernel=(10, 8),
                num_conv_pos_embeddings=8,
                num_conv_pos_embedding_groups=2,
                vocab_size=12,
                pad_token_id=0,
                do_stable_layer_norm=True,
                feat_extract_norm="layer",
            ),
            _ctc_inputs,
        ),
    ]


def _ctc_inputs() -> list[tuple]:
    out = []
    for i, (batch, samples, width) in enumerate([(2, 1600, 5), (3, 2000, 7), (1, 1200, 3)]):
        labels = torch.randint(1, 12, (batch, width), generator=_gen(60 + i))
        labels[0, -1] = -100  # the first sequence is one label shorter
        out.append((torch.randn(batch, samples, generator=_gen(i)), labels))
    return out


def _groupvit():
    def build():
        import transformers

        cfg = transformers.GroupViTConfig(
            text_config=dict(
                vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=2, max_position_embeddings=16,
            ),
            vision_config=dict(
                hidden_size=32, intermediate_size=64, depths=[1, 1], num_hidden_layers=2,
                num_group_tokens=[8, 4], num_output_groups=[8, 4], num_attention_heads=2,
                image_size=32, patch_size=8,
            ),
            projection_dim=16,
            projection_intermediate_dim=32,
        )  # fmt: skip
        return HF(transformers.GroupViTModel(cfg), ("input_ids", "pixel_values", "attention_mask"))

    return build
