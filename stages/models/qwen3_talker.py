"""The Qwen3-Omni talker stage on the continuous-batching AR engine: code 0 of each frame from the
talker, the 15 residual codes from its code predictor, batched across requests.

Dataflow of `Qwen3OmniMoeForConditionalGeneration.generate(..., return_audio=True)` (transformers 5.19):

- prompt (`TalkerEngine.start`, once r_0 is in): every prompt position of a user turn, in order:
  `hidden_projection(hidden)` at audio/image/video placeholders, `text_projection(embeds)` elsewhere;
  then from the last `<|im_start|>assistant`: `text_projection(embeds)` of its first 3 tokens,
  4 x tts_pad, tts_bos, the first generated token; plus the talker's codec embeddings of [nothink,
  think_bos, think_eos, speaker, codec_pad, codec_bos] on the last 6 rows. Positions: plain 0..T-1 for
  text-only input, else `get_rope_index` over the talker ids with the thinker's grids and audio lengths;
- trailing text: `text_projection(embeds)` of g_1 .. g_{n-2} (projected over the whole assistant block
  as rows arrive, as transformers projects it in one batch), then tts_eos, then tts_pad;
- decode step k (`TalkerAdapter.embed`): the code predictor generates the 15 residual codes of frame
  k-1 from [the talker's last hidden state of step k-1, codec_embed(c0_{k-1})]; the step's input is the
  sum of the 16 code embeddings (code 0 by the talker's embedding, residual i by the predictor's
  embedding i-1 as it fed them, the last residual looked up) plus trailing[k-1]. Frame k-1 leaves with
  the output of step k; step 0 (the prefill) emits nothing;
- sampling: top_k 50, top_p 1.0, temperature 0.9, repetition penalty 1.05 over the generated code-0s
  only (the prompt's stand-in ids are suppressed ones, so the penalty cannot touch them), the top 1024
  ids except codec_eos suppressed, stop on codec_eos (2150). The code predictor is greedy when the
  talker is greedy, else top_k 50 / top_p 0.8, drawn from the request's seed
  (stages/models/qwen3_code_predictor.py: one batched, graph-captured loop per talker step).

The talker's text model is a mixture of experts; with its blocks' host-sync-free forward
(`stages.ar.moe.use_grouped_moe`, installed by the family's loader) its decode steps replay CUDA
graphs. The last hidden state the predictor reads comes out of the step (`observe`), eager or replayed.
"""

from __future__ import annotations

import torch

from stages.ar.attention import use_paged_attention
from stages.ar.model_adapter import ModelInputs, ModelOutputs
from stages.ar.moe import has_host_synced_moe
from stages.ar.mrope import rope_position_ids
from stages.ar.sequence import Sequence
from stages.errors import InvalidRequest
from stages.models.omni_talker import OmniTalkerEngine, ThinkerRows
from stages.models.qwen3_code_predictor import CodePredictor
from stages.protocol import StageOutput
from stages.tensors import to_wire

REPETITION_PENALTY = 1.05


