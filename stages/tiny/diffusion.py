"""Tiny, seeded, random-weight diffusers checkpoints: SD3, PixArt-Sigma and Wan 2.1.

Each builder makes the real pipeline class from small configs, with tokenizers trained
locally on a built-in corpus (no hub), and saves it with `save_pretrained`, so the
engine loads it exactly as it would load a real checkpoint. Same seed, same weights.

`sd3_config(scale)` and friends are plain dicts so the benchmark can build a mid-size
SD3-shaped model for the GPU from the same code (`build_sd3(out, scale="mid")`).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

SEED = 0

CORPUS = [
    "a photo of a cat sitting on a red chair",
    "a watercolor painting of a lighthouse at dusk",
    "an astronaut riding a horse on the moon, digital art",
    "a bowl of fresh fruit on a wooden table, soft light",
    "a futuristic city skyline at night with neon lights",
    "a small cottage in a snowy forest, oil painting",
    "a dog running on the beach at sunset",
    "portrait of an old man with a beard, black and white photo",
    "a cup of coffee next to an open book",
    "mountains reflected in a calm lake in the morning",
    "a robot reading a newspaper in a cafe",
    "a field of sunflowers under a blue sky",
    "a steam train crossing a stone bridge",
    "macro photo of a dew drop on a green leaf",
    "a dragon flying over a medieval castle, fantasy art",
    "a bicycle leaning against a yellow wall",
    "a plate of sushi with chopsticks, studio lighting",
    "a sailing boat on a stormy sea, dramatic clouds",
    "children playing football in a park",
    "an owl perched on a branch in the moonlight",
    "a vintage car parked on a quiet street",
    "a glass of orange juice with ice cubes",
    "the northern lights above a frozen lake",
    "a busy market in an old town, people and colors",
    "a close up of a tiger face, high detail",
    "a pixel art house with a garden",
    "a chef cooking pasta in a bright kitchen",
    "a hot air balloon floating over green hills",
    "a panda eating bamboo, photograph",
    "rain on a window with city lights behind",
    "low quality, blurry, distorted, ugly, bad anatomy",
    "the quick brown fox jumps over the lazy dog 0123456789",
]


# --- tokenizers -------------------------------------------------------------------------


def train_clip_tokenizer(num_merges: int = 200, max_length: int = 77):
    """A CLIP tokenizer (byte-level BPE with `</w>` word ends) trained on CORPUS.

    The BPE is trained here rather than with `tokenizers`' trainer, whose tie-breaking between
    equally frequent pairs changes from run to run: ties go to the smallest pair, so every
    build yields the same vocabulary.
    """
    from collections import Counter

    from tokenizers import pre_tokenizers
    from transformers import CLIPTokenizer

    template = CLIPTokenizer()  # CLIP's normalizer and byte-level pre-tokenizer
    backend = template.backend_tokenizer
    words: Counter[tuple[str, ...]] = Counter()
    for line in CORPUS:
        for word, _ in backend.pre_tokenizer.pre_tokenize_str(backend.normalizer.normalize_str(line)):
            words[(*word[:-1], word[-1] + "</w>")] += 1
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {token: index for index, token in enumerate(alphabet + [c + "</w>" for c in alphabet])}
    merges = []
    for _ in range(num_merges):
        pairs: Counter[tuple[str, str]] = Counter()
        for word, count in words.items():
            for pair in zip(word, word[1:], strict=False):
                pairs[pair] += count
        if not pairs:
            break
        best = min(pairs, key=lambda pair: (-pairs[pair], pair))
        merges.append(best)
        vocab.setdefault(best[0] + best[1], len(vocab))
        words = _merge_pair(words, best)
    for special in ("<|startoftext|>", "<|endoftext|>"):
        vocab[special] = len(vocab)
    return CLIPTokenizer(vocab=vocab, merges=merges, model_max_length=max_length)


def _merge_pair(words, pair: tuple[str, str]):
    from collections import Counter

    merged: Counter[tuple[str, ...]] = Counter()
    for word, count in words.items():
        symbols, index = [], 0
        while index < len(word):
            if word[index : index + 2] == pair:
                symbols.append(pair[0] + pair[1])
                index += 2
            else:
                symbols.append(word[index])
                index += 1
        merged[tuple(symbols)] += count
    return merged


def train_t5_tokenizer(vocab_size: int = 300, max_length: int = 256):
    """A T5 tokenizer (SentencePiece-style Unigram, pad/eos/unk = 0/1/2) trained on CORPUS.

    The trainer's scores wobble in the last bits between runs (parallel sums) and the rare
    characters it re-adds come in hash order; rounding, one score for those characters and
    sorting the pieces make every build identical.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import T5Tokenizer

    backend = Tokenizer(models.Unigram())
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")]
    )
    trainer = trainers.UnigramTrainer(
        vocab_size=vocab_size, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>", show_progress=False
    )
    backend.train_from_iterator(CORPUS, trainer)
    trained = json.loads(backend.to_str())["model"]["vocab"]
    specials, pieces = trained[:3], [(piece, round(score, 8)) for piece, score in trained[3:]]
    # rare characters re-added after pruning get tail scores in hash order: give them one score
    floor = min(score for _, score in pieces)
    pieces = [(piece, floor if len(piece) == 1 and score < floor + 0.01 else score) for piece, score in pieces]
    pieces.sort(key=lambda item: (-item[1], item[0]))
    return T5Tokenizer(vocab=[tuple(item) for item in specials] + pieces, extra_ids=0, model_max_length=max_length)


