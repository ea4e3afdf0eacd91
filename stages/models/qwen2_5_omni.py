"""Qwen2.5-Omni: thinker (AR, text) -> talker (AR, codec codes) -> token2wav (generation, audio).

Exact dataflow of `Qwen2_5OmniForConditionalGeneration.generate(..., return_audio=True)`
(transformers 5.19), which the stages reproduce:

1. Thinker: `thinker.generate(output_hidden_states=True)`. Step 0 is the prompt prefill,
   step k >= 1 feeds generated token g_{k-1}. For every step it keeps `hidden_states[0]`
   (the input embeddings, multimodal features merged) and `hidden_states[-1]` (last layer).
   The last generated token g_{n-1} is never fed back, so it has no rows.
2. Talker input (`stage input processor thinker -> talker`, on the talker's host):
   - prompt part: `hidden[-1] + embeds` over the prompt, with the embeddings of audio, image
     and video placeholder positions zeroed (the hidden states are kept);
   - then the thinker's embedding of the speaker's `bos_token` (spk_dict.pt: Chelsie 151872,
     Ethan 151870), then r_0 = hidden(g_0) + embed(g_0);
   - everything goes through `thinker_to_talker_proj`; positions are plain 0..T-1 (3 equal rows);
   - transformers 5.19 quirk: `Qwen2_5OmniTalkerForConditionalGeneration.forward` adds the codec
     embeddings of `codec_pad`/`codec_bos` to the last two rows and uses `get_rope_index` positions
     only when it receives an `attention_mask`, and its `generate()` never passes one, so the
     reference adds nothing and counts positions 0..T-1. The stage mirrors that by default (the
     oracle); `options.talker_codec_prompt: "qwen"` on the talker stage restores the original
     Qwen behaviour (the two codec embeddings added, mRoPE positions over `prompt + [speaker_bos,
     g_0]` with the thinker's grids and audio lengths, decode at `past + rope_delta`);
   - decode step k feeds `codec_embed(c_{k-1}) + reply[k-1]`, where the reply queue is
     r_1 .. r_{n-2}, then embed(tts_text_eos 151861), then embed(tts_text_pad 151859) for
     every later step. Streaming: step k waits until r_k exists (the thinker produced g_{k+1})
     or the thinker finished.
   - sampling (HF defaults): top_k 40, top_p 0.8, temperature 0.9, repetition penalty 1.05
     over `[codec_mask]*L + [codec_pad, codec_bos] + codes`, `codec_bos` suppressed, stop on
     8292 or 8294 (not emitted). Greedy oracle: temperature 0 here, `talker_do_sample=False`
     there; the repetition penalty applies on both sides.
3. Token2wav (`talker -> token2wav` processor: the codes themselves): DiT ODE from seeded
   noise with the speaker's `cond`/`ref_mel`, then BigVGAN (see stages/generation/token2wav.py).

Loading: each stage builds its own submodule from the sub-config and loads only the
tensors under `thinker.` / `talker.` / `token2wav.` (the talker also reads four rows of the
thinker's embedding matrix by slicing). Inputs: text, audio and image parts (video needs
torchvision, absent here). Voices: the speakers of spk_dict.pt.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from stages.config import EdgeConfig, PipelineConfig, StageConfig, StageDeployConfig
from stages.engine import StageEngine
from stages.errors import ConfigError, InvalidRequest
from stages.models import DEFAULT_VARIANT, ModelFamily
from stages.models.omni_sampling import choose_token, make_generator
from stages.models.omni_session_engine import SessionEngine, new_output
from stages.protocol import SamplingParams, StageOutput, StageRequest
from stages.tensors import from_wire

FAMILY = "qwen2_5_omni"
THINKER, TALKER, CODE2WAV = "thinker", "talker", "code2wav"
TALKER_EOS = (8292, 8294)
REPETITION_PENALTY = 1.05

THINKER_SAMPLING = {"temperature": 0.0, "max_tokens": 256, "stop_token_ids": [151645, 151643]}
TALKER_SAMPLING = {"temperature": 0.9, "top_k": 40, "top_p": 0.8, "max_tokens": 2048}


def _pipeline(name: str, with_audio: bool) -> PipelineConfig:
    thinker = StageConfig(
        id=0,
        name=THINKER,
        kind="ar",
        output="text",
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
                input_processor="stages.models.qwen2_5_omni:TalkerSession",
                default_sampling=TALKER_SAMPLING,
            ),
            StageConfig(
                id=2,
                name=CODE2WAV,
                kind="generation",
                output="audio",
                default_backend="generation",
                model_subdir="token2wav",
                input_processor="stages.generation.token2wav:Token2WavDecoder",
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

    def prepare_request(self, request: StageRequest, model_dir: str | Path) -> StageRequest:
        from stages.models.omni_inputs import prepare_omni_request

        return prepare_omni_request(request, processor(str(model_dir)), list(speakers(str(model_dir))))


@functools.lru_cache(maxsize=4)
def config(model_dir: str):
    from transformers import Qwen2_5OmniConfig

    return Qwen2_5OmniConfig.from_pretrained(model_dir)


@functools.lru_cache(maxsize=4)
def processor(model_dir: str):
    from transformers import Qwen2_5OmniProcessor

    from stages.tiny.qwen_omni import load_processor

    return load_processor(model_dir, Qwen2_5OmniProcessor)


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

    from stages.models.omni_thinker import ThinkerOptions, ThinkerSession
    from stages.models.omni_weights import load_submodule

    model_dir = str(model_dir)
    thinker_config = config(model_dir).thinker_config
    model = load_submodule(
        model_dir,
        Qwen2_5OmniThinkerForConditionalGeneration,
        thinker_config,
        "thinker.",
        device=stage_deploy.device,
        dtype=_dtype(stage_deploy),
    )
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    options = ThinkerOptions(
        hidden_layer=-1, hidden_for_generated=True, send_rows=stage_deploy.options.get("talker_inputs", True)
    )
    return SessionEngine(
        0,
        lambda request: ThinkerSession(model, tokenizer, request, options, stage_deploy.device),
        stage_deploy.max_batch,
    )


def build_talker(model_dir, stage_deploy: StageDeployConfig) -> StageEngine:
    from transformers import Qwen2_5OmniTalkerForConditionalGeneration

    from stages.models.omni_weights import load_rows, load_submodule

    model_dir = str(model_dir)
    talker_config = config(model_dir).talker_config
    talker = load_submodule(
        model_dir,
        Qwen2_5OmniTalkerForConditionalGeneration,
        talker_config,
        "talker.",
        device=stage_deploy.device,
        dtype=_dtype(stage_deploy),
    )
    voices = {name: int(value["bos_token"]) for name, value in speakers(model_dir).items()}
    text_ids = sorted({*voices.values(), talker_config.tts_text_end_token_id, talker_config.tts_text_pad_token_id})
    rows = load_rows(model_dir, "thinker.model.embed_tokens.weight", text_ids, stage_deploy.device)
    thinker_rows = {token: rows[index].to(_dtype(stage_deploy)) for index, token in enumerate(text_ids)}
    qwen_prompt = stage_deploy.options.get("talker_codec_prompt") == "qwen"

    def open_session(request):
        return TalkerSession(talker, thinker_rows, voices, request, stage_deploy.device, qwen_prompt=qwen_prompt)

    return SessionEngine(1, open_session, stage_deploy.max_batch)


def build_token2wav(model_dir, stage_deploy: StageDeployConfig) -> StageEngine:
    import torch
    from transformers import Qwen2_5OmniToken2WavModel

    from stages.generation.engine import GenerationEngine
    from stages.generation.token2wav import Token2WavDecoder
    from stages.models.omni_weights import load_submodule

    model_dir = str(model_dir)
    module = load_submodule(
        model_dir,
        Qwen2_5OmniToken2WavModel,
        config(model_dir).token2wav_config,
        "token2wav.",
        device=stage_deploy.device,
        dtype=torch.float32,
    )
    options = stage_deploy.options
    decoder = Token2WavDecoder(
        module,
        speakers(model_dir),
        device=stage_deploy.device,
        max_frames=stage_deploy.max_length,
        left_context=int(options.get("token2wav_left_context", 48)),
        lookahead=int(options.get("token2wav_lookahead", 12)),
    )
    return GenerationEngine(decoder, stage_deploy, stage_id=2)


class TalkerSession:
    """One request on the talker: the thinker -> talker input processor and the codec decode loop."""

    def __init__(
        self,
        talker,
        thinker_rows: dict[int, Any],
        voices: dict[str, int],
        request: StageRequest,
        device: str,
        *,
        qwen_prompt: bool = False,
    ):
        import torch
        from transformers import DynamicCache

        self.torch, self.talker, self.device = torch, talker, device
        self.qwen_prompt = qwen_prompt
        self.thinker_rows = thinker_rows
        voice = request.params.get("voice") or "Chelsie"
        by_lower = {name.lower(): token for name, token in voices.items()}
        if str(voice).lower() not in by_lower:
            raise InvalidRequest("voice", f"unknown voice {voice!r}; this model has {sorted(voices)}")
        self.speaker_bos = by_lower[str(voice).lower()]
        if "thinker_prompt_ids" not in request.params:
            raise InvalidRequest("params.thinker_prompt_ids", "the talker needs the thinker's first output")
        self.prompt_ids: list[int] = list(request.params["thinker_prompt_ids"])
        self.grids = request.params.get("image_grid_thw")
        self.audio_lengths = request.params.get("audio_feature_lengths")
        self.use_audio_in_video = bool(request.params.get("use_audio_in_video", False))
        self.sampling = request.sampling or SamplingParams(**TALKER_SAMPLING)
        self.generator = make_generator(self.sampling.seed)
        self.config = talker.config
        self.dtype = next(talker.parameters()).dtype
        self.cache = DynamicCache(config=talker.config)
        self.tokens: list[int] = []
        self.embeds: list[Any] = []
        self.hidden: list[Any] = []
        self.upstream_done = False
        self.codes: list[int] = []
        self.forwards = 0
        self.rope_deltas = None
        self.finished = False
        self.add_chunk(request)

    def add_chunk(self, request: StageRequest) -> None:
        self.tokens.extend(request.prompt_token_ids or [])
        for key, store in (("embeds", self.embeds), ("hidden", self.hidden)):
            if key in request.payloads:
                store.append(from_wire(request.payloads[key], self.device).to(self.dtype))
        self.upstream_done = self.upstream_done or request.finished
        if request.params.get("source_finish_reason") == "error":
            raise InvalidRequest("thinker", "the thinker failed")

    @property
    def rows(self) -> int:
        return sum(part.shape[0] for part in self.embeds)

    def generated_rows(self) -> int:
        return self.rows - len(self.prompt_ids)

    def ready(self) -> bool:
        if self.finished:
            return False
        if self.forwards == 0:
            return self.generated_rows() >= 1 or self.upstream_done
        return self.upstream_done or self.forwards < self.generated_rows()

    def step(self) -> StageOutput:
        torch = self.torch
        if self.forwards == 0 and self.generated_rows() < 1:
            return self._finish("stop")  # a one-token reply has nothing to speak (HF cannot either)
        with torch.no_grad():
            logits = self._prefill() if self.forwards == 0 else self._decode()
        self.forwards += 1
        history = [self.config.tts_codec_mask_token_id] * len(self.prompt_ids)
        history += [self.config.tts_codec_pad_token_id, self.config.tts_codec_start_token_id] + self.codes
        code = choose_token(
            logits,
            self.sampling,
            self.generator,
            history=history,
            repetition_penalty=REPETITION_PENALTY,
            suppress=[self.config.tts_codec_start_token_id],
        )
        if code in TALKER_EOS:
            return self._finish("stop")
        self.codes.append(code)
        done = self.forwards >= self.sampling.max_tokens
        if done:
            self.finished = True
        return new_output(modality="tokens", token_ids=[code], finished=done, finish_reason="length" if done else None)

    def _finish(self, reason: str) -> StageOutput:
        self.finished = True
        return new_output(modality="tokens", finished=True, finish_reason=reason)

    def _all(self, parts):
        return self.torch.cat(parts) if len(parts) > 1 else parts[0]

    def _prefill(self):
        torch, talker = self.torch, self.talker
        embeds, hidden = self._all(self.embeds), self._all(self.hidden)
        prompt_len = len(self.prompt_ids)
        prompt_ids = torch.tensor(self.prompt_ids, device=self.device)
        placeholders = torch.tensor(
            [self.config.audio_token_index, self.config.image_token_index, self.config.video_token_index],
            device=self.device,
        )
        prompt_embeds = embeds[:prompt_len].masked_fill(torch.isin(prompt_ids, placeholders).unsqueeze(-1), 0.0)
        reply_0 = hidden[prompt_len] + embeds[prompt_len]
        inputs = torch.cat(
            [hidden[:prompt_len] + prompt_embeds, self.thinker_rows[self.speaker_bos][None], reply_0[None]]
        )
        if not self.qwen_prompt:
            total = inputs.shape[0]
            self.rope_deltas = torch.zeros((1, 1), dtype=torch.long, device=self.device)
            positions = torch.arange(total, device=self.device).view(1, 1, -1).expand(3, 1, -1)
            return self._forward(inputs[None], positions, total)
        codec_embed = talker.get_input_embeddings()
        inputs[-1] += codec_embed(torch.tensor(self.config.tts_codec_start_token_id, device=self.device))
        inputs[-2] += codec_embed(torch.tensor(self.config.tts_codec_pad_token_id, device=self.device))
        text_ids = torch.tensor([self.prompt_ids + [self.speaker_bos, self.tokens[0]]], device=self.device)
        mask = torch.ones_like(text_ids)
        positions, self.rope_deltas = talker.get_rope_index(
            text_ids,
            torch.tensor(self.grids, device=self.device) if self.grids else None,
            None,
            mask,
            self.use_audio_in_video,
            torch.tensor(self.audio_lengths, device=self.device) if self.audio_lengths else None,
            None,
        )
        return self._forward(inputs[None], positions, mask.shape[1])

    def _decode(self):
        torch, talker = self.torch, self.talker
        past = self.cache.get_seq_length()
        code_embed = talker.get_input_embeddings()(torch.tensor([[self.codes[-1]]], device=self.device))
        inputs = code_embed + self._reply(self.forwards - 1)[None, None]
        positions = (torch.arange(1, device=self.device).view(1, 1, -1) + past + self.rope_deltas).expand(3, 1, 1)
        return self._forward(inputs, positions, past + 1)

    def _reply(self, index: int):
        """Reply queue entry `index`: r_{index+1}, then tts_text_eos, then tts_text_pad forever."""
        prompt_len = len(self.prompt_ids)
        available = self.generated_rows() - 1
        if index < available:
            row = prompt_len + 1 + index
            embeds, hidden = self._all(self.embeds), self._all(self.hidden)
            return hidden[row] + embeds[row]
        if index == available:
            return self.thinker_rows[self.config.tts_text_end_token_id]
        return self.thinker_rows[self.config.tts_text_pad_token_id]

    def _forward(self, inputs, positions, total: int):
        talker, torch = self.talker, self.torch
        output = talker.model(
            inputs_embeds=talker.thinker_to_talker_proj(inputs),
            attention_mask=torch.ones((1, total), dtype=torch.long, device=self.device),
            position_ids=positions,
            past_key_values=self.cache,
            use_cache=True,
        )
        return talker.codec_head(output.last_hidden_state[:, -1]).float()[0]


family = Qwen25OmniFamily()
