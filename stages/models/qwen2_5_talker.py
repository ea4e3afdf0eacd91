"""The Qwen2.5-Omni talker stage on the continuous-batching AR engine.

`TalkerEngine` is the thinker -> talker input processor (it runs on the talker's host; the frame
it shares with the Qwen3 talker is stages/models/omni_talker.py) in front of an `ARTorchEngine`
whose `TalkerAdapter` drives `talker.model` unmodified. Dataflow of
`Qwen2_5OmniForConditionalGeneration.generate(..., return_audio=True)` (transformers 5.19):

- the thinker's rows arrive as named payloads `embeds` (its input embeddings) and `hidden` (its
  last layer); the first chunk also carries `thinker_prompt_ids` (L of them);
- prompt (added once r_0 = hidden(g_0) + embed(g_0) is in): `hidden + embeds` over the thinker's
  prompt, with the embeddings of audio, image and video placeholder positions zeroed, then the
  thinker's embedding of the speaker's `bos_token`, then r_0; as penalty history the ids
  `[codec_mask] * L + [codec_pad, codec_bos]` stand for these rows;
- decode step k feeds `codec_embed(c_{k-1}) + reply[k-1]`, where the reply queue is r_1 .. r_{n-2},
  then embed(tts_text_eos), then embed(tts_text_pad) for every later step. Step k waits (the
  sequence's `input_limit`) until r_k exists or the thinker finished;
- every input row goes through `thinker_to_talker_proj`, the head is `codec_head`; positions are
  plain 0..T-1 (transformers 5.19 passes no attention mask to the talker, so it never builds its
  M-RoPE positions); `options.talker_codec_prompt: "qwen"` restores the original Qwen behaviour
  (codec embeddings of pad/bos added to the last two prompt rows, M-RoPE positions over
  `prompt + [speaker_bos, g_0]` with the thinker's image/video grids and audio lengths);
- sampling (HF defaults): top_k 40, top_p 0.8, temperature 0.9, repetition penalty 1.05 over the
  history above, `codec_bos` suppressed, stop on 8292 or 8294 (the stop code is not forwarded).

A reply of one token gives the talker nothing to speak: the request finishes without codes (HF
cannot speak it either). Decode batches run in CUDA graphs that read their input rows from a
static embeddings buffer.
"""

from __future__ import annotations

import torch

from stages.ar.attention import use_paged_attention
from stages.ar.model_adapter import ModelInputs, ModelOutputs
from stages.ar.mrope import rope_position_ids
from stages.ar.sequence import Sequence
from stages.errors import InvalidRequest
from stages.models.omni_talker import OmniTalkerEngine, ThinkerRows
from stages.protocol import StageOutput, StageRequest
from stages.voice_conditioning import conditioning_of

TALKER_EOS = (8292, 8294)
REPETITION_PENALTY = 1.05


class TalkerAdapter:
    always_embed = True
    supports_cuda_graphs = True

    def __init__(self, talker):
        use_paged_attention(talker.model)
        self.model = talker
        self.text_config = talker.config
        self.embeds_width = talker.config.embedding_size

    def embed(self, token_ids: torch.Tensor, inputs: ModelInputs) -> torch.Tensor:
        """Codec embeddings of the packed tokens plus, on decode rows, each request's reply row."""
        embeds = self.model.get_input_embeddings()(token_ids)
        rows, replies = [], []
        row = 0
        for seq, start, count in inputs.sequences:
            first_reply = seq.num_prompt_tokens
            for position in range(max(start, first_reply), start + count):
                rows.append(row + position - start)
                replies.append(seq.extra["reply"].row(position - first_reply))
            row += count
        if rows:
            index = torch.tensor(rows, dtype=torch.long, device=embeds.device)
            embeds = embeds.index_add(0, index, torch.stack(replies).to(embeds.dtype))
        return embeds

    def forward(self, inputs: ModelInputs) -> ModelOutputs:
        talker = self.model
        out = talker.model(
            inputs_embeds=talker.thinker_to_talker_proj(inputs.inputs_embeds),
            position_ids=rope_position_ids(inputs),
            use_cache=False,
            ar_batch=inputs.attention,
        )
        rows = out.last_hidden_state[0]
        if inputs.logits_indices is not None:
            rows = rows[inputs.logits_indices]
        return ModelOutputs(logits=talker.codec_head(rows), hidden_states=None)


class ReplyRows:
    """A request's reply queue: r_1, r_2, ... as they arrive, then tts_text_eos, then tts_text_pad."""

    def __init__(self, eos: torch.Tensor, pad: torch.Tensor):
        self.rows: list[torch.Tensor] = []
        self.eos, self.pad = eos, pad

    def row(self, index: int) -> torch.Tensor:
        if index < len(self.rows):
            return self.rows[index]
        return self.eos if index == len(self.rows) else self.pad