class TalkerAdapter:
    always_embed = True

    def __init__(self, talker, predictor: CodePredictor):
        use_paged_attention(talker.model)
        self.model = talker
        self.predictor = predictor
        self.text_config = talker.config.text_config
        self.embeds_width = self.text_config.hidden_size
        self.supports_cuda_graphs = not has_host_synced_moe(talker.model)

    def embed(self, token_ids: torch.Tensor, inputs: ModelInputs) -> torch.Tensor:
        """Code-0 embeddings of the packed tokens; at generated positions the frame's whole embedding plus
        the request's trailing text row. The newest positions' residual codes are drawn here, all in one
        batch of the code predictor; positions computed before (recomputed after a preemption) reuse
        their rows."""
        embeds = self.model.get_input_embeddings()(token_ids)
        rows, values, newest = [], [], []
        for first, (seq, start, count) in zip(_row_starts(inputs.sequences), inputs.sequences, strict=True):
            known = seq.extra.setdefault("input_rows", {})
            for position in range(max(start, seq.num_prompt_tokens), start + count):
                row = first + position - start
                if position in known:
                    rows.append(row)
                    values.append(known[position])
                else:
                    newest.append((row, seq, position))
        if newest:
            index = torch.tensor([row for row, _, _ in newest], dtype=torch.long, device=embeds.device)
            frames = self._frame_embeddings(embeds[index], newest)
            trailing = [seq.extra["trailing"](position - seq.num_prompt_tokens) for _, seq, position in newest]
            summed = frames + torch.stack(trailing).to(frames.dtype)
            for (row, seq, position), value in zip(newest, summed, strict=True):
                seq.extra["input_rows"][position] = value
                rows.append(row)
                values.append(value)
        if rows:
            index = torch.tensor(rows, dtype=torch.long, device=embeds.device)
            embeds = embeds.index_copy(0, index, torch.stack(values).to(embeds.dtype))
        return embeds

    def _frame_embeddings(self, code0_embeds: torch.Tensor, newest: list[tuple[int, Sequence, int]]) -> torch.Tensor:
        """Residual codes of the frames whose code 0 sits at these positions; their summed embeddings."""
        seqs = [seq for _, seq, _ in newest]
        codes, frames = self.predictor.run(
            torch.stack([seq.extra["last_hidden"] for seq in seqs]),
            code0_embeds,
            seeds=[seq.extra["predictor_seed"] for seq in seqs],
            frames=[position - seq.num_prompt_tokens for _, seq, position in newest],
            greedy=[seq.sampling.greedy for seq in seqs],
        )
        for (_, seq, position), residual in zip(newest, codes, strict=True):
            seq.extra["frame"] = (seq.token_ids[position], residual)  # read once the step's sampler synced
        return frames

    def forward(self, inputs: ModelInputs) -> ModelOutputs:
        out = self.model.model(
            inputs_embeds=inputs.inputs_embeds,
            position_ids=rope_position_ids(inputs),
            use_cache=False,
            ar_batch=inputs.attention,
        )
        last = out.last_hidden_state[0]  # what transformers' talker hands its code predictor
        rows = last if inputs.logits_indices is None else last[inputs.logits_indices]
        return ModelOutputs(logits=self.model.codec_head(rows), hidden_states=None, last_hidden=last)

    def observe(self, sequences: list[tuple[Sequence, int, int]], outputs: ModelOutputs) -> None:
        """Keep the last hidden state of each sequence that samples this step (its next frame's input)."""
        sampling = _sampling_rows(sequences)
        if sampling:
            index = torch.tensor([row for _, row in sampling], dtype=torch.long, device=outputs.last_hidden.device)
            picked = outputs.last_hidden.index_select(0, index)
            for (seq, _), row in zip(sampling, picked, strict=True):
                seq.extra["last_hidden"] = row


def _row_starts(sequences: list[tuple[Sequence, int, int]]) -> list[int]:
    rows, row = [], 0
    for _, _, count in sequences:
        rows.append(row)
        row += count
    return rows


def _sampling_rows(sequences: list[tuple[Sequence, int, int]]) -> list[tuple[Sequence, int]]:
    """(sequence, packed row) of the sequences that sample this step: their last known token is computed."""
    found = []
    for row, (seq, start, count) in zip(_row_starts(sequences), sequences, strict=True):
        if start + count == seq.num_tokens and seq.input_finished:
            found.append((seq, row + count - 1))
    return found


class TrailingText:
    """A request's trailing text rows: text_projection over the assistant block (recomputed as rows arrive,
    in one batch as transformers does), from g_1 on, then tts_eos, then tts_pad."""

    def __init__(self, talker, specials: dict[str, torch.Tensor], assistant_start: int):
        self.talker, self.specials, self.start = talker, specials, assistant_start
        self.projected: torch.Tensor | None = None
        self.available = 0

    def update(self, rows: ThinkerRows) -> None:
        embeds, _ = rows.between(self.start)
        with torch.inference_mode():
            self.projected = self.talker.text_projection(embeds[None])[0]
        self.available = rows.generated - 1

    def __call__(self, index: int) -> torch.Tensor:
        if index < self.available:
            return self.projected[4 + index]
        return self.specials["eos"] if index == self.available else self.specials["pad"]


