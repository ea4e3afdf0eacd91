"""Real-shape checkpoint directories: the published models' configs, the tiny builders' tokenizer and
processor files, and no weights. They serve with `load_format: dummy` (every stage builds its model
from these configs on its device, with seeded random weights), so a 30B model runs on a machine whose
disk could not hold its checkpoint.

    python -m stages.tiny --real-shapes OUT [--only qwen2_5_omni_7b ...]

writes OUT/qwen2_5_omni_7b, OUT/qwen3_omni_30b_a3b, OUT/qwen2_5_0_5b and OUT/sd3_medium in a few
seconds. No model hub is reachable here, so the dimensions were collected from public copies of the
published configs (cited per model below) and are checked by the parameter count of the models they
build against the published totals (`PUBLISHED`, tests/stages/test_real_shapes.py, on the meta device).

Where a value departs from the published config it says why: token ids of the locally trained tokenizers
(CLIP's bos/eos/pad), and Qwen2.5-Omni's token2wav code embedding (8448 rows, the talker's vocabulary,
instead of 8193: a random talker samples any of its 8448 codes, a trained one never the last 255).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PUBLISHED: dict[str, dict[str, float]] = {
    # parameters of the published checkpoints, by part (what the tests and the GPU driver compare with)
    "qwen2_5_omni_7b": {"total": 10.7e9, "thinker.text": 7.61e9},  # HF model page; Qwen2.5-7B's card
    "qwen3_omni_30b_a3b": {"total": 35_259_818_545, "thinker.text": 30.5e9},  # the checkpoint's tensors; Qwen3-30B-A3B
    "qwen2_5_0_5b": {"total": 0.49e9},  # Qwen2.5-0.5B's card
    "sd3_medium": {"transformer": 2.0e9},  # "SD3 Medium, a 2 billion parameter MMDiT"
}


# --- Qwen2.5-Omni-7B --------------------------------------------------------------------
# Thinker text, audio and vision encoders: transformers' Qwen2_5Omni* config defaults (documented as
# Qwen/Qwen2.5-Omni-7B), except the vision tower's width: Qwen2.5-VL's 675M ViT (hidden 1280, ffn 3420,
# 16 heads, 32 blocks), as in the Qwen2.5-Omni technical report. Talker (hidden 896, 24 layers, 12
# heads over 4 KV heads of 128, ffn 18944, mrope [16, 24, 24]): the config.json values quoted by AWS
# Neuron's Qwen2.5-Omni talker port and rtp-llm's omni config tests. Token2wav: transformers'
# Qwen2_5OmniDiTConfig / Qwen2_5OmniBigVGANConfig defaults, the same rtp-llm's test quotes (DiT 22 x 1024,
# 16 heads of 64; BigVGAN 1536 channels, rates [5, 3, 2, 2, 2, 2]). 10,732,225,408 parameters.

QWEN2_5_MROPE = {"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": [16, 24, 24]}
QWEN2_5_IDS = {"audio_token_index": 151646, "image_token_index": 151655, "video_token_index": 151656}
QWEN2_5_TIMING = {"position_id_per_seconds": 25, "seconds_per_chunk": 2}


def qwen2_5_omni_7b_config():
    from transformers import Qwen2_5OmniConfig

    from stages.tiny.qwen_omni import VISION_IDS

    text = dict(
        vocab_size=152064,
        hidden_size=3584,
        intermediate_size=18944,
        num_hidden_layers=28,
        num_attention_heads=28,
        num_key_value_heads=4,
        max_position_embeddings=32768,
        rms_norm_eps=1e-6,
        rope_parameters=QWEN2_5_MROPE,
        tie_word_embeddings=False,
    )
    thinker = dict(
        text_config=text,
        audio_config=dict(
            d_model=1280,
            encoder_layers=32,
            encoder_attention_heads=20,
            encoder_ffn_dim=5120,
            num_mel_bins=128,
            max_source_positions=1500,
            n_window=100,
            output_dim=3584,
        ),
        vision_config=dict(
            depth=32,
            hidden_size=1280,
            intermediate_size=3420,
            num_heads=16,
            patch_size=14,
            spatial_merge_size=2,
            temporal_patch_size=2,
            window_size=112,
            out_hidden_size=3584,
            fullatt_block_indexes=[7, 15, 23, 31],
        ),
        audio_start_token_id=151647,
        audio_end_token_id=151648,
        user_token_id=872,
        **QWEN2_5_IDS,
        **QWEN2_5_TIMING,
        **VISION_IDS,
    )
    talker = dict(
        vocab_size=8448,
        hidden_size=896,
        intermediate_size=18944,
        num_hidden_layers=24,
        num_attention_heads=12,
        num_key_value_heads=4,
        head_dim=128,
        embedding_size=3584,
        max_position_embeddings=32768,
        rms_norm_eps=1e-6,
        rope_parameters=QWEN2_5_MROPE,
        tts_codec_pad_token_id=8292,
        tts_codec_start_token_id=8293,
        tts_codec_end_token_id=8294,
        tts_codec_mask_token_id=8296,
        tts_text_pad_token_id=151859,
        tts_text_start_token_id=151860,
        tts_text_end_token_id=151861,
        audio_start_token_id=151647,
        audio_end_token_id=151648,
        spatial_merge_size=2,
        **QWEN2_5_IDS,
        **QWEN2_5_TIMING,
        **VISION_IDS,
    )
    token2wav = dict(
        dit_config=dict(
            hidden_size=1024,
            num_hidden_layers=22,
            num_attention_heads=16,
            head_dim=64,
            ff_mult=2,
            emb_dim=512,
            block_size=24,
            look_ahead_layers=[10],
            look_backward_layers=[0, 20],
            repeats=2,
            num_embeds=8448,  # published 8193: see the module docstring
            mel_dim=80,
            enc_emb_dim=192,
            enc_dim=128,
            enc_channels=[256, 256, 256, 256, 768],
            enc_kernel_sizes=[5, 3, 3, 3, 1],
            enc_dilations=[1, 2, 3, 4, 1],
            enc_attention_channels=64,
            enc_res2net_scale=2,
            enc_se_channels=64,
        ),
        bigvgan_config=dict(
            mel_dim=80,
            upsample_initial_channel=1536,
            resblock_kernel_sizes=[3, 7, 11],
            resblock_dilation_sizes=[[1, 3, 5], [1, 3, 5], [1, 3, 5]],
            upsample_rates=[5, 3, 2, 2, 2, 2],
            upsample_kernel_sizes=[11, 7, 4, 4, 4, 4],
        ),
    )
    config = Qwen2_5OmniConfig(thinker_config=thinker, talker_config=talker, token2wav_config=token2wav)
    for part in (config.thinker_config, config.talker_config):  # read by get_rope_index, undeclared
        for key, value in VISION_IDS.items():
            setattr(part, key, value)
    return config


def write_qwen2_5_omni_7b(out_dir: str | Path) -> Path:
    from stages.tiny.qwen_omni import write_qwen2_5_omni_files

    out_dir = Path(out_dir)
    config = qwen2_5_omni_7b_config()
    _save_config(config, out_dir, "Qwen2_5OmniForConditionalGeneration")
    write_qwen2_5_omni_files(out_dir, config)
    return out_dir


# --- Qwen3-Omni-30B-A3B -----------------------------------------------------------------
# Every value from a transformers (5.7) dump of Qwen/Qwen3-Omni-30B-A3B-Instruct's loaded config with its
# weight statistics (15 shards, 35,259,818,545 parameters), the same values as tzhouam/vllm-omni's
# benchmarks/qwen3-omni/transformers/model_structure_output and the talker / code predictor / code2wav
# sections quoted by rtp-llm and go-pherence; these shapes build exactly 35,259,818,545 parameters.

QWEN3_MROPE = {"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": [24, 20, 20]}
QWEN3_MEDIA_IDS = {
    "audio_start_token_id": 151669,
    "audio_token_id": 151675,
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_start_token_id": 151652,
}


def qwen3_omni_30b_a3b_config():
    from transformers import Qwen3OmniMoeConfig

    from stages.tiny.qwen_omni import QWEN3_SPEAKERS

    thinker = dict(
        text_config=dict(
            vocab_size=152064,
            hidden_size=2048,
            intermediate_size=768,
            num_hidden_layers=48,
            num_attention_heads=32,
            num_key_value_heads=4,
            head_dim=128,
            num_experts=128,
            num_experts_per_tok=8,
            moe_intermediate_size=768,
            norm_topk_prob=True,
            decoder_sparse_step=1,
            max_position_embeddings=65536,
            rms_norm_eps=1e-6,
            rope_parameters={**QWEN3_MROPE, "interleaved": True, "mrope_interleaved": True},
            tie_word_embeddings=False,
        ),
        audio_config=dict(
            d_model=1280,
            encoder_layers=32,
            encoder_attention_heads=20,
            encoder_ffn_dim=5120,
            num_mel_bins=128,
            max_source_positions=1500,
            n_window=50,
            n_window_infer=800,
            conv_chunksize=500,
            downsample_hidden_size=480,
            output_dim=2048,
        ),
        vision_config=dict(
            depth=27,
            hidden_size=1152,
            intermediate_size=4304,
            num_heads=16,
            hidden_act="gelu_pytorch_tanh",
            patch_size=16,
            spatial_merge_size=2,
            temporal_patch_size=2,
            out_hidden_size=2048,
            num_position_embeddings=2304,
            deepstack_visual_indexes=[8, 16, 24],
            image_size=768,
            apply_vit_abs_pos_embed=True,
            tokens_per_second=2,
        ),
        audio_end_token_id=151670,
        vision_end_token_id=151653,
        user_token_id=872,
        position_id_per_seconds=13,
        seconds_per_chunk=2,
        **QWEN3_MEDIA_IDS,
    )
    talker = dict(
        text_config=dict(
            vocab_size=3072,
            hidden_size=1024,
            intermediate_size=2048,
            num_hidden_layers=20,
            num_attention_heads=16,
            num_key_value_heads=2,
            head_dim=128,
            num_experts=128,
            num_experts_per_tok=6,
            moe_intermediate_size=384,
            shared_expert_intermediate_size=768,
            norm_topk_prob=True,
            decoder_sparse_step=1,
            max_position_embeddings=65536,
            rms_norm_eps=1e-6,
            rope_parameters={**QWEN3_MROPE, "interleaved": True},
        ),
        code_predictor_config=dict(
            vocab_size=2048,
            hidden_size=1024,
            intermediate_size=3072,
            num_hidden_layers=5,
            num_attention_heads=16,
            num_key_value_heads=8,
            head_dim=128,
            num_code_groups=16,
            max_position_embeddings=32768,
            rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
        ),
        num_code_groups=16,
        thinker_hidden_size=2048,
        accept_hidden_layer=24,
        codec_pad_id=2148,
        codec_bos_id=2149,
        codec_eos_token_id=2150,
        codec_nothink_id=2155,
        codec_think_bos_id=2156,
        codec_think_eos_id=2157,
        speaker_id=dict(QWEN3_SPEAKERS),
        spatial_merge_size=2,
        position_id_per_seconds=13,
        seconds_per_chunk=2,
        audio_end_token_id=151670,
        **QWEN3_MEDIA_IDS,
    )
    code2wav = dict(
        codebook_size=2048,
        codebook_dim=512,
        num_quantizers=16,
        num_semantic_quantizers=1,
        semantic_codebook_size=4096,
        vector_quantization_hidden_dimension=512,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=16,
        max_position_embeddings=8000,
        rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        layer_scale_initial_scale=0.01,
        sliding_window=72,
        upsample_rates=[8, 5, 4, 3],
        upsampling_ratios=[2, 2],
        decoder_dim=1536,
    )
    return Qwen3OmniMoeConfig(
        thinker_config=thinker,
        talker_config=talker,
        code2wav_config=code2wav,
        enable_audio_output=True,
        im_start_token_id=151644,
        im_end_token_id=151645,
        tts_pad_token_id=151671,
        tts_bos_token_id=151672,
        tts_eos_token_id=151673,
        system_token_id=8948,
        user_token_id=872,
        assistant_token_id=77091,
    )


def write_qwen3_omni_30b_a3b(out_dir: str | Path) -> Path:
    from stages.tiny.qwen_omni import write_qwen3_omni_files

    out_dir = Path(out_dir)
    _save_config(qwen3_omni_30b_a3b_config(), out_dir, "Qwen3OmniMoeForConditionalGeneration")
    write_qwen3_omni_files(out_dir)
    return out_dir


# --- Qwen2.5-0.5B -----------------------------------------------------------------------
# Qwen/Qwen2.5-0.5B-Instruct's config.json (hidden 896, 24 layers, 14 heads over 2 KV heads, ffn 4864,
# vocabulary 151936, tied embeddings), as quoted by nanoinfer's and SparkTTS's tests: 494,032,768
# parameters. The tokenizer keeps Qwen's ids for its specials (<|endoftext|> 151643, <|im_start|> 151644,
# <|im_end|> 151645) and role words.

QWEN2_5_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def qwen2_5_0_5b_config():
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=151936,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        max_window_layers=21,
        rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
        tie_word_embeddings=True,
        bos_token_id=151643,
        eos_token_id=151645,
        pad_token_id=151643,
    )


def write_qwen2_5_0_5b(out_dir: str | Path) -> Path:
    from transformers import GenerationConfig

    from stages.tiny.omni_tokenizer import FIRST_SPECIAL_ID, ROLE_IDS
    from stages.tiny.tokenizer import build_tokenizer

    out_dir = Path(out_dir)
    _save_config(qwen2_5_0_5b_config(), out_dir, "Qwen2ForCausalLM")
    build_tokenizer(out_dir, pad_to=FIRST_SPECIAL_ID, special_tokens=QWEN2_5_SPECIALS, fixed_ids=ROLE_IDS)
    GenerationConfig(bos_token_id=151643, eos_token_id=[151645, 151643], pad_token_id=151643).save_pretrained(out_dir)
    return out_dir


# --- Stable Diffusion 3 medium ----------------------------------------------------------
# stabilityai/stable-diffusion-3-medium-diffusers: the MMDiT's transformer/config.json (24 joint blocks of
# 24 heads x 64, joint_attention_dim 4096, caption projection 1536, pooled 2048, pos_embed_max_size 192;
# also diffusers' SD3Transformer2DModel defaults) as quoted by several public copies, 2,028,328,000
# parameters; CLIP ViT-L/14's text tower (768 wide, 12 layers, quick_gelu: 123,650,304), OpenCLIP
# bigG's (1280 wide, 32 layers, gelu: 694,659,840), T5-v1.1-XXL's encoder (d_model 4096, 24 layers of 64
# heads, ffn 10240, gated-gelu: 4,762,310,656) and the 16-channel VAE (128/256/512/512, two layers per
# block, scaling 1.5305, shift 0.0609: 83,819,683). The tokenizers are the tiny SD3's.


def sd3_medium_pipeline():
    """The SD3-medium pipeline on the meta device: its components' configs, no memory."""
    import torch
    from diffusers import (
        AutoencoderKL,
        FlowMatchEulerDiscreteScheduler,
        SD3Transformer2DModel,
        StableDiffusion3Pipeline,
    )
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection, T5Config, T5EncoderModel

    from stages.tiny.diffusion import train_clip_tokenizer, train_t5_tokenizer

    clip_tokenizer, t5_tokenizer = train_clip_tokenizer(), train_t5_tokenizer()
    clip_ids = {
        "bos_token_id": clip_tokenizer.bos_token_id,
        "eos_token_id": clip_tokenizer.eos_token_id,
        "pad_token_id": clip_tokenizer.pad_token_id,
    }
    clip = dict(vocab_size=49408, max_position_embeddings=77, layer_norm_eps=1e-5, **clip_ids)
    with torch.device("meta"):
        clip_l = CLIPTextModelWithProjection(
            CLIPTextConfig(
                hidden_size=768,
                intermediate_size=3072,
                num_hidden_layers=12,
                num_attention_heads=12,
                projection_dim=768,
                hidden_act="quick_gelu",
                **clip,
            )
        )
        clip_g = CLIPTextModelWithProjection(
            CLIPTextConfig(
                hidden_size=1280,
                intermediate_size=5120,
                num_hidden_layers=32,
                num_attention_heads=20,
                projection_dim=1280,
                hidden_act="gelu",
                **clip,
            )
        )
        t5 = T5EncoderModel(
            T5Config(
                vocab_size=32128,
                d_model=4096,
                d_kv=64,
                d_ff=10240,
                num_layers=24,
                num_heads=64,
                relative_attention_num_buckets=32,
                relative_attention_max_distance=128,
                feed_forward_proj="gated-gelu",
                layer_norm_epsilon=1e-6,
                is_encoder_decoder=False,
                tie_word_embeddings=False,
                pad_token_id=0,
                eos_token_id=1,
            )
        )
        transformer = SD3Transformer2DModel(
            sample_size=128,
            patch_size=2,
            in_channels=16,
            num_layers=24,
            attention_head_dim=64,
            num_attention_heads=24,
            joint_attention_dim=4096,
            caption_projection_dim=1536,
            pooled_projection_dim=2048,
            out_channels=16,
            pos_embed_max_size=192,
        )
        vae = AutoencoderKL(
            in_channels=3,
            out_channels=3,
            down_block_types=["DownEncoderBlock2D"] * 4,
            up_block_types=["UpDecoderBlock2D"] * 4,
            block_out_channels=[128, 256, 512, 512],
            layers_per_block=2,
            latent_channels=16,
            norm_num_groups=32,
            sample_size=1024,
            scaling_factor=1.5305,
            shift_factor=0.0609,
            use_quant_conv=False,
            use_post_quant_conv=False,
        )
    return StableDiffusion3Pipeline(
        transformer=transformer,
        vae=vae,
        scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0),
        text_encoder=clip_l,
        tokenizer=clip_tokenizer,
        text_encoder_2=clip_g,
        tokenizer_2=clip_tokenizer,
        text_encoder_3=t5,
        tokenizer_3=t5_tokenizer,
    )


