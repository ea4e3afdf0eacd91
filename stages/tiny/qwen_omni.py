"""Seeded tiny Qwen2.5-Omni and Qwen3-Omni-MoE checkpoints (recipes: shared/reference/tiny-models.md).

Both keep the real token-id layout (a 152064-row thinker vocabulary, the real special ids,
codec ids and speaker rows), every attention head_dim is 64, weights are fp32 with seed 0.
The processors need no torchvision: a Whisper feature extractor and the PIL Qwen2-VL image
processor, written as one merged `preprocessor_config.json` like the real checkpoints, plus
a `video_preprocessor_config.json` (read by stages/models/omni_video_processor.py, which stands
in for transformers' torchvision-only video processor).

    build_qwen2_5_omni(out_dir) -> Path      build_qwen3_omni(out_dir) -> Path
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from stages.models.dummy_weights import check_finite, redraw_experts
from stages.tiny.omni_tokenizer import (
    QWEN2_5_OMNI_CHAT_TEMPLATE,
    QWEN2_5_OMNI_NAMED,
    QWEN2_5_OMNI_SPECIALS,
    QWEN3_OMNI_CHAT_TEMPLATE,
    QWEN3_OMNI_NAMED,
    QWEN3_OMNI_SPECIALS,
    build_omni_tokenizer,
)

SEED = 0
VOCAB = 152064
VISION_IDS = {"vision_start_token_id": 151652, "vision_end_token_id": 151653, "vision_token_id": 151654}
QWEN2_5_SPEAKERS = {"Chelsie": 151872, "Ethan": 151870}
QWEN3_SPEAKERS = {"chelsie": 2301, "ethan": 2302, "aiden": 2303}


def qwen2_5_omni_config():
    from transformers import Qwen2_5OmniConfig

    mrope = {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [8, 12, 12]}
    text = dict(
        vocab_size=VOCAB,
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=256,
        rope_parameters=mrope,
        tie_word_embeddings=False,
    )
    thinker = dict(
        text_config=text,
        audio_config=dict(
            d_model=128,
            encoder_layers=2,
            encoder_attention_heads=2,
            encoder_ffn_dim=256,
            num_mel_bins=128,
            n_window=100,
            output_dim=128,
        ),
        vision_config=dict(
            depth=2,
            hidden_size=128,
            num_heads=2,
            intermediate_size=256,
            patch_size=14,
            spatial_merge_size=2,
            temporal_patch_size=2,
            window_size=112,
            fullatt_block_indexes=[1],
            out_hidden_size=128,
        ),
        **VISION_IDS,
    )
    talker = dict(
        vocab_size=8448,
        tts_codec_pad_token_id=8292,
        tts_codec_start_token_id=8293,
        tts_codec_end_token_id=8294,
        tts_codec_mask_token_id=8296,
        tts_text_pad_token_id=151859,
        tts_text_start_token_id=151860,
        tts_text_end_token_id=151861,
        hidden_size=128,
        embedding_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        rope_parameters=mrope,
        **VISION_IDS,
    )
    token2wav = dict(
        dit_config=dict(
            hidden_size=128,
            num_hidden_layers=2,
            num_attention_heads=2,
            head_dim=64,
            emb_dim=64,
            num_embeds=8448,
            look_ahead_layers=[1],
            look_backward_layers=[0],
            block_size=24,
            repeats=2,
            mel_dim=80,
            enc_emb_dim=32,
            enc_dim=32,
            enc_channels=[32, 32, 32, 32, 96],
            enc_attention_channels=16,
            enc_se_channels=16,
        ),
        bigvgan_config=dict(mel_dim=80, upsample_initial_channel=128, upsample_rates=[5, 3, 2, 2, 2, 2]),
    )
    config = Qwen2_5OmniConfig(thinker_config=thinker, talker_config=talker, token2wav_config=token2wav)
    for part in (config.thinker_config, config.talker_config):
        for key, value in VISION_IDS.items():
            setattr(part, key, value)
    return config


def qwen3_omni_config():
    from transformers import Qwen3OmniMoeConfig

    moe = dict(
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        intermediate_size=256,
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=64,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 1e6,
            "mrope_section": [12, 10, 10],
            "mrope_interleaved": True,
        },
    )
    thinker = dict(
        text_config=dict(vocab_size=VOCAB, tie_word_embeddings=False, **moe),
        audio_config=dict(
            d_model=128,
            encoder_layers=2,
            encoder_attention_heads=2,
            encoder_ffn_dim=256,
            num_mel_bins=128,
            n_window=50,
            n_window_infer=800,
            conv_chunksize=500,
            downsample_hidden_size=64,
            output_dim=128,
        ),
        vision_config=dict(
            depth=2,
            hidden_size=128,
            num_heads=2,
            intermediate_size=256,
            patch_size=16,
            spatial_merge_size=2,
            temporal_patch_size=2,
            out_hidden_size=128,
            num_position_embeddings=2304,
            deepstack_visual_indexes=[1],
            image_size=768,
            apply_vit_abs_pos_embed=True,
        ),
        audio_start_token_id=151669,
        audio_token_id=151675,
        image_token_id=151655,
        video_token_id=151656,
        vision_start_token_id=151652,
    )
    talker = dict(
        text_config=dict(vocab_size=3072, shared_expert_intermediate_size=256, **moe),
        code_predictor_config=dict(
            vocab_size=2048,
            hidden_size=128,
            intermediate_size=256,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=64,
            num_code_groups=16,
        ),
        num_code_groups=16,
        thinker_hidden_size=128,
        codec_pad_id=2148,
        codec_bos_id=2149,
        codec_eos_token_id=2150,
        codec_nothink_id=2155,
        codec_think_bos_id=2156,
        codec_think_eos_id=2157,
        speaker_id=dict(QWEN3_SPEAKERS),
        accept_hidden_layer=1,
        spatial_merge_size=2,
        audio_start_token_id=151669,
        audio_token_id=151675,
        image_token_id=151655,
        video_token_id=151656,
        vision_start_token_id=151652,
    )
    code2wav = dict(
        codebook_size=2048,
        num_quantizers=16,
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        intermediate_size=256,
        sliding_window=72,
        upsample_rates=[8, 5, 4, 3],
        upsampling_ratios=[2, 2],
        decoder_dim=64,
    )
    return Qwen3OmniMoeConfig(
        thinker_config=thinker,
        talker_config=talker,
        code2wav_config=code2wav,
        im_start_token_id=151644,
        im_end_token_id=151645,
        tts_pad_token_id=151671,
        tts_bos_token_id=151672,
        tts_eos_token_id=151673,
        system_token_id=8948,
        user_token_id=872,
        assistant_token_id=77091,
    )


def build_qwen2_5_omni(out_dir: str | Path) -> Path:
    import torch
    from transformers import Qwen2_5OmniForConditionalGeneration

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(SEED)
    model = Qwen2_5OmniForConditionalGeneration(qwen2_5_omni_config()).eval()
    check_finite(model)
    model.save_pretrained(out_dir)
    write_qwen2_5_omni_files(out_dir, model.config)
    return out_dir


def build_qwen3_omni(out_dir: str | Path) -> Path:
    import torch
    from transformers import Qwen3OmniMoeForConditionalGeneration

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(SEED)
    model = Qwen3OmniMoeForConditionalGeneration(qwen3_omni_config()).eval()
    redraw_experts(model, torch.Generator().manual_seed(SEED + 1))  # transformers leaves the talker's empty
    check_finite(model)
    model.save_pretrained(out_dir)
    write_qwen3_omni_files(out_dir)
    return out_dir


def write_qwen2_5_omni_files(out_dir: Path, config) -> None:
    """Everything of a Qwen2.5-Omni checkpoint but its weights: the voices, tokenizer and processor files."""
    write_speakers(out_dir, config.token2wav_config.dit_config)
    tokenizer = build_omni_tokenizer(out_dir, QWEN2_5_OMNI_SPECIALS, QWEN2_5_OMNI_NAMED, QWEN2_5_OMNI_CHAT_TEMPLATE)
    _write_processor_files(out_dir, "Qwen2_5OmniProcessor", patch=14, mean_std=None, chat_template=tokenizer)


def write_qwen3_omni_files(out_dir: Path) -> None:
    """Everything of a Qwen3-Omni checkpoint but its weights (its voices are config ids): tokenizer and processor."""
    tokenizer = build_omni_tokenizer(out_dir, QWEN3_OMNI_SPECIALS, QWEN3_OMNI_NAMED, QWEN3_OMNI_CHAT_TEMPLATE)
    _write_processor_files(out_dir, "Qwen3OmniMoeProcessor", patch=16, mean_std=0.5, chat_template=tokenizer)


def write_speakers(out_dir: Path, dit_config) -> None:
    """`spk_dict.pt`, Qwen2.5-Omni's voices: per speaker its talker bos token and the token2wav DiT's
    conditioning (`cond`, the speaker embedding) and reference mel, seeded random in the DiT's sizes."""
    import torch

    generator = torch.Generator().manual_seed(SEED)
    speakers = {
        name: {
            "bos_token": bos,
            "cond": torch.randn(1, dit_config.enc_emb_dim, generator=generator),
            "ref_mel": torch.randn(1, 300, dit_config.mel_dim, generator=generator),
        }
        for name, bos in QWEN2_5_SPEAKERS.items()
    }
    torch.save(speakers, out_dir / "spk_dict.pt")