class TalkerEngine(OmniTalkerEngine):
    default_voice = "Chelsie"
    repetition_penalty = REPETITION_PENALTY

    def __init__(self, engine, thinker_rows: dict[int, torch.Tensor], voices: dict[str, int], *, qwen_prompt: bool):
        super().__init__(engine, voices)
        self.thinker_rows = thinker_rows
        self.qwen_prompt = qwen_prompt

    def voice_of(self, request: StageRequest) -> int:
        """The speaker's bos token: a custom voice's (its nearest built-in speaker's) or a built-in one's."""
        custom = conditioning_of(request.params)
        if custom is None:
            return super().voice_of(request)
        if custom.bos_token not in self.thinker_rows:
            raise InvalidRequest("voice", f"the voice's speaker token {custom.bos_token} is none of this model's")
        return custom.bos_token

    def start(self, request_id: str, rows: ThinkerRows) -> Sequence:
        prompt, history = self._prompt_rows(rows)
        seq = self.engine.add_sequence(request_id, history, prompt, rows.sampling, stage_id=rows.stage_id)
        seq.suppressed_token_ids = (self.config.tts_codec_start_token_id,)
        seq.extra["reply"] = ReplyRows(
            self.thinker_rows[self.config.tts_text_end_token_id], self.thinker_rows[self.config.tts_text_pad_token_id]
        )
        if self.qwen_prompt:
            self._qwen_positions(seq, rows)
        rows.used = len(rows.prompt_ids) + 1
        return seq

    def extend(self, rows: ThinkerRows) -> None:
        replies = rows.seq.extra["reply"]
        while rows.used < rows.count:
            embeds, hidden = rows.row(rows.used)
            replies.rows.append(hidden + embeds)
            rows.used += 1
        rows.seq.input_limit = None if rows.done else rows.seq.num_prompt_tokens + len(replies.rows)

    def convert(self, output: StageOutput, rows: ThinkerRows) -> StageOutput:
        """Codec codes for code2wav: the stop code itself is not forwarded."""
        if output.finish_reason == "stop" and output.token_ids and output.token_ids[-1] in TALKER_EOS:
            output.token_ids = output.token_ids[:-1]
        return output

    def _prompt_rows(self, rows: ThinkerRows) -> tuple[torch.Tensor, list[int]]:
        config, length = self.config, len(rows.prompt_ids)
        embeds, hidden = rows.between(0, length + 1)
        ids = torch.tensor(rows.prompt_ids, device=self.device)
        placeholders = torch.tensor(
            [config.audio_token_index, config.image_token_index, config.video_token_index], device=self.device
        )
        embeds = embeds.clone()
        embeds[:length] = embeds[:length].masked_fill(torch.isin(ids, placeholders).unsqueeze(-1), 0.0)
        summed = hidden + embeds
        prompt = torch.cat([summed[:length], self.thinker_rows[rows.voice][None], summed[length:]])
        if self.qwen_prompt:
            codec = self.talker.get_input_embeddings()
            codec_ids = torch.tensor(
                [config.tts_codec_pad_token_id, config.tts_codec_start_token_id], device=self.device
            )
            prompt[-2:] += codec(codec_ids)
        history = [config.tts_codec_mask_token_id] * length + [
            config.tts_codec_pad_token_id,
            config.tts_codec_start_token_id,
        ]
        return prompt, history

    def _qwen_positions(self, seq: Sequence, rows: ThinkerRows) -> None:
        params, device = rows.params, self.device
        text_ids = torch.tensor([rows.prompt_ids + [rows.voice, rows.tokens[0]]], device=device)

        def tensor(name: str):
            return torch.tensor(params[name], device=device) if params.get(name) else None

        positions, delta = self.talker.get_rope_index(
            text_ids,
            tensor("image_grid_thw"),
            tensor("video_grid_thw"),
            torch.ones_like(text_ids),
            bool(params.get("use_audio_in_video", False)),
            tensor("audio_feature_lengths"),
            tensor("video_second_per_grid"),
        )
        seq.extra["rope"] = positions[:, 0, :]
        seq.position_delta = int(delta.reshape(-1)[0])


def talker_thinker_rows(
    model_dir: str, config, voices: dict[str, int], device: str, dtype, dummy_seed: int | None = None
) -> dict:
    """The rows of the thinker's embedding the talker reads: the speakers' bos and tts_text eos/pad."""
    from stages.models.omni_weights import thinker_embedding_rows

    talker_config = config.talker_config
    ids = sorted({*voices.values(), talker_config.tts_text_end_token_id, talker_config.tts_text_pad_token_id})
    text_config = config.thinker_config.text_config
    rows = thinker_embedding_rows(model_dir, text_config, ids, device=device, dummy_seed=dummy_seed)
    return {token: rows[index].to(dtype) for index, token in enumerate(ids)}
