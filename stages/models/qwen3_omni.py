"""Qwen3-Omni-MoE: thinker (AR, text) -> talker (AR + code predictor, 16-codebook frames) -> code2wav (audio).

The stages reproduce `Qwen3OmniMoeForConditionalGeneration.generate(..., return_audio=True)`
(transformers 5.19) exactly:

1. Thinker (stages/models/omni_thinker.py): `thinker.generate(output_hidden_states=True)` on the
   continuous-batching AR engine (deepstack visual features included); each step's output carries
   `hidden_states[0]` (input embeddings) and `hidden_states[accept_hidden_layer]`.
2. Talker (stages/models/qwen3_talker.py): the thinker -> talker input processor, code 0 of each
   frame on the AR engine and the 15 residual codes from the code predictor, batched across requests.
3. Code2wav: the frames, decoded in chunks with 25 frames of left context (`CODE2WAV_LEFT_CONTEXT`),
   batched across requests (stages/generation/code2wav.py).

The thinker's and talker's mixture-of-experts blocks run without host syncs (stages/ar/moe.py), so
their decode steps replay CUDA graphs; the code predictor runs as a batched, graph-captured loop
(stages/models/qwen3_code_predictor.py). Every stage follows its deploy config's dtype.

Inputs (stages/models/omni_inputs.py): text, audio, image and video parts; video is decoded
with PyAV and patchified without torchvision (`use_audio_in_video=False`). The talker's M-RoPE
positions take the thinker's image and video grids, the videos' seconds per grid and the audio
lengths, as transformers passes them. Audio input needs the talker config to carry the thinker's
`audio_config` (HF reads `talker.config.audio_config.n_window` in `get_rope_index`); the loader
sets it.
"""

from __future__ import annotations

import functools
from pathlib import Path

from stages.config import EdgeConfig, PipelineConfig, StageConfig, StageDeployConfig
from stages.engine import StageEngine
from stages.errors import ConfigError
from stages.models import DEFAULT_VARIANT, ModelFamily
from stages.models.dummy_weights import dummy_seed
from stages.models.omni_inputs import OMNI_INPUTS
from stages.protocol import StageRequest

FAMILY = "qwen3_omni"
THINKER, TALKER, CODE2WAV = "thinker", "talker", "code2wav"

THINKER_SAMPLING = {"temperature": 0.0, "max_tokens": 256, "stop_token_ids": [151645]}
CODE2WAV_LEFT_CONTEXT = 25
"""Frames of left context per code2wav chunk by default: transformers' own `chunked_decode` (which
`generate` uses beyond 300 frames) and vLLM-Omni decode with 25. "exact" (layers x (window - 1) + 8 =
576 frames for the 30B's code2wav) makes every chunk equal the whole-sequence decode at ~11x the
compute of a 25-frame chunk; see docs/qwen3-omni.md."""
TALKER_SAMPLING = {"temperature": 0.9, "top_k": 50, "top_p": 1.0, "max_tokens": 2048}


def _pipeline(name: str, with_audio: bool) -> PipelineConfig:
    thinker = StageConfig(
        id=0,
        name=THINKER,
        kind="ar",
        output="text",
        inputs=OMNI_INPUTS,
        model_subdir="thinker",
        default_sampling=THINKER_SAMPLING,
    )
    if not with_audio:
        return PipelineConfig(
            family=FAMILY,
            name=name,
            description="Qwen3-Omni thinker only: text out.",
            stages=[thinker],
            needs_chat_template=True,
        )
    return PipelineConfig(
        family=FAMILY,
        name=name,
        description="Qwen3-Omni-MoE: thinker (text) -> talker (16-codebook frames) -> code2wav (24 kHz audio).",
        stages=[
            thinker,
            StageConfig(
                id=1,
                name=TALKER,
                kind="ar",
                model_subdir="talker",
                default_sampling=TALKER_SAMPLING,
            ),
            StageConfig(
                id=2,
                name=CODE2WAV,
                kind="generation",
                output="audio",
                default_backend="generation",
                model_subdir="code2wav",
            ),
        ],
        edges=[
            EdgeConfig(source=0, target=1, carries="hidden", streaming=True),
            EdgeConfig(source=1, target=2, carries="codes", streaming=True),
        ],
        needs_chat_template=True,
    )


class Qwen3OmniFamily(ModelFamily):
    name = FAMILY
    pipelines = {DEFAULT_VARIANT: _pipeline("qwen3_omni", True), "thinker-only": _pipeline("qwen3_omni_thinker", False)}
    model_types = ("qwen3_omni_moe",)

    def build_engine(self, stage_name: str, model_dir: str | Path, stage_deploy: StageDeployConfig) -> StageEngine:
        if stage_name == THINKER:
            return build_thinker(model_dir, stage_deploy)
        if stage_name == TALKER:
            return build_talker(model_dir, stage_deploy)
        if stage_name == CODE2WAV:
            return build_code2wav(model_dir, stage_deploy)
        raise ConfigError("stage", f"{FAMILY} has stages thinker, talker, code2wav; not {stage_name!r}")

    def prepare_request(
        self, request: StageRequest, model_dir: str | Path, stage_deploy: StageDeployConfig
    ) -> StageRequest:
        from stages.models.omni_inputs import prepare_omni_request
        from stages.models.omni_video_limits import deployed_limits

        proc = processor(str(model_dir))
        limits = deployed_limits(proc.video_processor.limits, stage_deploy.options)
        return prepare_omni_request(request, proc, limits)

    default_voice = "ethan"

    def voices(self, model_dir: str | Path) -> list[str]:
        return voices(str(model_dir))


@functools.lru_cache(maxsize=4)
def config(model_dir: str):
    from transformers import Qwen3OmniMoeConfig

    return Qwen3OmniMoeConfig.from_pretrained(model_dir)