def _write_processor_files(out_dir: Path, processor_class: str, *, patch: int, mean_std, chat_template) -> None:
    feature_extractor, image_processor = processor_parts(patch=patch, mean_std=mean_std)
    merged = {**image_processor.to_dict(), **feature_extractor.to_dict(), "processor_class": processor_class}
    merged.pop("_processor_class", None)
    (out_dir / "preprocessor_config.json").write_text(json.dumps(merged, indent=2, default=_jsonable))
    video = {
        "video_processor_type": "Qwen2VLVideoProcessor",
        "patch_size": patch,
        "temporal_patch_size": 2,
        "merge_size": 2,
        "min_pixels": 28 * 28 * 4,
        "max_pixels": 28 * 28 * 64,
        "processor_class": processor_class,
    }
    (out_dir / "video_preprocessor_config.json").write_text(json.dumps(video, indent=2))
    (out_dir / "chat_template.json").write_text(json.dumps({"chat_template": chat_template.chat_template}))


def _jsonable(value):
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def processor_parts(*, patch: int, mean_std):
    from transformers import WhisperFeatureExtractor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    feature_extractor = WhisperFeatureExtractor(
        feature_size=128, sampling_rate=16000, hop_length=160, chunk_length=300, n_fft=400
    )
    extra = {} if mean_std is None else {"image_mean": [mean_std] * 3, "image_std": [mean_std] * 3}
    image_processor = Qwen2VLImageProcessorPil(
        patch_size=patch, merge_size=2, temporal_patch_size=2, min_pixels=28 * 28 * 4, max_pixels=28 * 28 * 64, **extra
    )
    return feature_extractor, image_processor


