"""Qwen2.5-Omni: thinker (AR, text) -> talker (AR, codec codes) -> token2wav (generation, audio).

The stages reproduce `Qwen2_5OmniForConditionalGeneration.generate(..., return_audio=True)`
(transformers 5.19) exactly:

1. Thinker (stages/models/omni_thinker.py): `thinker.generate(output_hidden_states=True)` on the
   continuous-batching AR engine. Each step's output carries the rows the talker reads:
   `hidden_states[0]` (input embeddings, multimodal features merged) and `hidden_states[-1]`.
2. Talker (stages/models/qwen2_5_talker.py): the thinker -> talker input processor and the codec
   decode loop on the AR engine; it starts as soon as the thinker's second output is in.
3. Token2wav (`talker -> token2wav` processor: the codes themselves): DiT ODE from seeded
   noise with the speaker's `cond`/`ref_mel`, then BigVGAN (see stages/generation/token2wav.py).

Loading: each stage builds its own submodule from the sub-config and loads only the
tensors under `thinker.` / `talker.` / `token2wav.` (the talker also reads four rows of the
thinker's embedding matrix by slicing), or with `load_format: dummy` fills it with seeded random
weights (stages/models/omni_weights.py). Inputs (stages/models/omni_inputs.py): text, audio,
image and video parts; video is decoded with PyAV and patchified without torchvision, each clip's
`<|VIDEO|>` expanded to t x h x w / 4 tokens and its own audio track unused
(`use_audio_in_video=False`). Voices: the speakers of spk_dict.pt, and custom voices made from a
reference clip (stages/models/qwen2_5_voice_reference.py) whose conditioning travels with the request.
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

FAMILY = "qwen2_5_omni"
THINKER, TALKER, CODE2WAV = "thinker", "talker", "code2wav"

THINKER_SAMPLING = {"temperature": 0.0, "max_tokens": 256, "stop_token_ids": [151645, 151643]}
TALKER_SAMPLING = {"temperature": 0.9, "top_k": 40, "top_p": 0.8, "max_tokens": 2048}


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
            description="Qwen2.5-Omni thinker only: text out.",
            stages=[thinker],
            needs_chat_template=True,
        )
    return PipelineConfig(
        family=FAMILY,
        name=name,
        description="Qwen2.5-Omni: thinker (text) -> talker (codec codes) -> token2wav (24 kHz audio).",
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
                model_subdir="token2wav",
            ),
        ],
        edges=[
            EdgeConfig(source=0, target=1, carries="hidden", streaming=True),
            EdgeConfig(source=1, target=2, carries="codes", streaming=True),
        ],
        needs_chat_template=True,
    )


class Qwen25OmniFamily(ModelFamily):
    name = FAMILY
    pipelines = {
        DEFAULT_VARIANT: _pipeline("qwen2_5_omni", True),
        "thinker-only": _pipeline("qwen2_5_omni_thinker", False),
    }
    model_types = ("qwen2_5_omni",)

    def build_engine(self, stage_name: str, model_dir: str | Path, stage_deploy: StageDeployConfig) -> StageEngine:
        if stage_name == THINKER:
            return build_thinker(model_dir, stage_deploy)
        if stage_name == TALKER:
            return build_talker(model_dir, stage_deploy)
        if stage_name == CODE2WAV:
            return build_token2wav(model_dir, stage_deploy)
        raise ConfigError("stage", f"{FAMILY} has stages thinker, talker, code2wav; not {stage_name!r}")

    def prepare_request(
        self, request: StageRequest, model_dir: str | Path, stage_deploy: StageDeployConfig
    ) -> StageRequest:
        from stages.models.omni_inputs import prepare_omni_request
        from stages.models.omni_video_limits import deployed_limits

        proc = processor(str(model_dir))
        limits = deployed_limits(proc.video_processor.limits, stage_deploy.options)
        return prepare_omni_request(request, proc, limits)

    default_voice = "Chelsie"

    def voices(self, model_dir: str | Path) -> list[str]:
        return sorted(speakers(str(model_dir)))

    takes_voice_reference = True

    def voice_reference(self, model_dir: str | Path, samples, sample_rate: int):
        from stages.models.qwen2_5_voice_reference import derive

        return derive(str(model_dir), samples, sample_rate)

    def voice_reference_min_s(self, model_dir: str | Path) -> float:
        from stages.models.qwen2_5_voice_reference import min_seconds

        return min_seconds(str(model_dir))


@functools.lru_cache(maxsize=4)
def config(model_dir: str):
    from transformers import Qwen2_5OmniConfig

    return Qwen2_5OmniConfig.from_pretrained(model_dir)


@functools.lru_cache(maxsize=4)
def processor(model_dir: str):
    from transformers import Qwen2_5OmniProcessor

    from stages.models.omni_video_processor import attach_video_processor
    from stages.tiny.qwen_omni import load_processor

    return attach_video_processor(load_processor(model_dir, Qwen2_5OmniProcessor), model_dir)


@functools.lru_cache(maxsize=4)
def speakers(model_dir: str) -> dict[str, dict]:
    import torch

    path = Path(model_dir) / "spk_dict.pt"
    if not path.is_file():
        raise ConfigError("model", f"{model_dir} has no spk_dict.pt (the voices)")
    return torch.load(path, weights_only=True)


def _dtype(stage_deploy: StageDeployConfig):
    import torch

    return getattr(torch, stage_deploy.dtype)


def build_thinker(model_dir, stage_deploy: StageDeployConfig) -> StageEngine:
    from transformers import AutoTokenizer, Qwen2_5OmniThinkerForConditionalGeneration

    from stages.models.omni_thinker import build_thinker_engine
    from stages.models.omni_video_limits import deployed_limits
    from stages.models.omni_weights import load_submodule

    model_dir = str(model_dir)
    deployed_limits(processor(model_dir).video_processor.limits, stage_deploy.options)  # bad options fail the build
    thinker = load_submodule(
        model_dir,
        Qwen2_5OmniThinkerForConditionalGeneration,
        config(model_dir).thinker_config,
        "thinker.",
        device=stage_deploy.device,
        dtype=_dtype(stage_deploy),
        dummy_seed=dummy_seed(stage_deploy),
    )
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return build_thinker_engine(thinker, tokenizer, stage_deploy, hidden_layer=-1, stop_ids=())


def build_talker(model_dir, stage_deploy: StageDeployConfig) -> StageEngine:
    from transformers import Qwen2_5OmniTalkerForConditionalGeneration

    from stages.ar.torch_engine import ARTorchEngine
    from stages.models.omni_weights import load_submodule
    from stages.models.qwen2_5_talker import TALKER_EOS, TalkerAdapter, TalkerEngine, talker_thinker_rows

    model_dir = str(model_dir)
    talker_config = config(model_dir).talker_config
    talker = load_submodule(
        model_dir,
        Qwen2_5OmniTalkerForConditionalGeneration,
        talker_config,
        "talker.",
        device=stage_deploy.device,
        dtype=_dtype(stage_deploy),
        dummy_seed=dummy_seed(stage_deploy),
    )
    voices = {name: int(value["bos_token"]) for name, value in speakers(model_dir).items()}
    thinker_rows = talker_thinker_rows(
        model_dir, config(model_dir), voices, stage_deploy.device, _dtype(stage_deploy), dummy_seed(stage_deploy)
    )
    engine = ARTorchEngine(
        TalkerAdapter(talker), None, stage_deploy, device=stage_deploy.device, eos_token_ids=set(TALKER_EOS), stage_id=1
    )
    qwen_prompt = stage_deploy.options.get("talker_codec_prompt") == "qwen"
    return TalkerEngine(engine, thinker_rows, voices, qwen_prompt=qwen_prompt)


def build_token2wav(model_dir, stage_deploy: StageDeployConfig) -> StageEngine:
    from transformers import Qwen2_5OmniToken2WavModel

    from stages.generation.engine import GenerationEngine
    from stages.generation.token2wav import Token2WavDecoder
    from stages.generation.window_policy import window_policy
    from stages.models.omni_weights import load_submodule

    model_dir = str(model_dir)
    module = load_submodule(
        model_dir,
        Qwen2_5OmniToken2WavModel,
        config(model_dir).token2wav_config,
        "token2wav.",
        device=stage_deploy.device,
        dtype=_dtype(stage_deploy),
        dummy_seed=dummy_seed(stage_deploy),
    )
    options = stage_deploy.options
    cuda = str(stage_deploy.device).startswith("cuda")
    decoder = Token2WavDecoder(
        module,
        speakers(model_dir),
        device=stage_deploy.device,
        max_frames=stage_deploy.max_length,
        left_context=int(options.get("token2wav_left_context", 48)),
        lookahead=int(options.get("token2wav_lookahead", 12)),
        cuda_graphs=bool(options.get("token2wav_cuda_graphs", True)),
        max_batch=stage_deploy.max_batch,
        # The GPU recipe by default on CUDA; each part turns off with its option set to null / false.
        dit_autocast=options.get("token2wav_dit_autocast", "bfloat16" if cuda else None),
        vocoder_autocast=options.get("token2wav_vocoder_autocast"),
        compile_blocks=options.get("token2wav_compile", cuda),
        compile_vocoder=options.get("token2wav_vocoder_compile", cuda),
        block_attention=options.get("token2wav_block_attention", cuda),
    )
    policy = window_policy(
        stage_deploy, decoder.seconds_per_frame, decoder.lookahead, decoder.align, 96 if cuda else 192
    )
    engine = GenerationEngine(decoder, stage_deploy, stage_id=2, policy=policy)
    if options.get("token2wav_warm_up", True):
        engine.warm_up()
    return engine


family = Qwen25OmniFamily()
