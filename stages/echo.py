"""A trivial stage that echoes its input text back, one word piece per step.

It has no model, so it isolates what the orchestration costs: the in-process driver,
the Redis-stream platform path, forwarding between stages. Options (from the stage's
deploy config `options`): `delay_s` sleeps that long per step, `tokens_per_step` word
pieces per step, `payload_bytes` attaches that many bytes (`payloads["hidden"]`) to every
output with pieces, `fail_warmups` fails that many warm-up requests (`options.extra["warmup"]`)
before it lets one pass. A stage named "voice" answers with audio (a short tone per piece).
A request that brought payloads ends with their size and CRC-32 in its last output's params
(`stages.echo_payloads`).

Per-request test hooks in `StageRequest.options.extra` (chat's `additional_information`):
`echo_fail` makes the request fail in its first step with a server error; `echo_hang` keeps it
from ever producing output; `echo_crash` makes `step()` itself raise (an engine bug), so drivers
can show they survive.
"""

from __future__ import annotations

import math
import re
import time
import zlib
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from stages.config import EdgeConfig, PipelineConfig, StageConfig, StageDeployConfig
from stages.echo_payloads import PAYLOAD_KEY, PayloadDigest, echo_payload
from stages.engine import StageEngine
from stages.errors import InvalidRequest
from stages.models import DEFAULT_VARIANT, ModelFamily
from stages.protocol import StageError, StageOutput, StageRequest, Tensor

_PIECE = re.compile(r"\s*\S+|\s+")
SAMPLE_RATE = 16000
SAMPLES_PER_PIECE = 160


@dataclass
class _EchoRequest:
    request_id: str
    stage_id: int
    max_tokens: int | None
    pieces: deque[tuple[str, int]] = field(default_factory=deque)
    input_finished: bool = True
    emitted: int = 0
    seq: int = 0
    fail: bool = False
    fail_warmup: bool = False
    hang: bool = False
    crash: bool = False
    digest: PayloadDigest = field(default_factory=PayloadDigest)


def split_pieces(request: StageRequest) -> list[tuple[str, int]]:
    """The request's input as (text piece, token id) pairs."""
    text = _input_text(request)
    if text:
        return [(piece, zlib.crc32(piece.encode()) % 50000) for piece in _PIECE.findall(text)]
    return [("", token_id) for token_id in request.prompt_token_ids or []]


def _input_text(request: StageRequest) -> str:
    if request.prompt:
        return request.prompt
    if request.messages:
        content = request.messages[-1].get("content", "")
        if isinstance(content, list):
            return " ".join(part.get("text", "") for part in content if isinstance(part, dict) and "text" in part)
        return str(content)
    return ""


class EchoEngine(StageEngine):
    def __init__(
        self,
        delay_s: float = 0.0,
        tokens_per_step: int = 1,
        modality: str = "text",
        *,
        payload_bytes: int = 0,
        fail_warmups: int = 0,
    ):
        self.delay_s = delay_s
        self.tokens_per_step = tokens_per_step
        self.modality = modality
        self.payload_bytes = payload_bytes
        self.warmups_to_fail = fail_warmups
        self.requests: dict[str, _EchoRequest] = {}

    def add_request(self, request: StageRequest) -> None:
        if request.request_id in self.requests:
            raise InvalidRequest("request_id", f"request {request.request_id!r} is already running")
        if request.sampling is not None:
            request.sampling.validate()
        if request.prompt is None and not request.messages and request.prompt_token_ids is None and request.finished:
            raise InvalidRequest("prompt", "the echo stage needs a prompt, messages or prompt_token_ids")
        extra = request.options.extra
        state = _EchoRequest(
            request_id=request.request_id,
            stage_id=request.stage_id,
            max_tokens=request.sampling.max_tokens if request.sampling else None,
            input_finished=request.finished,
            fail=bool(extra.get("echo_fail")),
            hang=bool(extra.get("echo_hang")),
            crash=bool(extra.get("echo_crash")),
        )
        if extra.get("warmup") and self.warmups_to_fail > 0:
            self.warmups_to_fail -= 1
            state.fail_warmup = True
        state.pieces.extend(split_pieces(request))
        state.digest.add(request.payloads)
        self.requests[request.request_id] = state

    def add_chunk(self, request: StageRequest) -> None:
        state = self.requests.get(request.request_id)
        if state is None:
            return  # aborted or finished already
        state.pieces.extend(split_pieces(request))
        state.digest.add(request.payloads)
        state.input_finished = request.finished

    def step(self) -> list[StageOutput]:
        if self.delay_s and self.requests:
            time.sleep(self.delay_s)
        crashing = [state.request_id for state in self.requests.values() if state.crash]
        if crashing:
            raise RuntimeError(f"echo_crash was set on {crashing}")
        outputs = []
        for state in list(self.requests.values()):
            output = self._advance(state)
            if output is not None:
                outputs.append(output)
                if output.finished:
                    del self.requests[state.request_id]
        return outputs

    def _advance(self, state: _EchoRequest) -> StageOutput | None:
        if state.hang:
            return None
        if state.fail:
            error = StageError(message="echo_fail was set: this request fails on purpose", code="echo_fail")
            return self._output(state, [], finished=True, reason="error", error=error)
        if state.fail_warmup:
            message = "this stage fails its warm-up on purpose (option fail_warmups)"
            return self._output(state, [], finished=True, reason="error", error=StageError(message=message))
        taken = []
        while state.pieces and len(taken) < self.tokens_per_step and not self._at_limit(state, taken):
            taken.append(state.pieces.popleft())
        if self._at_limit(state, taken):
            return self._output(state, taken, finished=True, reason="length")
        if not state.pieces and state.input_finished:
            return self._output(state, taken, finished=True, reason="stop")
        if not taken:
            return None  # waiting for more input chunks
        return self._output(state, taken, finished=False, reason=None)

    def _at_limit(self, state: _EchoRequest, taken: list) -> bool:
        return state.max_tokens is not None and state.emitted + len(taken) >= state.max_tokens

    def _output(self, state, taken, *, finished, reason, error=None) -> StageOutput:
        state.emitted += len(taken)
        output = StageOutput(
            request_id=state.request_id,
            stage_id=state.stage_id,
            seq=state.seq,
            finished=finished,
            finish_reason=reason,
            modality=self.modality,
            text="".join(piece for piece, _ in taken) if self.modality == "text" else "",
            token_ids=[token_id for _, token_id in taken],
            error=error,
        )
        if self.modality == "audio" and taken:
            output.payloads = {"audio": _tone(len(taken))}
            output.params = {"sample_rate": SAMPLE_RATE}
        if self.payload_bytes and taken:
            output.payloads = {
                **output.payloads,
                PAYLOAD_KEY: echo_payload(state.request_id, state.seq, self.payload_bytes),
            }
        if finished and state.digest.nbytes:
            output.params = {**output.params, **state.digest.as_params()}
        state.seq += 1
        return output

    def abort(self, request_id: str) -> None:
        self.requests.pop(request_id, None)

    def has_unfinished(self) -> bool:
        return bool(self.requests)


