"""Pipeline and deploy configuration.

`PipelineConfig` is a model family's logical stage graph (frozen, defined in code under
`stages/models/`). `DeployConfig` is the user-editable placement of one deployment.
Both load from and dump to JSON or YAML; every validation error names its field as a
dotted path (`stages.talker.replicas`).
"""

from __future__ import annotations

import json
from typing import Any, Literal

import msgspec

from stages.errors import ConfigError

StageKind = Literal["ar", "generation", "diffusion"]
Backend = Literal["torch", "vllm", "generation", "diffusers", "echo"]
DType = Literal["float32", "bfloat16", "float16"]
ConnectorChoice = Literal["auto", "inline", "shm", "redis"]
LoadFormat = Literal["auto", "dummy"]
EdgeCarries = Literal["text", "tokens", "hidden", "codes", "embeddings", "kv"]
OutputModality = Literal["text", "audio", "image", "video"]
InputModality = Literal["text", "audio", "image", "video"]
BACKENDS_OF_KIND: dict[str, tuple[str, ...]] = {
    "ar": ("torch", "vllm", "echo"),
    "generation": ("generation", "echo"),
    "diffusion": ("diffusers", "echo"),
}


class StageConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One node of the stage graph."""

    id: int
    name: str
    kind: StageKind
    output: OutputModality | None = None
    """The client-visible modality this stage emits, or None for inner stages."""
    inputs: tuple[InputModality, ...] = ("text",)
    """What an entry stage takes from the request (the transcription routes serve pipelines whose
    entry stage takes audio and emits text)."""
    default_backend: Backend = "torch"
    model_subdir: str = ""
    """Which part of the checkpoint directory this stage loads (empty: the whole)."""
    default_sampling: dict[str, Any] = {}
    init_image: bool = False
    """The stage can start from an input image instead of noise (image edits: `payloads["image"]`
    with `options.diffusion.strength`); the edits route serves pipelines whose entry stage can."""


class EdgeConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    source: int
    target: int
    carries: EdgeCarries = "text"
    streaming: bool = False
    """Async chunk: the target starts on the source's partial outputs."""


class PipelineConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    family: str
    name: str
    description: str = ""
    stages: list[StageConfig]
    edges: list[EdgeConfig] = []
    needs_chat_template: bool = False
    request_defaults: dict[str, Any] = {}
    """Per-request parameters a client should start from (a video family's frame count), published
    so that the console's forms open on values the engine accepts."""
    frame_multiple: int = 1
    """Video: num_frames - 1 must be a multiple of this (the VAE's temporal downscale, 4 for Wan)."""
    internal: bool = False
    """A test pipeline (the echo family): deployable, but not offered in the console's catalog."""

    def __post_init__(self) -> None:
        _validate_pipeline(self)

    def stage(self, stage_id: int) -> StageConfig:
        for stage in self.stages:
            if stage.id == stage_id:
                return stage
        raise KeyError(stage_id)

    def stage_named(self, name: str) -> StageConfig:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise KeyError(name)

    @property
    def entry_stage(self) -> StageConfig:
        targets = {edge.target for edge in self.edges}
        return next(stage for stage in self.stages if stage.id not in targets)

    def downstream(self, stage_id: int) -> list[EdgeConfig]:
        return [edge for edge in self.edges if edge.source == stage_id]

    def upstream(self, stage_id: int) -> list[EdgeConfig]:
        return [edge for edge in self.edges if edge.target == stage_id]

    @property
    def output_modalities(self) -> list[str]:
        return [stage.output for stage in self.stages if stage.output]