# --- SD3 ----------------------------------------------------------------------------------

SD3_SCALES: dict[str, dict[str, Any]] = {
    # the recipe in shared/reference/tiny-models.md
    "tiny": {"layers": 2, "heads": 2, "clip": (32, 64), "t5": 128, "vae": [8, 16, 16, 16], "sample": 8},
    # an SD3-shaped model for GPU benchmarks: 12 joint blocks of width 768 (~200M transformer params)
    "mid": {"layers": 12, "heads": 12, "clip": (64, 128), "t5": 256, "vae": [32, 64, 64, 64], "sample": 64},
}


def sd3_components(scale: str = "tiny") -> dict[str, Any]:
    """Random-weight SD3 components (CLIP-L/G stand-ins, T5, MMDiT, VAE, flow-matching scheduler)."""
    import torch
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection, T5Config, T5EncoderModel

    spec = SD3_SCALES[scale]
    clip_tokenizer = train_clip_tokenizer()
    t5_tokenizer = train_t5_tokenizer()
    special = {
        "bos_token_id": clip_tokenizer.bos_token_id,
        "eos_token_id": clip_tokenizer.eos_token_id,
        "pad_token_id": clip_tokenizer.pad_token_id,
    }
    clip_encoders = []
    for width in spec["clip"]:
        torch.manual_seed(SEED)
        config = CLIPTextConfig(
            vocab_size=len(clip_tokenizer),
            hidden_size=width,
            intermediate_size=width * 2,
            num_hidden_layers=2,
            num_attention_heads=2,
            projection_dim=width,
            max_position_embeddings=77,
            **special,
        )
        clip_encoders.append(CLIPTextModelWithProjection(config).eval())
    torch.manual_seed(SEED)
    t5 = T5EncoderModel(_t5_config(T5Config, len(t5_tokenizer), spec["t5"])).eval()
    torch.manual_seed(SEED)
    transformer = SD3Transformer2DModel(
        sample_size=spec["sample"],
        patch_size=2,
        in_channels=16,
        out_channels=16,
        num_layers=spec["layers"],
        attention_head_dim=64,
        num_attention_heads=spec["heads"],
        joint_attention_dim=spec["t5"],
        caption_projection_dim=64 * spec["heads"],
        pooled_projection_dim=sum(spec["clip"]),
        pos_embed_max_size=max(32, spec["sample"] * 2),
    ).eval()
    torch.manual_seed(SEED)
    vae = _vae(AutoencoderKL, spec["vae"], latent_channels=16, scaling_factor=1.5305, shift_factor=0.0609)
    return {
        "transformer": transformer,
        "vae": vae,
        "scheduler": FlowMatchEulerDiscreteScheduler(shift=3.0),
        "text_encoder": clip_encoders[0],
        "tokenizer": clip_tokenizer,
        "text_encoder_2": clip_encoders[1],
        "tokenizer_2": clip_tokenizer,
        "text_encoder_3": t5,
        "tokenizer_3": t5_tokenizer,
    }


def build_sd3(out_dir: str | Path, scale: str = "tiny") -> Path:
    from diffusers import StableDiffusion3Pipeline

    pipe = StableDiffusion3Pipeline(**sd3_components(scale))
    return _save(pipe, out_dir)


# --- PixArt-Sigma ---------------------------------------------------------------------


def pixart_components() -> dict[str, Any]:
    """Random-weight PixArt-Sigma: T5 encoder, PixArt DiT (adaLN-single), SD-style VAE, DPM-Solver++."""
    import torch
    from diffusers import AutoencoderKL, DPMSolverMultistepScheduler, PixArtTransformer2DModel
    from transformers import T5Config, T5EncoderModel

    tokenizer = train_t5_tokenizer(max_length=300)
    torch.manual_seed(SEED)
    text_encoder = T5EncoderModel(_t5_config(T5Config, len(tokenizer), 128)).eval()
    torch.manual_seed(SEED)
    transformer = PixArtTransformer2DModel(
        sample_size=8,
        num_layers=2,
        patch_size=2,
        attention_head_dim=64,
        num_attention_heads=2,
        caption_channels=128,
        in_channels=4,
        cross_attention_dim=128,
        out_channels=8,
        attention_bias=True,
        activation_fn="gelu-approximate",
        num_embeds_ada_norm=1000,
        norm_type="ada_norm_single",
        norm_elementwise_affine=False,
        norm_eps=1e-6,
    ).eval()
    torch.manual_seed(SEED)
    vae = _vae(AutoencoderKL, [8, 16, 16, 16], latent_channels=4, scaling_factor=0.13025)
    return {
        "transformer": transformer,
        "vae": vae,
        "scheduler": DPMSolverMultistepScheduler(),
        "text_encoder": text_encoder,
        "tokenizer": tokenizer,
    }