@functools.lru_cache(maxsize=4)
def processor(model_dir: str):
    from transformers import Qwen3OmniMoeProcessor

    from stages.models.omni_video_processor import attach_video_processor
    from stages.tiny.qwen_omni import load_processor

    return attach_video_processor(load_processor(model_dir, Qwen3OmniMoeProcessor), model_dir)


def voices(model_dir: str) -> list[str]:
    return sorted(config(model_dir).talker_config.speaker_id or {})


def _dtype(stage_deploy: StageDeployConfig):
    import torch

    return getattr(torch, stage_deploy.dtype)


def build_thinker(model_dir, stage_deploy: StageDeployConfig) -> StageEngine:
    from transformers import AutoTokenizer, Qwen3OmniMoeThinkerForConditionalGeneration

    from stages.ar.moe import use_grouped_moe
    from stages.models.omni_thinker import build_thinker_engine
    from stages.models.omni_video_limits import deployed_limits
    from stages.models.omni_weights import load_submodule

    model_dir = str(model_dir)
    deployed_limits(processor(model_dir).video_processor.limits, stage_deploy.options)  # bad options fail the build
    whole = config(model_dir)
    thinker = load_submodule(
        model_dir,
        Qwen3OmniMoeThinkerForConditionalGeneration,
        whole.thinker_config,
        "thinker.",
        device=stage_deploy.device,
        dtype=_dtype(stage_deploy),
        dummy_seed=dummy_seed(stage_deploy),
    )
    use_grouped_moe(thinker.model)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    hidden_layer = whole.talker_config.accept_hidden_layer
    return build_thinker_engine(
        thinker, tokenizer, stage_deploy, hidden_layer=hidden_layer, stop_ids=(), deepstack=True
    )


def build_talker(model_dir, stage_deploy: StageDeployConfig) -> StageEngine:
    import torch
    from transformers import Qwen3OmniMoeTalkerForConditionalGeneration

    from stages.ar.moe import use_grouped_moe
    from stages.ar.torch_engine import ARTorchEngine
    from stages.models.omni_weights import load_submodule, thinker_embedding_rows
    from stages.models.qwen3_code_predictor import CodePredictor
    from stages.models.qwen3_talker import TalkerAdapter, TalkerEngine

    model_dir = str(model_dir)
    whole = config(model_dir)
    talker = load_submodule(
        model_dir,
        Qwen3OmniMoeTalkerForConditionalGeneration,
        whole.talker_config,
        "talker.",
        device=stage_deploy.device,
        dtype=_dtype(stage_deploy),
        dummy_seed=dummy_seed(stage_deploy),
    )
    talker.config.audio_config = whole.thinker_config.audio_config
    use_grouped_moe(talker.model)
    special_ids = [whole.tts_bos_token_id, whole.tts_eos_token_id, whole.tts_pad_token_id]
    rows = thinker_embedding_rows(
        model_dir,
        whole.thinker_config.text_config,
        special_ids,
        device=stage_deploy.device,
        dummy_seed=dummy_seed(stage_deploy),
    )
    with torch.inference_mode():
        bos, eos, pad = talker.text_projection(rows.to(_dtype(stage_deploy))[None]).chunk(3, dim=1)
    specials = {"bos": bos[0, 0], "eos": eos[0, 0], "pad": pad[0, 0]}
    eos_ids = {whole.talker_config.codec_eos_token_id}
    options = stage_deploy.options
    predictor = CodePredictor(
        talker.code_predictor,
        max_batch=stage_deploy.max_batch,
        device=stage_deploy.device,
        cuda_graphs=options.get("cuda_graphs", True) is True,
        compile=options.get("compile", False) is True,
        seed=int(options.get("seed", 0)),
    )
    engine = ARTorchEngine(
        TalkerAdapter(talker, predictor),
        None,
        stage_deploy,
        device=stage_deploy.device,
        eos_token_ids=eos_ids,
        stage_id=1,
    )
    return TalkerEngine(engine, whole, specials)


def build_code2wav(model_dir, stage_deploy: StageDeployConfig) -> StageEngine:
    from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import Qwen3OmniMoeCode2Wav

    from stages.generation.code2wav import Code2WavDecoder
    from stages.generation.engine import GenerationEngine
    from stages.generation.window_policy import window_policy
    from stages.models.omni_weights import load_submodule

    model_dir = str(model_dir)
    options = stage_deploy.options
    module = load_submodule(
        model_dir,
        Qwen3OmniMoeCode2Wav,
        config(model_dir).code2wav_config,
        "code2wav.",
        device=stage_deploy.device,
        dtype=_dtype(stage_deploy),
        dummy_seed=dummy_seed(stage_deploy),
    )
    decoder = Code2WavDecoder(
        module,
        device=stage_deploy.device,
        left_context=_left_context(options.get("code2wav_left_context", CODE2WAV_LEFT_CONTEXT)),
        cuda_graphs=options.get("cuda_graphs", True) is True,
        max_graphs=int(options.get("code2wav_max_graphs", 64)),
        max_batch=stage_deploy.max_batch,
    )
    policy = window_policy(stage_deploy, decoder.seconds_per_frame, decoder.lookahead, 1, stage_deploy.async_chunk_size)
    return GenerationEngine(decoder, stage_deploy, stage_id=2, policy=policy)


def _left_context(value) -> int | None:
    """`options.code2wav_left_context`: frames of left context per chunk, or "exact" (None: the decoder's
    exact context, with which a chunked decode equals the whole-sequence one)."""
    if value == "exact":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError("options.code2wav_left_context", f'must be a number of frames >= 0 or "exact", got {value!r}')
    return value


family = Qwen3OmniFamily()