def _tone(pieces: int) -> Tensor:
    import numpy as np

    n = pieces * SAMPLES_PER_PIECE
    wave = 0.1 * np.sin(2 * math.pi * 440.0 * np.arange(n, dtype=np.float32) / SAMPLE_RATE)
    return Tensor(dtype="float32", shape=[n], data=wave.astype("<f4").tobytes())


def _pipeline(name: str, description: str, stages: list[StageConfig], edges: list[EdgeConfig]) -> PipelineConfig:
    """Echo pipelines exercise the platform in tests and demos: internal, so the catalog hides them."""
    return PipelineConfig(family="echo", name=name, description=description, stages=stages, edges=edges, internal=True)


_ECHO = StageConfig(id=0, name="echo", kind="ar", output="text", default_backend="echo")
_HEARING = StageConfig(id=0, name="echo", kind="ar", output="text", inputs=("text", "audio"), default_backend="echo")
_INNER = StageConfig(id=0, name="echo", kind="ar", output=None, default_backend="echo")
_ECHO2 = StageConfig(id=1, name="echo2", kind="ar", output="text", default_backend="echo")
_VOICE = StageConfig(id=1, name="voice", kind="generation", output="audio", default_backend="echo")


class EchoFamily(ModelFamily):
    name = "echo"
    model_types = ("echo",)
    uses_torch = False
    pipelines = {
        DEFAULT_VARIANT: _pipeline(
            "echo", "One echo stage; it takes audio parts too (and echoes the text parts beside them).", [_HEARING], []
        ),
        "chain": _pipeline(
            "echo-chain",
            "Two echo stages; the first streams its pieces to the second, which the client sees.",
            [_INNER, _ECHO2],
            [EdgeConfig(source=0, target=1, carries="text", streaming=True)],
        ),
        "chain-batch": _pipeline(
            "echo-chain-batch",
            "Two echo stages; the second starts once the first finished.",
            [_INNER, _ECHO2],
            [EdgeConfig(source=0, target=1, carries="text", streaming=False)],
        ),
        "voice": _pipeline(
            "echo-voice",
            "Text echo streaming into a 'voice' stage that answers each piece with a tone: text and audio out.",
            [_ECHO, _VOICE],
            [EdgeConfig(source=0, target=1, carries="text", streaming=True)],
        ),
    }

    def build_engine(
        self, stage_name: str, model_dir: str | Path | None, stage_deploy: StageDeployConfig
    ) -> EchoEngine:
        options = stage_deploy.options
        return EchoEngine(
            delay_s=float(options.get("delay_s", 0.0)),
            tokens_per_step=int(options.get("tokens_per_step", 1)),
            modality="audio" if stage_name == "voice" else "text",
            payload_bytes=int(options.get("payload_bytes", 0)),
            fail_warmups=int(options.get("fail_warmups", 0)),
        )


family = EchoFamily()