def load_processor(model_dir: str | Path, processor_class):
    """The checkpoint's own processor, built by hand so no torchvision is needed.

    `AutoProcessor` would import the torchvision-only video processor; the omni processors
    read `video_processor.merge_size` even for audio or image input, so a stand-in holds it here
    and the families attach the frames-based video processor
    (`stages.models.omni_video_processor.attach_video_processor`).
    """
    from transformers import AutoTokenizer, WhisperFeatureExtractor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    model_dir = Path(model_dir)
    config = json.loads((model_dir / "preprocessor_config.json").read_text())
    image_keys = ("patch_size", "merge_size", "temporal_patch_size", "image_mean", "image_std", "size")
    image_processor = Qwen2VLImageProcessorPil(**{key: config[key] for key in image_keys if key in config})
    feature_extractor = WhisperFeatureExtractor(
        **{
            key: config[key]
            for key in ("feature_size", "sampling_rate", "hop_length", "chunk_length", "n_fft", "padding_value")
            if key in config
        }
    )
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    processor = processor_class.__new__(processor_class)
    processor.image_processor = image_processor
    processor.feature_extractor = feature_extractor
    processor.tokenizer = tokenizer
    processor.video_processor = SimpleNamespace(merge_size=2, temporal_patch_size=2, model_input_names=[])
    processor.chat_template = tokenizer.chat_template
    for name in (
        "image_token",
        "audio_token",
        "video_token",
        "vision_bos_token",
        "vision_eos_token",
        "audio_bos_token",
        "audio_eos_token",
    ):
        setattr(processor, name, getattr(tokenizer, name))
    return processor