def build_pixart(out_dir: str | Path) -> Path:
    from diffusers import PixArtSigmaPipeline

    return _save(PixArtSigmaPipeline(**pixart_components()), out_dir)


# --- Wan 2.1 text-to-video --------------------------------------------------------------


def wan_components() -> dict[str, Any]:
    """Random-weight Wan 2.1 T2V: UMT5 encoder, Wan 3D DiT, Wan causal video VAE, UniPC (flow)."""
    import torch
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanTransformer3DModel
    from transformers import UMT5Config, UMT5EncoderModel

    tokenizer = train_t5_tokenizer(max_length=512)
    torch.manual_seed(SEED)
    text_encoder = UMT5EncoderModel(_t5_config(UMT5Config, len(tokenizer), 128)).eval()
    torch.manual_seed(SEED)
    transformer = WanTransformer3DModel(
        patch_size=(1, 2, 2),
        num_attention_heads=2,
        attention_head_dim=64,
        in_channels=16,
        out_channels=16,
        text_dim=128,
        freq_dim=256,
        ffn_dim=256,
        num_layers=2,
        cross_attn_norm=True,
        qk_norm="rms_norm_across_heads",
        rope_max_seq_len=32,
    ).eval()
    torch.manual_seed(SEED)
    vae = AutoencoderKLWan(
        base_dim=8, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1, temperal_downsample=[False, True, True]
    ).eval()
    scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0)
    return {
        "transformer": transformer,
        "transformer_2": None,
        "vae": vae,
        "scheduler": scheduler,
        "text_encoder": text_encoder,
        "tokenizer": tokenizer,
    }


def build_wan(out_dir: str | Path) -> Path:
    from diffusers import WanPipeline

    out = _save(WanPipeline(**wan_components()), out_dir)
    # request defaults fit for the tiny model (the pipeline's own are 81 frames at 480x832)
    defaults = {"default_height": 32, "default_width": 32, "default_frames": 5, "default_steps": 10}
    (out / "omnistage.json").write_text(json.dumps({"diffusion_defaults": defaults}) + "\n")
    return out


# --- AR -> DiT ---------------------------------------------------------------------------


def build_ar_to_dit(out_dir: str | Path) -> Path:
    """The ar_to_dit family's layout: the tiny Qwen2 as prompt writer, the tiny SD3 as renderer."""
    from stages.tiny.llm import build_qwen2

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    build_qwen2(out / "prompter")
    build_sd3(out / "dit")
    (out / "config.json").write_text(json.dumps({"omnistage_family": "ar_to_dit"}) + "\n")
    return out


# --- shared pieces ----------------------------------------------------------------------


def _t5_config(config_class, vocab_size: int, d_model: int):
    return config_class(
        vocab_size=vocab_size,
        d_model=d_model,
        d_kv=64,
        d_ff=d_model * 2,
        num_layers=2,
        num_heads=2,
        feed_forward_proj="gated-gelu",
        is_encoder_decoder=False,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
    )


def _vae(
    vae_class, channels: list[int], latent_channels: int, scaling_factor: float, shift_factor: float | None = None
):
    """An SD-style KL VAE with 8x downscale (four blocks), as in the real models."""
    return vae_class(
        in_channels=3,
        out_channels=3,
        down_block_types=["DownEncoderBlock2D"] * len(channels),
        up_block_types=["UpDecoderBlock2D"] * len(channels),
        block_out_channels=channels,
        layers_per_block=1,
        latent_channels=latent_channels,
        norm_num_groups=8,
        sample_size=32,
        scaling_factor=scaling_factor,
        shift_factor=shift_factor,
        use_quant_conv=shift_factor is None,
        use_post_quant_conv=shift_factor is None,
    ).eval()


def _save(pipe, out_dir: str | Path) -> Path:
    """Write atomically: build into a sibling temp dir, then rename, so a half-built dir never loads."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir.parent) as tmp:
        staging = Path(tmp) / "pipe"
        pipe.save_pretrained(staging)
        if out_dir.exists():
            import shutil

            shutil.rmtree(out_dir)
        staging.rename(out_dir)
    return out_dir