def write_sd3_medium(out_dir: str | Path) -> Path:
    out_dir = Path(out_dir)
    save_pipeline_configs(sd3_medium_pipeline(), out_dir)
    return out_dir


def save_pipeline_configs(pipe, out_dir: Path) -> None:
    """A diffusers pipeline's directory without weights: model_index.json, each model's config, and the
    tokenizers' and schedulers' own files (what `save_pretrained` writes, less the weights)."""
    from diffusers import ModelMixin
    from transformers import PreTrainedModel

    out_dir.mkdir(parents=True, exist_ok=True)
    pipe.save_config(out_dir)
    for name, component in pipe.components.items():
        if component is None:
            continue
        if isinstance(component, PreTrainedModel):
            _save_config(component.config, out_dir / name, type(component).__name__)
        elif isinstance(component, ModelMixin):
            component.save_config(out_dir / name)
        else:
            component.save_pretrained(out_dir / name)


# --- shared -----------------------------------------------------------------------------


def _save_config(config: Any, out_dir: Path, architecture: str) -> None:
    config.architectures = [architecture]
    config.dtype = "bfloat16"
    config.save_pretrained(out_dir)


OMNI_MODELS = {  # model_type -> (transformers class, vocoder part)
    "qwen2_5_omni": ("Qwen2_5OmniForConditionalGeneration", "token2wav"),
    "qwen3_omni_moe": ("Qwen3OmniMoeForConditionalGeneration", "code2wav"),
}


