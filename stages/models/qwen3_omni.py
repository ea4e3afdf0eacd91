"""Qwen3-Omni-MoE: thinker (AR, text) -> talker (AR + code predictor, 16-codebook frames) -> code2wav (audio).

Exact dataflow of `Qwen3OmniMoeForConditionalGeneration.generate(..., return_audio=True)`
(transformers 5.19), which the stages reproduce:

1. Thinker: `thinker.generate(output_hidden_states=True)`; per step `hidden_states[0]`
   (input embeddings) and `hidden_states[accept_hidden_layer]`. The last generated token has
   no rows (it is never fed back).
2. Talker input (thinker -> talker processor, on the talker's host):
   - user part: every prompt position whose turn is a user turn (the token after the latest
     `<|im_start|>` is `user` 872), in order: `hidden_projection(hidden)` at audio/image/video
     placeholder positions, `text_projection(embeds)` elsewhere; ids kept for positions;
   - assistant part from the last `<|im_start|>assistant`: `text_projection(embeds)` of its
     first 3 tokens, 4 x tts_pad, tts_bos, the first generated token; plus the talker's codec
     embeddings of [nothink, think_bos, think_eos, speaker, codec_pad, codec_bos] on the last 6
     rows (zeros on the first 3); ids `tts_pad` there;
   - trailing text: `text_projection(embeds)` of g_1 .. g_{n-2}, then tts_eos, then tts_pad for
     every later step (tts specials: `text_projection(thinker_embed([tts_bos, tts_eos, tts_pad]))`);
   - positions: plain 0..T-1 for text-only input, else `get_rope_index` over the talker ids
     with the thinker's image/video grids, seconds per video grid and audio lengths; decode at
     `past + rope_delta`.
3. Talker decode step k: the code predictor (`code_predictor.generate(inputs_embeds=[last
   hidden of the previous talker step, codec_embed(c0_{k-1})], max_new_tokens=15)`) draws the 15
   residual codes of frame k-1; the next input is the sum of the 16 code embeddings (code 0 by
   the talker's embedding, residual i by the predictor's embedding i-1; the last residual's
   embedding is looked up directly) plus trailing[k-1]. Sampling: top_k 50, top_p 1.0,
   temperature 0.9, repetition penalty 1.05 over the generated code-0s, the top 1024 ids
   except codec_eos (2150) suppressed, stop on 2150. Code predictor: greedy when the talker is
   greedy, else top_k 50 / top_p 0.8 (transformers' global RNG: sampled residuals are not
   seeded per request). Greedy oracle: temperature 0 here, `talker_do_sample=False` there.
4. Code2wav: the frames, decoded in chunks with exact left context (stages/generation/code2wav.py).

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
from typing import Any

from stages.config import EdgeConfig, PipelineConfig, StageConfig, StageDeployConfig
from stages.engine import StageEngine
from stages.errors import ConfigError, InvalidRequest
from stages.models import DEFAULT_VARIANT, ModelFamily
from stages.models.omni_sampling import choose_token, make_generator
from stages.models.omni_session_engine import SessionEngine, new_output
from stages.protocol import SamplingParams, StageOutput, StageRequest
from stages.tensors import from_wire, to_wire

FAMILY = "qwen3_omni"
THINKER, TALKER, CODE2WAV = "thinker", "talker", "code2wav"
REPETITION_PENALTY = 1.05
DEFAULT_VOICE = "ethan"

THINKER_SAMPLING = {"temperature": 0.0, "max_tokens": 256, "stop_token_ids": [151645]}
TALKER_SAMPLING = {"temperature": 0.9, "top_k": 50, "top_p": 1.0, "max_tokens": 2048}


def _pipeline(name: str, with_audio: bool) -> PipelineConfig:
    thinker = StageConfig(
        id=0, name=THINKER, kind="ar", output="text", model_subdir="thinker", default_sampling=THINKER_SAMPLING
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
                input_processor="stages.models.qwen3_omni:TalkerSession",
                default_sampling=TALKER_SAMPLING,
            ),
            StageConfig(
                id=2,
                name=CODE2WAV,
                kind="generation",
                output="audio",
                default_backend="generation",
                model_subdir="code2wav",
                input_processor="stages.generation.code2wav:Code2WavDecoder",
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

    def prepare_request(self, request: StageRequest, model_dir: str | Path) -> StageRequest:
        from stages.models.omni_inputs import prepare_omni_request
        from stages.models.omni_video_limits import video_limits

        proc = processor(str(model_dir))
        limits = video_limits(model_dir, proc.video_processor.limits)
        return prepare_omni_request(request, proc, voices(str(model_dir)), limits)


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

    from stages.models.omni_thinker import build_thinker_engine
    from stages.models.omni_video_limits import deploy_limits
    from stages.models.omni_weights import load_submodule

    model_dir = str(model_dir)
    deploy_limits(model_dir, processor(model_dir).video_processor.limits, stage_deploy.options)
    whole = config(model_dir)
    thinker = load_submodule(
        model_dir,
        Qwen3OmniMoeThinkerForConditionalGeneration,
        whole.thinker_config,
        "thinker.",
        device=stage_deploy.device,
        dtype=_dtype(stage_deploy),
    )
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    hidden_layer = whole.talker_config.accept_hidden_layer
    return build_thinker_engine(
        thinker, tokenizer, stage_deploy, hidden_layer=hidden_layer, stop_ids=(), deepstack=True
    )


def build_talker(model_dir, stage_deploy: StageDeployConfig) -> StageEngine:
    from transformers import Qwen3OmniMoeTalkerForConditionalGeneration

    from stages.models.omni_weights import load_rows, load_submodule

    model_dir = str(model_dir)
    whole = config(model_dir)
    talker = load_submodule(
        model_dir,
        Qwen3OmniMoeTalkerForConditionalGeneration,
        whole.talker_config,
        "talker.",
        device=stage_deploy.device,
        dtype=_dtype(stage_deploy),
    )
    talker.config.audio_config = whole.thinker_config.audio_config
    special_ids = [whole.tts_bos_token_id, whole.tts_eos_token_id, whole.tts_pad_token_id]
    rows = load_rows(model_dir, "thinker.model.embed_tokens.weight", special_ids, stage_deploy.device)
    with __import__("torch").no_grad():
        bos, eos, pad = talker.text_projection(rows.to(_dtype(stage_deploy))[None]).chunk(3, dim=1)
    specials = {"bos": bos[0, 0], "eos": eos[0, 0], "pad": pad[0, 0]}
    return SessionEngine(
        1, lambda request: TalkerSession(talker, whole, specials, request, stage_deploy.device), stage_deploy.max_batch
    )


def build_code2wav(model_dir, stage_deploy: StageDeployConfig) -> StageEngine:
    import torch
    from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import Qwen3OmniMoeCode2Wav

    from stages.generation.code2wav import Code2WavDecoder
    from stages.generation.engine import GenerationEngine
    from stages.models.omni_weights import load_submodule

    model_dir = str(model_dir)
    module = load_submodule(
        model_dir,
        Qwen3OmniMoeCode2Wav,
        config(model_dir).code2wav_config,
        "code2wav.",
        device=stage_deploy.device,
        dtype=torch.float32,
    )
    left = stage_deploy.options.get("code2wav_left_context")
    decoder = Code2WavDecoder(module, device=stage_deploy.device, left_context=None if left is None else int(left))
    return GenerationEngine(decoder, stage_deploy, stage_id=2)


class TalkerSession:
    """One request on the talker: the thinker -> talker input processor, code-0 decoding and the code predictor."""

    def __init__(self, talker, whole_config, specials: dict[str, Any], request: StageRequest, device: str):
        import torch
        from transformers import DynamicCache

        self.torch, self.talker, self.device, self.specials = torch, talker, device, specials
        self.whole, self.config = whole_config, talker.config
        voice = str(request.params.get("voice") or DEFAULT_VOICE).lower()
        speaker_ids = self.config.speaker_id or {}
        if voice not in speaker_ids:
            raise InvalidRequest("voice", f"unknown voice {voice!r}; this model has {sorted(speaker_ids)}")
        self.speaker_id = speaker_ids[voice]
        if "thinker_prompt_ids" not in request.params:
            raise InvalidRequest("params.thinker_prompt_ids", "the talker needs the thinker's first output")
        self.prompt_ids: list[int] = list(request.params["thinker_prompt_ids"])
        self.grids = request.params.get("image_grid_thw")
        self.video_grids = request.params.get("video_grid_thw")
        self.video_seconds = request.params.get("video_second_per_grid")
        self.audio_lengths = request.params.get("audio_feature_lengths")
        self.sampling = request.sampling or SamplingParams(**TALKER_SAMPLING)
        self.generator = make_generator(self.sampling.seed)
        vocab = self.config.text_config.vocab_size
        self.suppress = [i for i in range(vocab - 1024, vocab) if i != self.config.codec_eos_token_id]
        self.cache = DynamicCache(config=self.config.text_config)
        self.embeds: list[Any] = []
        self.hidden: list[Any] = []
        self.upstream_done = False
        self.code0: list[int] = []
        self.forwards = 0
        self.last_hidden = None
        self.rope_deltas = None
        self.trailing = None
        self.trailing_rows = -1
        self.finished = False
        self.add_chunk(request)

    def add_chunk(self, request: StageRequest) -> None:
        for key, store in (("embeds", self.embeds), ("hidden", self.hidden)):
            if key in request.payloads:
                store.append(from_wire(request.payloads[key], self.device))
        self.upstream_done = self.upstream_done or request.finished

    def generated_rows(self) -> int:
        return sum(part.shape[0] for part in self.embeds) - len(self.prompt_ids)

    def ready(self) -> bool:
        if self.finished:
            return False
        if self.forwards == 0:
            return self.generated_rows() >= 1 or self.upstream_done
        return self.upstream_done or self.forwards < self.generated_rows()

    def step(self) -> StageOutput | None:
        torch = self.torch
        if self.forwards == 0 and self.generated_rows() < 1:
            return self._finish(None, "stop")
        with torch.no_grad():
            if self.forwards == 0:
                frame, logits = None, self._prefill()
            else:
                frame, logits = self._decode()
        self.forwards += 1
        code = choose_token(
            logits,
            self.sampling,
            self.generator,
            history=self.code0,
            repetition_penalty=REPETITION_PENALTY,
            suppress=self.suppress,
        )
        if code == self.config.codec_eos_token_id:
            return self._finish(frame, "stop")
        self.code0.append(code)
        if self.forwards >= self.sampling.max_tokens:
            return self._finish(frame, "length")
        if frame is None:
            return None
        return new_output(modality="tokens", payloads={"codes": to_wire(frame)})

    def _finish(self, frame, reason: str) -> StageOutput:
        self.finished = True
        payloads = {} if frame is None else {"codes": to_wire(frame)}
        return new_output(modality="tokens", payloads=payloads, finished=True, finish_reason=reason)

    def _all(self, parts):
        return self.torch.cat(parts) if len(parts) > 1 else parts[0]

    def _prefill(self):
        torch, talker, whole = self.torch, self.talker, self.whole
        embeds, hidden = self._all(self.embeds), self._all(self.hidden)
        prompt_len = len(self.prompt_ids)
        ids = torch.tensor(self.prompt_ids, device=self.device)
        thinker = whole.thinker_config
        mm = torch.isin(
            ids,
            torch.tensor([thinker.audio_token_id, thinker.image_token_id, thinker.video_token_id], device=self.device),
        )
        user_rows = torch.empty(
            (prompt_len, self.config.text_config.hidden_size), dtype=embeds.dtype, device=self.device
        )
        if mm.any():
            user_rows[mm] = talker.hidden_projection(hidden[:prompt_len][mm][None])[0]
        user_rows[~mm] = talker.text_projection(embeds[:prompt_len][~mm][None])[0]
        user = self._user_positions()
        assistant_start = self._assistant_start()
        assistant = self._assistant_hidden(embeds, assistant_start)
        pad, bos = self.specials["pad"], self.specials["bos"]
        assistant_text = torch.cat([assistant[:3], pad.expand(4, -1), bos[None], assistant[3:4]])
        codec_ids = torch.tensor(
            [
                self.config.codec_nothink_id,
                self.config.codec_think_bos_id,
                self.config.codec_think_eos_id,
                self.speaker_id,
                self.config.codec_pad_id,
                self.config.codec_bos_id,
            ],
            device=self.device,
        )
        codec = torch.cat(
            [
                torch.zeros((3, assistant.shape[-1]), dtype=assistant.dtype, device=self.device),
                talker.get_input_embeddings()(codec_ids),
            ]
        )
        inputs = torch.cat([user_rows[user], assistant_text + codec])[None]
        talker_ids = torch.cat([ids[user], torch.full((9,), whole.tts_pad_token_id, device=self.device)])[None]
        mask = torch.ones_like(talker_ids)
        if self.audio_lengths is not None or self.grids or self.video_grids:
            positions, self.rope_deltas = talker.get_rope_index(
                talker_ids,
                self._tensor(self.grids),
                self._tensor(self.video_grids),
                mask,
                False,
                self._tensor(self.audio_lengths),
                self._tensor(self.video_seconds),
            )
        else:
            positions = torch.arange(talker_ids.shape[1], device=self.device).view(1, 1, -1).expand(3, 1, -1)
            self.rope_deltas = torch.zeros((1, 1), dtype=torch.long, device=self.device)
        return self._forward(inputs, positions, talker_ids.shape[1])

    def _tensor(self, values):
        return None if values is None else self.torch.tensor(values, device=self.device)

    def _user_positions(self):
        torch = self.torch
        user, role = [], None
        for index, token in enumerate(self.prompt_ids):
            if token == self.whole.im_start_token_id and index + 1 < len(self.prompt_ids):
                role = self.prompt_ids[index + 1]
            if role == self.whole.user_token_id:
                user.append(index)
        return torch.tensor(user, dtype=torch.long, device=self.device)

    def _assistant_start(self) -> int:
        ids = self.prompt_ids
        starts = [
            i
            for i in range(len(ids) - 1)
            if ids[i] == self.whole.im_start_token_id and ids[i + 1] == self.whole.assistant_token_id
        ]
        if not starts:
            raise InvalidRequest(
                "messages", "the prompt must end with an assistant turn (the chat template's generation prompt)"
            )
        return starts[-1]

    def _assistant_hidden(self, embeds, start: int):
        """`text_projection` of every row from the assistant turn on, recomputed as rows arrive (one batch, like HF)."""
        if self.trailing_rows != embeds.shape[0]:
            self.trailing = self.talker.text_projection(embeds[start:][None])[0]
            self.trailing_rows = embeds.shape[0]
        return self.trailing

    def _trailing(self, index: int):
        available = self.generated_rows() - 1
        if index < available:
            embeds = self._all(self.embeds)
            return self._assistant_hidden(embeds, self._assistant_start())[4 + index]
        if index == available:
            return self.specials["eos"]
        return self.specials["pad"]

    def _decode(self):
        torch, talker = self.torch, self.talker
        last_code = torch.tensor([[self.code0[-1]]], device=self.device)
        last_id_hidden = talker.get_input_embeddings()(last_code)
        predictor = talker.code_predictor
        greedy = self.sampling.greedy
        extra = {} if greedy else {"top_k": 50, "top_p": 0.8}
        result = predictor.generate(
            inputs_embeds=torch.cat((self.last_hidden, last_id_hidden), dim=1),
            max_new_tokens=self.config.num_code_groups - 1,
            do_sample=not greedy,
            output_hidden_states=True,
            return_dict_in_generate=True,
            **extra,
        )
        residual = result.sequences.to(self.device)
        mids = [hidden[0] for hidden in result.hidden_states[1:]]
        last = predictor.get_input_embeddings()[-1](residual[..., -1:])
        inputs = torch.cat([last_id_hidden, *mids, last], dim=1).sum(1, keepdim=True)
        inputs = inputs + self._trailing(self.forwards - 1)[None, None]
        past = self.cache.get_seq_length()
        positions = (torch.arange(1, device=self.device).view(1, 1, -1) + past + self.rope_deltas).expand(3, 1, 1)
        frame = torch.cat([last_code, residual], dim=1)[0].to(torch.int32)[None]
        return frame, self._forward(inputs, positions, past + 1)

    def _forward(self, inputs, positions, total: int):
        torch, talker = self.torch, self.talker
        output = talker.model(
            inputs_embeds=inputs,
            attention_mask=torch.ones((1, total), dtype=torch.long, device=self.device),
            position_ids=positions,
            past_key_values=self.cache,
            use_cache=True,
            output_hidden_states=True,
        )
        self.last_hidden = output.hidden_states[-1][:, -1:]
        return talker.codec_head(output.last_hidden_state[:, -1]).float()[0]


family = Qwen3OmniFamily()
