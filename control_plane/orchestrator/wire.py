"""Messages between the API processes and the orchestrator, as Redis stream fields."""

from __future__ import annotations

import time
import uuid

import msgspec

from stages.diffusion_knobs import DiffusionKnobs
from stages.orchestrator import Cancel, Complete, Emit, Fail, InputChunk, RequestSummary, Submit
from stages.protocol import RequestOptions, SamplingParams, StageError, StageOutput, StageRequest

ClientEvent = Submit | Cancel | InputChunk
WARMUP_STAGE_TOKENS = 16
WARMUP_PREFIX = "warmup-"
REPLY_STREAM_MAXLEN = 100_000
"""A reply stream's reader falling this many messages behind has lost the oldest."""
_event_encoder = msgspec.msgpack.Encoder()
_event_decoder = msgspec.msgpack.Decoder(ClientEvent)
_output_decoder = msgspec.msgpack.Decoder(StageOutput)
_summary_decoder = msgspec.msgpack.Decoder(RequestSummary)
_error_decoder = msgspec.msgpack.Decoder(StageError)


def encode_event(event: ClientEvent) -> dict[str, bytes]:
    return {"kind": b"event", "data": _event_encoder.encode(event)}


def decode_event(data: bytes) -> ClientEvent:
    return _event_decoder.decode(data)


def request_id_of(event) -> str | None:
    if isinstance(event, Submit):
        return event.request.request_id
    return getattr(event, "request_id", None)


def client_message(action: Emit | Complete | Fail) -> dict[str, bytes]:
    if isinstance(action, Emit):
        return {"kind": b"output", "data": _event_encoder.encode(action.output)}
    if isinstance(action, Complete):
        return {"kind": b"complete", "summary": _event_encoder.encode(action.summary)}
    return {
        "kind": b"fail",
        "error": _event_encoder.encode(action.error),
        "summary": _event_encoder.encode(action.summary),
    }


def reply_message(action: Emit | Complete | Fail) -> dict[str, bytes | str]:
    """`client_message` tagged with its request id, for a reply stream that several requests share."""
    return {**client_message(action), "request": action.request_id}


class ClientMessage(msgspec.Struct, kw_only=True):
    kind: str
    output: StageOutput | None = None
    summary: RequestSummary | None = None
    error: StageError | None = None


def decode_client_message(fields: dict[bytes, bytes]) -> ClientMessage:
    kind = fields[b"kind"].decode()
    message = ClientMessage(kind=kind)
    if kind == "output":
        message.output = _output_decoder.decode(fields[b"data"])
    if b"summary" in fields:
        message.summary = _summary_decoder.decode(fields[b"summary"])
    if b"error" in fields:
        message.error = _error_decoder.decode(fields[b"error"])
    return message


def warmup_submit(deployment_id: str, request_id: str, pipeline: dict | None = None) -> Submit:
    """A short request through every stage: each AR stage makes a few greedy tokens, a diffusion
    stage two denoising steps at 64x64."""
    later_stages = [stage for stage in (pipeline or {}).get("stages", []) if stage.get("kind") == "ar"][1:]
    sampling = {
        stage["name"]: SamplingParams(max_tokens=WARMUP_STAGE_TOKENS, temperature=0.0) for stage in later_stages
    }
    request = StageRequest(
        request_id=request_id,
        prompt="Hello",
        messages=[{"role": "user", "content": "Hello"}],
        sampling=SamplingParams(max_tokens=2, temperature=0.0),
        options=RequestOptions(
            diffusion=DiffusionKnobs(num_inference_steps=2, height=64, width=64), extra={"warmup": True}
        ),
        arrival_time=time.time(),
    )
    return Submit(deployment_id=deployment_id, request=request, sampling=sampling, at=time.time())


def warmup_request_id(deployment_id: str) -> str:
    """A warm-up's request id names its deployment, so whichever orchestrator sees it end can
    record the result (with two orchestrators, either may handle the last output)."""
    return f"{WARMUP_PREFIX}{deployment_id}-{uuid.uuid4().hex[:8]}"


def warmup_deployment_of(request_id: str) -> str | None:
    """The deployment id a warm-up request id names; None for any other request."""
    if not request_id.startswith(WARMUP_PREFIX):
        return None
    deployment_id = request_id.removeprefix(WARMUP_PREFIX).rpartition("-")[0]
    try:
        return str(uuid.UUID(deployment_id))
    except ValueError:
        return None
