"""What both Qwen-Omni talkers share on the AR engine: the thinker -> talker input processor's frame.

A talker request arrives as the thinker's outputs, chunk by chunk: named payloads `embeds` (the
thinker's input embeddings) and `hidden` (the layer the talker reads), one row per thinker position,
the thinker's tokens, and in the first chunk `thinker_prompt_ids`. `OmniTalkerEngine` collects them in
`ThinkerRows` and hands the family's subclass three moments:

- `start(request_id, rows)` once r_0 (the row of the first generated token) is in: build the talker's
  prompt and add its sequence to the AR engine (`add_sequence`), or return None to wait;
- `extend(rows)` whenever more rows arrived: feed the sequence's side input and its `input_limit`
  (decode step k may only run once the thinker row it reads exists, or the thinker finished);
- `convert(output, rows)` for each engine output: what goes on to code2wav (None: nothing yet).

A thinker reply of one token leaves nothing to speak: the request finishes without codes, as in
transformers. A thinker error fails the talker's request too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec
import torch

from stages.ar.inputs import parse_sampling
from stages.ar.sequence import Sequence
from stages.engine import StageEngine
from stages.errors import InvalidRequest
from stages.protocol import SamplingParams, StageOutput, StageRequest
from stages.tensors import from_wire


@dataclass
class ThinkerRows:
    """What one request received from the thinker so far."""

    prompt_ids: list[int]
    voice: Any
    sampling: SamplingParams
    stage_id: int
    params: dict[str, Any]
    tokens: list[int] = field(default_factory=list)
    embeds: list[torch.Tensor] = field(default_factory=list)
    hidden: list[torch.Tensor] = field(default_factory=list)
    count: int = 0
    done: bool = False
    seq: Sequence | None = None
    used: int = 0
    """Rows already turned into the talker's input."""
    sent: int = 0
    """Outputs sent on: their `seq` numbers run 0, 1, ... whatever the engine's outputs held back."""

    @property
    def generated(self) -> int:
        """Rows of generated thinker tokens (r_0, r_1, ...) received."""
        return self.count - len(self.prompt_ids)

    def row(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(embeds, hidden) of thinker position `index`."""
        for embeds, hidden in zip(self.embeds, self.hidden, strict=True):
            if index < embeds.shape[0]:
                return embeds[index], hidden[index]
            index -= embeds.shape[0]
        raise IndexError(index)

    def between(self, start: int, end: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(embeds, hidden) rows [start, end)."""
        return torch.cat(self.embeds)[start:end], torch.cat(self.hidden)[start:end]


class OmniTalkerEngine(StageEngine):
    default_voice = ""
    repetition_penalty = 1.0

    def __init__(self, engine, voices: dict[str, Any]):
        self.engine = engine
        self.talker = engine.adapter.model
        self.config = self.talker.config
        self.device = engine.device
        self.dtype = next(self.talker.parameters()).dtype
        self.voices = {name.lower(): value for name, value in voices.items()}
        self.voice_names = sorted(voices)
        self.requests: dict[str, ThinkerRows] = {}
        self.silent: list[StageOutput] = []

    # -- the family's part -------------------------------------------------------------------

    def start(self, request_id: str, rows: ThinkerRows) -> Sequence | None:
        raise NotImplementedError

    def extend(self, rows: ThinkerRows) -> None:
        raise NotImplementedError

    def convert(self, output: StageOutput, rows: ThinkerRows) -> StageOutput | None:
        raise NotImplementedError

    # -- StageEngine -------------------------------------------------------------------------

    def add_request(self, request: StageRequest) -> None:
        if request.request_id in self.requests:
            raise InvalidRequest("request_id", f"request {request.request_id!r} is already running")
        voice = self.voice_of(request)
        if "thinker_prompt_ids" not in request.params:
            raise InvalidRequest("params.thinker_prompt_ids", "the talker needs the thinker's first output")
        sampling = parse_sampling(request, self.engine.deploy.sampling)
        if sampling.repetition_penalty is None:
            sampling = msgspec.structs.replace(sampling, repetition_penalty=self.repetition_penalty)
        rows = ThinkerRows(
            prompt_ids=list(request.params["thinker_prompt_ids"]),
            voice=voice,
            sampling=sampling,
            stage_id=request.stage_id,
            params=dict(request.params),
        )
        self.requests[request.request_id] = rows
        self._receive(request, rows)

    def voice_of(self, request: StageRequest) -> Any:
        """The speaker value the family's prompt uses: a custom voice's (its conditioning travels with
        the request) or the named built-in voice's (the API checked the name; the offline library's
        requests are refused here when it names none of them)."""
        voice = str(request.options.voice or self.default_voice).lower()
        if voice not in self.voices:
            raise InvalidRequest("voice", f"unknown voice {voice!r}; this model has {self.voice_names}")
        return self.voices[voice]

    def add_chunk(self, request: StageRequest) -> None:
        rows = self.requests.get(request.request_id)
        if rows is not None:
            self._receive(request, rows)

    def step(self) -> list[StageOutput]:
        outputs, self.silent = self.silent, []
        for output in self.engine.step():
            rows = self.requests.get(output.request_id)
            if output.finished:
                self.requests.pop(output.request_id, None)
            converted = output if output.error is not None or rows is None else self.convert(output, rows)
            if converted is not None:
                converted.modality, converted.text = "tokens", ""
                if rows is not None:
                    converted.seq, rows.sent = rows.sent, rows.sent + 1
                outputs.append(converted)
        return outputs

    def abort(self, request_id: str) -> None:
        self.requests.pop(request_id, None)
        self.engine.abort(request_id)

    def has_unfinished(self) -> bool:
        return bool(self.silent) or self.engine.has_unfinished()

    def shutdown(self) -> None:
        self.engine.shutdown()

    # -- thinker -> talker -------------------------------------------------------------------

    def _receive(self, request: StageRequest, rows: ThinkerRows) -> None:
        if request.params.get("source_finish_reason") == "error":
            self.abort(request.request_id)
            raise InvalidRequest("thinker", "the thinker failed")
        payloads = request.payloads
        if ("embeds" in payloads) != ("hidden" in payloads):
            raise InvalidRequest("payloads", "the thinker's rows need both `embeds` and `hidden`")
        if "embeds" in payloads:
            embeds = from_wire(payloads["embeds"], self.device).to(self.dtype)
            rows.embeds.append(embeds)
            rows.hidden.append(from_wire(payloads["hidden"], self.device).to(self.dtype))
            rows.count += embeds.shape[0]
        rows.tokens.extend(request.prompt_token_ids or [])
        rows.done = rows.done or request.finished
        if rows.seq is None:
            if rows.generated >= 1:
                rows.seq = self.start(request.request_id, rows)
            elif rows.done:
                self._finish_silently(request.request_id, rows)
        if rows.seq is not None:
            self.extend(rows)

    def _finish_silently(self, request_id: str, rows: ThinkerRows) -> None:
        self.requests.pop(request_id, None)
        self.silent.append(
            StageOutput(
                request_id=request_id, stage_id=rows.stage_id, modality="tokens", finished=True, finish_reason="stop"
            )
        )
