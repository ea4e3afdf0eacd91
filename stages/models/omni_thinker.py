"""The thinker stage of both Qwen-Omni families: one request's prefill and decode steps.

Mirrors what `thinker.generate(..., output_hidden_states=True)` computes inside
`Qwen2_5OmniForConditionalGeneration.generate` / `Qwen3OmniMoeForConditionalGeneration.generate`:

- prefill: the whole prompt (multimodal features merged by the thinker's own forward) with
  3-D mRoPE positions from the thinker's `get_rope_index`; decode: one token per step at
  position `past + rope_delta`, a DynamicCache per request, an all-ones attention mask;
- each step's output carries the sampled token, the text delta and, for the talker, the
  rows of the step's input: `embeds` (layer-0 hidden states = input embeddings, multimodal
  features merged) and `hidden` (the layer the talker reads). The prefill output carries the
  prompt's rows; the output with token g_k carries the rows of input g_{k-1}. The last
  token's rows are never computed, exactly as in `generate()`.
- the first output's params carry what the talker needs for its own positions: the prompt
  ids, image/video grids and audio feature lengths.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stages.errors import InvalidRequest
from stages.models.omni_sampling import choose_token, make_generator
from stages.models.omni_session_engine import new_output
from stages.protocol import SamplingParams, StageOutput, StageRequest
from stages.tensors import from_wire, to_wire

MM_PAYLOADS = ("input_features", "feature_attention_mask", "pixel_values", "image_grid_thw")


@dataclass
class ThinkerOptions:
    hidden_layer: int
    """Which `hidden_states` entry the talker reads (-1: last layer for 2.5, accept_hidden_layer for 3)."""
    hidden_for_generated: bool
    """Whether generated tokens' hidden rows are sent too (2.5) or only the prompt's (3)."""
    send_rows: bool = True
    """False for the thinker-only pipeline: no talker reads the rows."""


class ThinkerSession:
    def __init__(self, model, tokenizer, request: StageRequest, options: ThinkerOptions, device: str):
        import torch
        from transformers import DynamicCache

        if not request.prompt_token_ids:
            raise InvalidRequest("prompt", "the thinker needs a prompt, messages or prompt_token_ids")
        self.model, self.tokenizer, self.options, self.device = model, tokenizer, options, device
        self.sampling = request.sampling or SamplingParams(temperature=0.0, max_tokens=128)
        self.generator = make_generator(self.sampling.seed, "cpu")
        self.prompt_ids = list(request.prompt_token_ids)
        self.inputs = {key: from_wire(value, device) for key, value in request.payloads.items() if key in MM_PAYLOADS}
        self.use_audio_in_video = bool(request.params.get("use_audio_in_video", False))
        self.cache = DynamicCache(config=model.config.get_text_config())
        self.generated: list[int] = []
        self.text = ""
        self.rope_deltas = None
        self.finished = False
        self.torch = torch

    def add_chunk(self, request: StageRequest) -> None:
        raise InvalidRequest("request", "the thinker takes its whole prompt at once")

    def ready(self) -> bool:
        return not self.finished

    def step(self) -> StageOutput:
        torch = self.torch
        with torch.no_grad():
            if not self.generated:
                output, rows_from = self._prefill(), 0
            else:
                output, rows_from = self._decode(), None
        token = choose_token(output.logits[0, -1], self.sampling, self.generator)
        self.generated.append(token)
        finish_reason = self._finish_reason(token)
        self.finished = finish_reason is not None
        result = new_output(
            modality="text",
            token_ids=[token],
            text=self._text_delta(),
            finished=self.finished,
            finish_reason=finish_reason,
        )
        if self.options.send_rows:
            self._attach_rows(result, output, prompt=rows_from == 0)
        return result

    def _prefill(self):
        torch = self.torch
        input_ids = torch.tensor([self.prompt_ids], dtype=torch.long, device=self.device)
        attention_mask = torch.ones_like(input_ids)
        audio_lengths = None
        if "feature_attention_mask" in self.inputs:
            audio_lengths = self.inputs["feature_attention_mask"].sum(-1)
        positions, self.rope_deltas = self.model.get_rope_index(
            input_ids,
            self.inputs.get("image_grid_thw"),
            None,
            attention_mask,
            self.use_audio_in_video,
            audio_lengths,
            None,
        )
        return self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=positions,
            past_key_values=self.cache,
            use_cache=True,
            output_hidden_states=True,
            use_audio_in_video=self.use_audio_in_video,
            **self.inputs,
        )

    def _decode(self):
        torch = self.torch
        past = self.cache.get_seq_length()
        input_ids = torch.tensor([[self.generated[-1]]], dtype=torch.long, device=self.device)
        positions = (torch.arange(1, device=self.device).view(1, 1, -1) + past + self.rope_deltas).expand(3, 1, 1)
        return self.model(
            input_ids=input_ids,
            attention_mask=torch.ones((1, past + 1), dtype=torch.long, device=self.device),
            position_ids=positions,
            past_key_values=self.cache,
            use_cache=True,
            output_hidden_states=True,
        )

    def _attach_rows(self, result: StageOutput, output: Any, *, prompt: bool) -> None:
        hidden_states = output.hidden_states
        result.payloads["embeds"] = to_wire(hidden_states[0][0].float())
        if prompt or self.options.hidden_for_generated:
            result.payloads["hidden"] = to_wire(hidden_states[self.options.hidden_layer][0].float())
        if prompt:
            result.params.update(self._talker_position_inputs())

    def _talker_position_inputs(self) -> dict[str, Any]:
        params: dict[str, Any] = {"thinker_prompt_ids": self.prompt_ids, "use_audio_in_video": self.use_audio_in_video}
        if "image_grid_thw" in self.inputs:
            params["image_grid_thw"] = self.inputs["image_grid_thw"].tolist()
        if "feature_attention_mask" in self.inputs:
            params["audio_feature_lengths"] = self.inputs["feature_attention_mask"].sum(-1).tolist()
        return params

    def _finish_reason(self, token: int) -> str | None:
        count = len(self.generated)
        if count < self.sampling.min_tokens:
            return None
        if not self.sampling.ignore_eos and token in self.stop_ids:
            return "stop"
        if count >= self.sampling.max_tokens:
            return "length"
        return None

    @property
    def stop_ids(self) -> set[int]:
        return set(self.sampling.stop_token_ids)

    def _text_delta(self) -> str:
        text = self.tokenizer.decode(self.generated, skip_special_tokens=True)
        if text.endswith("\ufffd") and not self.finished:
            return ""
        delta, self.text = text[len(self.text) :], text
        return delta