def _validate_pipeline(config: PipelineConfig) -> None:
    if not config.stages:
        raise ConfigError("stages", "a pipeline needs at least one stage")
    ids = [stage.id for stage in config.stages]
    names = [stage.name for stage in config.stages]
    if len(set(ids)) != len(ids):
        raise ConfigError("stages.id", f"stage ids must be unique, got {ids}")
    if len(set(names)) != len(names):
        raise ConfigError("stages.name", f"stage names must be unique, got {names}")
    for index, stage in enumerate(config.stages):
        if stage.init_image and stage.kind != "diffusion":
            raise ConfigError(f"stages[{index}].init_image", "only a diffusion stage can start from an input image")
    for index, edge in enumerate(config.edges):
        for end in ("source", "target"):
            if getattr(edge, end) not in ids:
                raise ConfigError(f"edges[{index}].{end}", f"no stage with id {getattr(edge, end)}")
        if edge.source == edge.target:
            raise ConfigError(f"edges[{index}]", "an edge cannot loop on one stage")
    _check_request_defaults(config)
    entries = [sid for sid in ids if sid not in {edge.target for edge in config.edges}]
    if len(entries) != 1:
        raise ConfigError("edges", f"the graph needs exactly one entry stage, found {entries}")
    _check_acyclic(config)


def _check_request_defaults(config: PipelineConfig) -> None:
    if config.frame_multiple < 1:
        raise ConfigError("frame_multiple", f"must be at least 1, got {config.frame_multiple}")
    frames = config.request_defaults.get("num_frames")
    if frames is not None and (not isinstance(frames, int) or frames < 1 or (frames - 1) % config.frame_multiple):
        raise ConfigError("request_defaults.num_frames", f"must be {config.frame_multiple}k + 1, got {frames!r}")


def _check_acyclic(config: PipelineConfig) -> None:
    remaining = {stage.id for stage in config.stages}
    edges = list(config.edges)
    while remaining:
        free = {sid for sid in remaining if not any(e.target == sid and e.source in remaining for e in edges)}
        if not free:
            raise ConfigError("edges", "the stage graph has a cycle")
        remaining -= free


class StageDeployConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Placement and engine knobs of one stage in one deployment."""

    backend: Backend | None = None
    device: str = "cpu"
    replicas: int = 1
    pool: str = "cpu"
    pools: list[str] = []
    """Spread the replicas over several pools, one per host for instance (`["cpu.a", "cpu.b"]`):
    replica i goes to pools[i % len(pools)]. Empty: every replica goes to `pool`."""
    max_batch: int = 16
    max_length: int = 2048
    dtype: DType = "float32"
    load_format: LoadFormat = "auto"
    """Where the weights come from: "auto" reads them from the checkpoint; "dummy" (vLLM's name) builds
    the model from the directory's configs on its device and fills every weight with seeded random
    values, reading no weight file (a config-only directory serves; `options.dummy_seed`, default 0)."""
    kv_memory_mb: int = 256
    prefill_chunk: int | None = None
    """Prompt tokens an autoregressive stage computes per step, all requests together (None: 2048 on
    CUDA, where requests arriving together are admitted in fewer steps; 512 elsewhere)."""
    async_chunk_size: int = 25
    first_chunk_size: int = 5
    connector: ConnectorChoice = "auto"
    gpu_sms: int | None = None
    """On a GPU, the SMs this stage's kernels may occupy (a CUDA green context, rounded up to the
    device's granularity, 8 on Hopper; None: all). The other stages' kernels may still use every SM,
    so the rest stay free for them: a code2wav confined this way cannot hold up a talker's decode step."""
    cpu_threads: int | None = None
    """torch threads of each replica's process (None: OMNISTAGE_REPLICA_THREADS on the worker, else 1):
    a worker pool hosts several replica processes, so none takes every core."""
    options: dict[str, Any] = {}
    """Engine-specific switches (diffusion: cfg_batching, step_cache, cpu_offload …)."""
    sampling: dict[str, Any] = {}
    """Default sampling for this stage when a request gives none (e.g. a talker's max_tokens),
    over the pipeline's own default."""
    group: str | None = None
    """Stages naming the same group run in one replica host process, which hands each request's
    outputs from one of them to the next in memory (`stages.groups`); the orchestrator routes
    only into the group's entry stage and takes back what leaves the group."""
    max_running: int | None = None
    """Admission: requests one replica of this stage works on at once (None: `max_batch`)."""
    max_waiting: int | None = None
    """Admission: requests admitted per replica beyond `max_running`, queued or still upstream
    (None: `max_batch`). A request that finds every stage it needs full is refused with a 503."""

    def pool_of(self, index: int) -> str:
        """The pool that hosts replica `index`."""
        return self.pools[index % len(self.pools)] if self.pools else self.pool

    @property
    def running_limit(self) -> int:
        return self.max_running if self.max_running is not None else self.max_batch

    @property
    def waiting_limit(self) -> int:
        return self.max_waiting if self.max_waiting is not None else self.max_batch

    def validate(self, path: str) -> None:
        if self.replicas < 1:
            raise ConfigError(f"{path}.replicas", "must be at least 1")
        if self.max_batch < 1:
            raise ConfigError(f"{path}.max_batch", "must be at least 1")
        if self.max_length < 2:
            raise ConfigError(f"{path}.max_length", "must be at least 2")
        if self.kv_memory_mb < 1:
            raise ConfigError(f"{path}.kv_memory_mb", "must be at least 1")
        if self.prefill_chunk is not None and self.prefill_chunk < 1:
            raise ConfigError(f"{path}.prefill_chunk", "must be at least 1")
        if self.async_chunk_size < 1 or self.first_chunk_size < 1:
            raise ConfigError(f"{path}.async_chunk_size", "chunk sizes must be at least 1")
        if self.cpu_threads is not None and self.cpu_threads < 1:
            raise ConfigError(f"{path}.cpu_threads", "must be at least 1")
        if self.gpu_sms is not None and self.gpu_sms < 1:
            raise ConfigError(f"{path}.gpu_sms", "must be at least 1")
        if self.max_running is not None and self.max_running < 1:
            raise ConfigError(f"{path}.max_running", "must be at least 1")
        if self.max_waiting is not None and self.max_waiting < 0:
            raise ConfigError(f"{path}.max_waiting", "must be at least 0")
        if self.sampling:
            from stages.protocol import SamplingParams

            try:
                msgspec.convert(self.sampling, SamplingParams).validate()
            except msgspec.ValidationError as error:
                raise ConfigError(f"{path}.sampling", str(error)) from None
            except Exception as error:  # InvalidRequest names the sampling field
                raise ConfigError(f"{path}.sampling", str(error)) from None
        if not _is_device(self.device):
            raise ConfigError(f"{path}.device", f"expected 'cpu', 'cuda' or 'cuda:N', got {self.device!r}")
        for field, pool in [("pool", self.pool), *((f"pools.{i}", name) for i, name in enumerate(self.pools))]:
            if not pool or not pool.replace(".", "").replace("-", "").replace("_", "").isalnum():
                raise ConfigError(f"{path}.{field}", f"expected a queue name such as 'cpu' or 'gpu.h200', got {pool!r}")
        if self.group is not None and not _is_name(self.group):
            raise ConfigError(f"{path}.group", f"expected a name of letters, digits, '-' or '_', got {self.group!r}")


def _is_name(value: str) -> bool:
    return bool(value) and len(value) <= 64 and value.replace("-", "").replace("_", "").isalnum()


def _is_device(device: str) -> bool:
    if device in ("cpu", "cuda"):
        return True
    prefix, _, index = device.partition(":")
    return prefix == "cuda" and index.isdigit()


class DeployConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Per-stage placement, keyed by stage name. Stages left out take the defaults."""

    stages: dict[str, StageDeployConfig] = {}
    max_queue: int = 64
    request_timeout_s: float = 300.0
    hop_timeout_s: float = 30.0
    max_realtime_lag_s: float | None = 30.0
    """A request whose audio falls this many seconds behind real time (wall time since its first
    audio minus the audio produced) fails with `behind_realtime` instead of stalling its listener
    (None: no bound)."""
    map_openai_voices: bool = False
    """OpenAI's voice names (alloy, ash, ... verse) speak with the model's default voice instead of
    being refused with the list of its own voices."""
    max_audio_seconds: float | None = None
    """The most audio one request may make (stages/audio_cap.py); None: the default ceiling, with
    requests capped in proportion to the text they speak."""

    def sampling_override(self, stage: StageConfig) -> dict[str, Any]:
        """This deployment's per-stage `sampling` (e.g. a talker's max_tokens): over the pipeline's
        default, under the request's fields (`stages.sampling_merge.merge_sampling`)."""
        overrides = self.stages.get(stage.name)
        return dict(overrides.sampling) if overrides else {}

    def for_stage(self, stage: StageConfig) -> StageDeployConfig:
        config = self.stages.get(stage.name) or StageDeployConfig()
        if config.backend is None:
            config = msgspec.structs.replace(config, backend=stage.default_backend)
        return config

    def with_load_format(self, load_format: str, pipeline: PipelineConfig) -> DeployConfig:
        """A copy whose every stage of `pipeline` loads its weights as `load_format` says."""
        load_format = _convert(load_format, LoadFormat, "load_format")
        stages = {
            stage.name: msgspec.structs.replace(
                self.stages.get(stage.name) or StageDeployConfig(), load_format=load_format
            )
            for stage in pipeline.stages
        }
        return msgspec.structs.replace(self, stages={**self.stages, **stages})

    def validate(self, pipeline: PipelineConfig) -> None:
        known = {stage.name for stage in pipeline.stages}
        for name, stage_config in self.stages.items():
            if name not in known:
                raise ConfigError(
                    f"stages.{name}", f"no stage {name!r} in pipeline {pipeline.name} (stages: {sorted(known)})"
                )
            stage_config.validate(f"stages.{name}")
            kind = pipeline.stage_named(name).kind
            if stage_config.backend is not None and stage_config.backend not in BACKENDS_OF_KIND[kind]:
                raise ConfigError(
                    f"stages.{name}.backend",
                    f"a {kind} stage cannot run on {stage_config.backend!r} (use {', '.join(BACKENDS_OF_KIND[kind])})",
                )
        if self.max_queue < 1:
            raise ConfigError("max_queue", "must be at least 1")
        if self.hop_timeout_s <= 0 or self.request_timeout_s <= 0:
            raise ConfigError("hop_timeout_s", "timeouts must be positive")
        if self.max_audio_seconds is not None and self.max_audio_seconds <= 0:
            raise ConfigError("max_audio_seconds", "must be positive")
        from stages.groups import validate_groups  # the groups module reads these configs

        validate_groups(pipeline, self)
        if self.max_realtime_lag_s is not None and self.max_realtime_lag_s <= 0:
            raise ConfigError("max_realtime_lag_s", "must be positive (or null for no bound)")


