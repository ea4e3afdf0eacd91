"""The wire contract between processes: requests into a stage, outputs out of it.

Everything here is a msgspec struct so it travels as msgpack over Redis streams and
stays importable without torch (the control plane reads these too). Large tensors
travel as `PayloadRef` handles resolved by a connector; small ones inline as `Tensor`.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from stages.config import PipelineConfig, StageDeployConfig
from stages.diffusion_knobs import DiffusionKnobs
from stages.replica_stats import DeviceUsage, StageStats

Modality = Literal["text", "tokens", "hidden", "codes", "audio", "image", "video", "embeddings", "kv"]
FinishReason = Literal["stop", "length", "abort", "error", "timeout"]


class Tensor(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    """A dense array by value: dtype name (numpy spelling), shape, raw little-endian bytes."""

    dtype: str
    shape: list[int]
    data: bytes

    @property
    def nbytes(self) -> int:
        return len(self.data)


class PayloadRef(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    """A handle to a payload held by a connector (shared memory segment, Redis key)."""

    connector: Literal["shm", "redis"]
    key: str
    nbytes: int
    dtype: str = ""
    shape: list[int] = []
    host: str = ""
    """Shared memory: the host whose /dev/shm holds the segment (a reader elsewhere cannot map it)."""
    owner: str = ""
    """Shared memory: the replica that wrote the segment (it exports or releases it on request)."""


Payload = Tensor | PayloadRef

DEFAULT_MAX_TOKENS = 512
"""The output tokens an AR stage may write when neither the pipeline, the deployment nor the
request bounds them (docs/configuration.md)."""


class SamplingParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Per-request sampling for AR stages. `validate()` names the offending field; a stage's
    sampling is merged from its layers once, by `stages.sampling_merge.merge_sampling`."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    max_tokens: int = DEFAULT_MAX_TOKENS
    min_tokens: int = 0
    stop: list[str] = []
    stop_token_ids: list[int] = []
    ignore_eos: bool = False
    repetition_penalty: float | None = None
    """> 1 discourages tokens already in the prompt or output (1: off; None: the stage's default)."""

    def validate(self) -> None:
        from stages.errors import InvalidRequest

        if self.temperature < 0:
            raise InvalidRequest("temperature", "must be >= 0")
        if not 0 < self.top_p <= 1:
            raise InvalidRequest("top_p", "must be in (0, 1]")
        if self.top_k < 0:
            raise InvalidRequest("top_k", "must be >= 0 (0 disables it)")
        if self.max_tokens < 1:
            raise InvalidRequest("max_tokens", "must be >= 1")
        if self.min_tokens < 0 or self.min_tokens > self.max_tokens:
            raise InvalidRequest("min_tokens", "must be between 0 and max_tokens")
        if self.repetition_penalty is not None and self.repetition_penalty <= 0:
            raise InvalidRequest("repetition_penalty", "must be > 0")
        for token_id in self.stop_token_ids:
            if token_id < 0:
                raise InvalidRequest("stop_token_ids", f"token ids must be >= 0, got {token_id}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0 or self.top_k == 1


class StageError(msgspec.Struct, frozen=True, kw_only=True):
    """Why a request failed in a stage. `param` names the offending input field, if any."""

    message: str
    type: Literal["invalid_request_error", "server_error", "timeout_error", "cancelled"] = "server_error"
    param: str | None = None
    code: str | None = None
    retry_after_s: float | None = None
    """When the request may be tried again (a refusal for load: `code="overloaded"`)."""


class RequestOptions(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What a request asks of its stages besides its prompt and sampling, checked at the edge and
    carried to every stage of the request (the orchestrator forwards it along the graph)."""

    modalities: list[str] | None = None
    """The output modalities asked for (None: all the pipeline makes); stages leading to none of
    them are left out."""
    voice: str | None = None
    """The voice to speak with, in the checkpoint's spelling (None: the model's default); a custom
    voice's conditioning travels in `params` (stages/voice_conditioning.py)."""
    language: str | None = None
    instructions: str | None = None
    """Speech: how to say it."""
    max_audio_seconds: float | None = None
    """The audio cap of this request (stages/audio_cap.py), checked against the deployment's."""
    raw_prompt: bool = False
    """The prompt as written: a chat-templated entry stage applies no template (/v1/completions)."""
    diffusion: DiffusionKnobs = msgspec.field(default_factory=DiffusionKnobs)
    """The diffusion knobs (size, steps, guidance, seed...), checked at the edge (stages/diffusion_knobs.py)."""
    extra: dict[str, Any] = {}
    """Family-specific options, by name: chat's `additional_information` less its voice keys (the
    Qwen-Omni thinker's `use_audio_in_video`, an AR stage's `hidden_layers`, a diffusion stage's
    `prompt`, the echo stage's test hooks) and the deployment warm-up's `warmup` mark."""


class StageRequest(msgspec.Struct, kw_only=True):
    """A request (seq 0) or a further input chunk (seq > 0) for one stage.

    `finished` says whether more input chunks will follow for this request; a stage
    request that is not finished waits for `add_chunk` before it can complete.
    """

    request_id: str
    stage_id: int = 0
    seq: int = 0
    finished: bool = True
    prompt: str | None = None
    prompt_token_ids: list[int] | None = None
    messages: list[dict[str, Any]] | None = None
    inputs_embeds: Payload | None = None
    payloads: dict[str, Payload] = {}
    sampling: SamplingParams | None = None
    options: RequestOptions = msgspec.field(default_factory=RequestOptions)
    """The request's options; the entry's request carries them and the orchestrator forwards them."""
    params: dict[str, Any] = {}
    """Data between stages (a thinker's prompt ids for its talker, hidden-state layers...) and, on
    the entry's request, what the platform adds (a custom voice's conditioning,
    stages/voice_conditioning.py); what the request asks for travels in `options`."""
    arrival_time: float = 0.0
    group_sampling: dict[str, SamplingParams] = {}
    """For the entry stage of a stage group (seq 0): the request's sampling of the group's other
    stages, by stage name (the group's host hands them their inputs itself)."""
    trace: str = ""
    """The request's trace context, a W3C traceparent (stages.tracing): from the web process in a
    Submit, from the orchestrator's span in what it sends to a stage."""


class StageOutput(msgspec.Struct, kw_only=True):
    """What a stage produced for one request in one step.

    `seq` numbers a request's outputs from one stage, so receivers can order and
    de-duplicate them. Client-visible deltas: `text` (text modality), `payloads["audio"]`
    with `params["sample_rate"]`, `payloads["image"]` etc. Inter-stage deltas: `token_ids`,
    `payloads["hidden"]`, `payloads["codes"]`.
    """

    request_id: str
    stage_id: int = 0
    seq: int = 0
    finished: bool = False
    finish_reason: FinishReason | None = None
    modality: Modality = "text"
    text: str = ""
    token_ids: list[int] = []
    payloads: dict[str, Payload] = {}
    params: dict[str, Any] = {}
    error: StageError | None = None
    metrics: dict[str, float] = {}


class ControlMessage(msgspec.Struct, kw_only=True, tag=True):
    """Base for control messages on a replica's input stream."""


class Abort(ControlMessage, kw_only=True):
    request_id: str


class Drain(ControlMessage, kw_only=True):
    pass


class Export(ControlMessage, kw_only=True):
    """To the replica that wrote these shared-memory payloads: copy them into Redis (under
    `stages.streams.payload(key)`, with the payload TTL), because their reader runs on
    another host."""

    payloads: list[PayloadRef]


class Release(ControlMessage, kw_only=True):
    """To the replica that wrote these shared-memory segments: nobody will read them (their
    request ended before they were delivered); unlink them."""

    keys: list[str]


_encoder = msgspec.msgpack.Encoder()


def encode(message: msgspec.Struct) -> bytes:
    return _encoder.encode(message)


def decoder(kind: type) -> msgspec.msgpack.Decoder:
    return msgspec.msgpack.Decoder(kind)


ReplicaState = Literal["LOADING", "READY", "DRAINING", "STOPPED", "ERROR"]


class ReplicaSpec(msgspec.Struct, kw_only=True):
    """Everything a replica host needs to build its stage engine (sent with the start task).

    Its configs travel typed: decoding a spec (the start task's argument, the host's `--spec-json`)
    refuses a malformed one (unknown field, wrong type, a pipeline failing its own checks), naming
    the field (`$.stage_deploy.dtype`). The deploy configs' value ranges are checked where the host
    places them on its device, so that a bad value is reported as the replica's permanent error."""

    replica_id: str
    deployment_id: str
    family: str
    pipeline: PipelineConfig | None = None
    """The deployment's stage graph (None: the family's own), validated as it is decoded."""
    stage: str
    stage_id: int
    model_dir: str
    stage_deploy: StageDeployConfig
    device: str = "cpu"
    group: str = ""
    """A stage group's name: the host runs every stage of `members` in one process (`stage` is its entry)."""
    members: dict[str, StageDeployConfig] = {}
    """A group's stages in order, by name, with each one's deploy config."""


class ReplicaStatus(msgspec.Struct, kw_only=True):
    """What a replica host reports: in its heartbeat key (JSON) and, on state changes, as an
    event on the orchestrator inbox."""

    replica_id: str
    deployment_id: str
    stage: str
    state: ReplicaState
    host: str = ""
    pid: int = 0
    device: str = "cpu"
    progress: float = 0.0
    """Loading progress in [0, 1]."""
    queue_depth: int = 0
    running: int = 0
    error: str | None = None
    permanent: bool = False
    """The error is deterministic (a configuration the engine cannot load): retrying cannot help."""
    ts: float = 0.0
    transfers: dict[str, dict[str, float]] = {}
    """Connector totals since the host started: `<connector>.<direction>` -> count, bytes, seconds."""
    dropped_inputs: int = 0
    """Inputs dropped unprocessed since the host started: of requests that had ended (aborted,
    failed, finished) or that it had already taken (redeliveries)."""
    phase: str = ""
    """While LOADING: what the host is doing (importing, loading weights, warming up)."""
    weights_loaded_bytes: int | None = None
    """While its weights load and after: the bytes of them its loader has read (None: not counted)."""
    weights_total_bytes: int | None = None
    """The bytes of weights the loader reads: its weight files, or its tensors in them; for dummy
    weights, the parameters' bytes. `progress` is loaded / total while they load."""
    stats: StageStats | None = None
    """Steps, batches, throughput, queue waits and cache use since the host started."""
    device_usage: DeviceUsage | None = None