def parameter_counts(model_dir: str | Path) -> dict[str, int]:
    """Parameters of the model a checkpoint directory's configs describe, by part, counted on the meta
    device (nothing allocated, no weight read)."""
    import torch
    import transformers

    model_dir = Path(model_dir)
    if (model_dir / "model_index.json").is_file():
        return _pipeline_counts(model_dir)
    config = transformers.AutoConfig.from_pretrained(model_dir)
    with torch.device("meta"):
        if config.model_type not in OMNI_MODELS:
            return {"total": _count(transformers.AutoModelForCausalLM.from_config(config))}
        class_name, vocoder = OMNI_MODELS[config.model_type]
        model = getattr(transformers, class_name)._from_config(config)
    counts = {part: _count(getattr(model, part)) for part in ("thinker", "talker", vocoder)}
    counts["total"] = sum(counts.values())
    counts["thinker.text"] = _count(model.thinker.model) + _count(model.thinker.lm_head)
    return counts


def _pipeline_counts(model_dir: Path) -> dict[str, int]:
    import importlib

    import torch
    from diffusers import ModelMixin
    from transformers import PreTrainedModel

    counts = {}
    for name, value in json.loads((model_dir / "model_index.json").read_text()).items():
        if name.startswith("_") or not isinstance(value, list) or value[0] is None:
            continue
        component_class = getattr(importlib.import_module(value[0]), value[1])
        with torch.device("meta"):
            if issubclass(component_class, PreTrainedModel):
                config = component_class.config_class.from_pretrained(model_dir / name)
                counts[name] = _count(component_class._from_config(config))
            elif issubclass(component_class, ModelMixin):
                counts[name] = _count(component_class.from_config(component_class.load_config(model_dir / name)))
    counts["total"] = sum(counts.values())
    return counts


def _count(module) -> int:
    return sum(param.numel() for param in module.parameters())