def _convert(data: Any, kind: type, path: str = "") -> Any:
    try:
        return msgspec.convert(data, kind)
    except msgspec.ValidationError as error:
        if isinstance(error.__cause__, ConfigError):  # raised by a __post_init__ check
            raise error.__cause__ from None
        field = _field_of(str(error))
        if path:
            field = path if field == "$" else f"{path}.{field}"
        message = str(error).rsplit(" - at `$", 1)[0]
        raise ConfigError(field, message) from None


def _field_of(message: str) -> str:
    """msgspec ends messages with '- at `$.stages.thinker.replicas`'."""
    if "`$." in message:
        return message.rsplit("`$.", 1)[1].rstrip("`")
    return "$"


def load_deploy_config(data: dict[str, Any] | str | bytes, pipeline: PipelineConfig | None = None) -> DeployConfig:
    """Parse a DeployConfig from a dict, JSON or YAML text; validate against `pipeline`."""
    raw = _parse(data)
    if isinstance(raw, dict) and isinstance(raw.get("stages"), dict):
        for name, stage in raw["stages"].items():  # msgspec reports dict keys as [...]: name them
            _convert(stage, StageDeployConfig, f"stages.{name}")
    config = _convert(raw, DeployConfig)
    if pipeline is not None:
        config.validate(pipeline)
    return config


def load_pipeline_config(data: dict[str, Any] | str | bytes) -> PipelineConfig:
    return _convert(_parse(data), PipelineConfig)


def _parse(data: dict[str, Any] | str | bytes) -> Any:
    if isinstance(data, dict):
        return data
    text = data.decode() if isinstance(data, bytes) else data
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        import yaml

        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise ConfigError("$", f"neither JSON nor YAML: {error}") from None


def to_dict(config: msgspec.Struct) -> dict[str, Any]:
    return msgspec.to_builtins(config)


def dump_json(config: msgspec.Struct) -> str:
    return msgspec.json.encode(config).decode()


def dump_yaml(config: msgspec.Struct) -> str:
    import yaml

    return yaml.safe_dump(to_dict(config), sort_keys=False)