class TalkerEngine(OmniTalkerEngine):
    default_voice = "ethan"
    repetition_penalty = REPETITION_PENALTY

    def __init__(self, engine, whole_config, specials: dict[str, torch.Tensor]):
        super().__init__(engine, dict(engine.adapter.model.config.speaker_id or {}))
        self.whole = whole_config
        self.specials = specials
        vocab = self.config.text_config.vocab_size
        self.suppressed = tuple(i for i in range(vocab - 1024, vocab) if i != self.config.codec_eos_token_id)

    def start(self, request_id: str, rows: ThinkerRows) -> Sequence:
        assistant_start = self._assistant_start(rows.prompt_ids)
        trailing = TrailingText(self.talker, self.specials, assistant_start)
        trailing.update(rows)
        prompt, talker_ids = self._prompt_rows(rows, trailing.projected)
        # The penalty reads the generated code-0s only: the prompt's ids are suppressed ones.
        stand_in = [self.suppressed[0]] * prompt.shape[0]
        seq = self.engine.add_sequence(request_id, stand_in, prompt, rows.sampling, stage_id=rows.stage_id)
        seq.suppressed_token_ids = self.suppressed
        seq.extra["trailing"] = trailing
        seed = rows.sampling.seed
        seq.extra["predictor_seed"] = self.engine.adapter.predictor.draw_seed() if seed is None else seed
        self._positions(seq, rows, talker_ids)
        return seq

    def extend(self, rows: ThinkerRows) -> None:
        trailing = rows.seq.extra["trailing"]
        if rows.used != rows.count:
            trailing.update(rows)
            rows.used = rows.count
        rows.seq.input_limit = None if rows.done else rows.seq.num_prompt_tokens + trailing.available

    def convert(self, output: StageOutput, rows: ThinkerRows) -> StageOutput | None:
        """Frame k-1 with the output of step k; the stop code and the last, unfinished code 0 are not sent."""
        frame = rows.seq.extra.pop("frame", None)
        output.token_ids = []
        if frame is not None:
            code0, residual = frame
            codes = torch.tensor([[code0, *residual.tolist()]], dtype=torch.int32)
            output.payloads = {**output.payloads, "codes": to_wire(codes)}
        elif not output.finished:
            return None
        return output

    def _assistant_start(self, ids: list[int]) -> int:
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

    def _user_positions(self, ids: list[int]) -> list[int]:
        user, role = [], None
        for index, token in enumerate(ids):
            if token == self.whole.im_start_token_id and index + 1 < len(ids):
                role = ids[index + 1]
            if role == self.whole.user_token_id:
                user.append(index)
        return user

    @torch.inference_mode()
    def _prompt_rows(self, rows: ThinkerRows, assistant: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        talker, config, device = self.talker, self.config, self.device
        length = len(rows.prompt_ids)
        embeds, hidden = rows.between(0, length)
        ids = torch.tensor(rows.prompt_ids, device=device)
        thinker = self.whole.thinker_config
        placeholders = [thinker.audio_token_id, thinker.image_token_id, thinker.video_token_id]
        mm = torch.isin(ids, torch.tensor(placeholders, device=device))
        user_rows = torch.empty((length, config.text_config.hidden_size), dtype=embeds.dtype, device=device)
        if mm.any():
            user_rows[mm] = talker.hidden_projection(hidden[mm][None])[0]
        user_rows[~mm] = talker.text_projection(embeds[~mm][None])[0]
        user = torch.tensor(self._user_positions(rows.prompt_ids), dtype=torch.long, device=device)
        pad, bos = self.specials["pad"], self.specials["bos"]
        assistant_text = torch.cat([assistant[:3], pad.expand(4, -1), bos[None], assistant[3:4]])
        codec_ids = torch.tensor(
            [
                config.codec_nothink_id,
                config.codec_think_bos_id,
                config.codec_think_eos_id,
                rows.voice,
                config.codec_pad_id,
                config.codec_bos_id,
            ],
            device=device,
        )
        codec = torch.cat(
            [
                torch.zeros((3, assistant.shape[-1]), dtype=assistant.dtype, device=device),
                talker.get_input_embeddings()(codec_ids),
            ]
        )
        prompt = torch.cat([user_rows[user], assistant_text + codec])
        talker_ids = torch.cat([ids[user], torch.full((9,), self.whole.tts_pad_token_id, device=device)])
        return prompt, talker_ids

    def _positions(self, seq: Sequence, rows: ThinkerRows, talker_ids: torch.Tensor) -> None:
        params, device = rows.params, self.device
        if (
            params.get("audio_feature_lengths") is None
            and not params.get("image_grid_thw")
            and not params.get("video_grid_thw")
        ):
            return  # plain positions 0..T-1

        def tensor(name: str):
            return torch.tensor(params[name], device=device) if params.get(name) is not None else None

        positions, delta = self.talker.get_rope_index(
            talker_ids[None],
            tensor("image_grid_thw"),
            tensor("video_grid_thw"),
            torch.ones_like(talker_ids[None]),
            False,
            tensor("audio_feature_lengths"),
            tensor("video_second_per_grid"),
        )
        seq.extra["rope"] = positions[:, 0, :]
        seq.position_delta = int(delta.reshape(-1)[0])
