"""The offline API: run a model family's pipeline in this process.

    from stages import Omni
    omni = Omni("var/models/qwen2")
    print(omni.generate("Hello")[0].text)

`Omni` is synchronous (its event loop runs on a background thread) and returns whole answers, so
by default it does not bound how far audio may fall behind real time (`max_realtime_lag_s`);
`AsyncOmni` streams deltas on the caller's loop. `load_format="dummy"` (either) builds every stage from the directory's
configs with seeded random weights: `Omni("qwen2_5_omni_7b", load_format="dummy")` serves a directory
of configs and tokenizer files only (see `python -m stages.tiny --real-shapes`). Both drive the orchestrator core through the in-process
driver, with one engine per stage replica on its own thread.

A prompt is a string, a list of chat messages, a `StageRequest`, or a dict of a `StageRequest`'s
fields and `diffusion` (the diffusion knobs: `{"height": 32, "num_inference_steps": 4, "seed": 1}`,
stages/diffusion_knobs.py), checked here and named in the error (`diffusion.seed`).
"""

from __future__ import annotations

import asyncio
import atexit
import threading
import uuid
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from stages.config import DeployConfig, PipelineConfig, load_deploy_config
from stages.diffusion_knobs import diffusion_knobs
from stages.errors import InvalidRequest, StageFailure
from stages.models import ModelFamily, detect_family, get_family
from stages.orchestrator.actions import Complete, Emit, Fail
from stages.orchestrator.inprocess import InProcessDriver
from stages.protocol import Payload, SamplingParams, StageError, StageOutput, StageRequest
from stages.sampling_merge import merge_sampling

Prompt = str | list[dict[str, Any]] | dict[str, Any] | StageRequest
_REQUEST_KEYS = {
    "prompt",
    "messages",
    "prompt_token_ids",
    "options",
    "diffusion",
    "params",
    "payloads",
    "inputs_embeds",
    "request_id",
    "finished",
}


class RequestFailed(StageFailure):
    """A request ended in an engine error, a timeout or a cancellation. `error` has the details."""

    def __init__(self, error: StageError):
        super().__init__(error.message, param=error.param)
        self.error = error
        self.error_type = error.type


@dataclass
class OmniDelta:
    """One streamed piece of a request's answer. The last one has `finished=True` and the metrics."""

    request_id: str
    stage: str = ""
    modality: str = "text"
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    audio: np.ndarray | None = None
    sample_rate: int | None = None
    image: np.ndarray | None = None
    video: np.ndarray | None = None
    files: list[tuple[str, bytes]] = field(default_factory=list)
    """Encoded media as produced (mime type, bytes): PNG / JPEG / WebP images, MP4 videos."""
    progress: float | None = None
    finished: bool = False
    finish_reason: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    usage: dict[str, int] = field(default_factory=dict)


@dataclass
class OmniResult:
    """A whole answer: text, token ids, audio (with its sample rate), images, video, metrics."""

    request_id: str
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    audio: np.ndarray | None = None
    sample_rate: int | None = None
    images: list[np.ndarray] = field(default_factory=list)
    """Decoded images, [H, W, 3] (uint8 when they came encoded, float in [0, 1] when raw)."""
    video: np.ndarray | None = None
    """Raw video frames [F, H, W, 3], when the stage sent them raw (else see `files`)."""
    files: list[tuple[str, bytes]] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    usage: dict[str, int] = field(default_factory=dict)

    def add(self, delta: OmniDelta) -> None:
        """Fold a delta in (audio chunks are joined by the caller, once, at the end)."""
        self.request_id = delta.request_id
        self.text += delta.text
        if delta.modality == "text":
            self.token_ids.extend(delta.token_ids)
        if delta.audio is not None:
            self.sample_rate = delta.sample_rate
        if delta.image is not None:
            self.images.extend(list(delta.image) if delta.image.ndim == 4 else [delta.image])
        if delta.video is not None:
            self.video = delta.video if self.video is None else np.concatenate([self.video, delta.video])
        self.files.extend(delta.files)
        if delta.finished:
            self.finish_reason = delta.finish_reason
            self.metrics = delta.metrics
            self.usage = delta.usage


class AsyncOmni:
    """`async for delta in AsyncOmni(model).generate(prompt): ...` — engines start on first use."""

    def __init__(
        self,
        model: str | Path,
        family: str | ModelFamily | None = None,
        deploy: DeployConfig | dict[str, Any] | str | None = None,
        pipeline: str | None = None,
        load_format: str | None = None,
    ):
        self.family, self.model_dir = _resolve_family(model, family)
        self.pipeline: PipelineConfig = self.family.pipeline_named(pipeline)
        self.deploy = _resolve_deploy(deploy, self.pipeline)
        if load_format is not None:  # every stage, over what the deploy config says
            self.deploy = self.deploy.with_load_format(load_format, self.pipeline)
        self._driver: InProcessDriver | None = None
        self._starting = asyncio.Lock()

    async def start(self) -> None:
        async with self._starting:
            if self._driver is None:
                driver = InProcessDriver.for_family(self.family, self.model_dir, self.pipeline, self.deploy)
                await driver.start()
                self._driver = driver

    async def close(self) -> None:
        if self._driver is not None:
            await self._driver.close()
            self._driver = None

    async def __aenter__(self) -> AsyncOmni:
        await self.start()
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()

    async def generate(
        self,
        prompt: Prompt,
        sampling_params: SamplingParams | dict[str, Any] | None = None,
        *,
        request_id: str | None = None,
        stage_sampling: dict[str, SamplingParams | dict[str, Any]] | None = None,
    ) -> AsyncIterator[OmniDelta]:
        """Stream the answer to one prompt. Raises InvalidRequest / RequestFailed if it fails."""
        request = self._request(prompt, sampling_params, request_id)
        sampling = {name: _sampling(value) for name, value in (stage_sampling or {}).items()}
        await self.start()
        assert self._driver is not None
        async for event in self._driver.generate(request, sampling):
            if isinstance(event, Emit):
                yield self._delta(event.output)
            elif isinstance(event, Complete):
                yield OmniDelta(
                    request_id=event.request_id,
                    finished=True,
                    finish_reason=event.summary.finish_reason,
                    metrics=event.summary.metrics,
                    usage=event.summary.usage,
                )
            elif isinstance(event, Fail):
                raise _failure(event.error)

    async def generate_all(self, prompt: Prompt, sampling_params=None, **kwargs) -> OmniResult:
        """The whole answer to one prompt."""
        result = OmniResult(request_id="")
        audio_chunks: list[np.ndarray] = []
        async for delta in self.generate(prompt, sampling_params, **kwargs):
            result.add(delta)
            if delta.audio is not None:
                audio_chunks.append(delta.audio)
        if audio_chunks:
            result.audio = np.concatenate(audio_chunks, axis=-1)
        return result

    def abort(self, request_id: str) -> None:
        if self._driver is not None:
            self._driver.cancel(request_id)

    def _request(self, prompt: Prompt, sampling_params, request_id: str | None) -> StageRequest:
        request = _to_request(prompt, self.pipeline)
        request.options.diffusion.validate()  # this API is an edge: its knobs are checked here
        request.request_id = request_id or request.request_id or uuid.uuid4().hex
        entry = self.pipeline.entry_stage
        if sampling_params is not None:
            request.sampling = _sampling(sampling_params)
        elif request.sampling is None and entry.kind == "ar":
            request.sampling = merge_sampling(entry.default_sampling, self.deploy.sampling_override(entry))
        return request

    def _delta(self, output: StageOutput) -> OmniDelta:
        stage = self.pipeline.stage(output.stage_id)
        delta = OmniDelta(
            request_id=output.request_id,
            stage=stage.name,
            modality=stage.output or output.modality,
            text=output.text,
            token_ids=list(output.token_ids),
            progress=output.params.get("progress"),
        )
        for key, payload in output.payloads.items():
            kind = key.split("#")[0]
            if kind in ("audio", "image", "video"):
                _attach_media(delta, kind, _array(payload), output.params)
        if delta.audio is not None:
            delta.sample_rate = int(output.params.get("sample_rate", 0)) or None
        return delta


class Omni:
    """Synchronous offline API: `Omni(model_dir).generate(prompts, sampling_params) -> list[OmniResult]`."""

    def __init__(
        self,
        model: str | Path,
        family: str | ModelFamily | None = None,
        deploy: DeployConfig | dict[str, Any] | str | None = None,
        pipeline: str | None = None,
        load_format: str | None = None,
    ):
        if deploy is None:  # whole answers, returned at the end: no listener waits on the audio in real time
            deploy = DeployConfig(max_realtime_lag_s=None)
        self.engine = AsyncOmni(model, family=family, deploy=deploy, pipeline=pipeline, load_format=load_format)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="omni-loop", daemon=True)
        self._thread.start()
        _open_at_exit.add(self)
        try:
            self._run(self.engine.start())
        except BaseException:
            self.close()
            raise

    @property
    def pipeline(self) -> PipelineConfig:
        return self.engine.pipeline

    def generate(
        self,
        prompts: Prompt | list[Prompt],
        sampling_params: SamplingParams | dict[str, Any] | list | None = None,
        *,
        stage_sampling: dict[str, SamplingParams | dict[str, Any]] | None = None,
    ) -> list[OmniResult]:
        """Answer every prompt (run concurrently). A str is one prompt; a list of str many;
        a list of {"role", "content"} dicts is one conversation."""
        batch = _as_batch(prompts)
        params = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(batch)
        if len(params) != len(batch):
            raise InvalidRequest("sampling_params", f"got {len(params)} for {len(batch)} prompts")

        async def answer_all():
            return await asyncio.gather(
                *(
                    self.engine.generate_all(prompt, p, stage_sampling=stage_sampling)
                    for prompt, p in zip(batch, params, strict=True)
                )
            )

        return list(self._run(answer_all()))

    def close(self) -> None:
        _open_at_exit.discard(self)
        if self._loop.is_running():
            self._run(self.engine.close())
            self._run(self._loop.shutdown_default_executor())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)
            self._loop.close()

    def close_at_exit(self) -> None:
        _open_at_exit.discard(self)
        driver = self.engine._driver
        if driver is not None:
            driver.stop_replicas()
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)

    def __enter__(self) -> Omni:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _run(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()


_open_at_exit: weakref.WeakSet[Omni] = weakref.WeakSet()


@atexit.register
def _close_open_pipelines() -> None:
    """Stop the replica threads of every Omni still open when the interpreter exits: a thread
    left inside torch while the interpreter finalises aborts the process."""
    for omni in list(_open_at_exit):
        omni.close_at_exit()


def _resolve_family(model: str | Path, family: str | ModelFamily | None) -> tuple[ModelFamily, Path | None]:
    path = Path(model)
    if isinstance(family, ModelFamily):
        return family, path
    if family is not None:
        return get_family(family), path
    if not path.exists():
        try:
            return get_family(str(model)), None  # a model-free family such as "echo"
        except Exception:
            raise InvalidRequest("model", f"{model} is neither a checkpoint directory nor a model family") from None
    return get_family(detect_family(path)), path


def _resolve_deploy(deploy: DeployConfig | dict[str, Any] | str | None, pipeline: PipelineConfig) -> DeployConfig:
    if deploy is None:
        deploy = DeployConfig()
    elif not isinstance(deploy, DeployConfig):
        return load_deploy_config(deploy, pipeline)
    deploy.validate(pipeline)
    return deploy


def _as_batch(prompts: Prompt | list[Prompt]) -> list[Prompt]:
    if isinstance(prompts, list) and prompts and not _is_conversation(prompts):
        return prompts
    return [prompts]


def _is_conversation(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, dict) and "role" in item for item in value)


def _to_request(prompt: Prompt, pipeline: PipelineConfig) -> StageRequest:
    if isinstance(prompt, StageRequest):
        return msgspec.structs.replace(prompt)
    if isinstance(prompt, str):
        if pipeline.needs_chat_template:
            return StageRequest(request_id="", messages=[{"role": "user", "content": prompt}])
        return StageRequest(request_id="", prompt=prompt)
    if _is_conversation(prompt):
        return StageRequest(request_id="", messages=list(prompt))
    if isinstance(prompt, dict):
        unknown = sorted(set(prompt) - _REQUEST_KEYS)
        if unknown:
            raise InvalidRequest(unknown[0], f"unknown prompt field (known: {sorted(_REQUEST_KEYS)})")
        fields = dict(prompt)
        knobs = diffusion_knobs(fields.pop("diffusion", None), param="diffusion")
        try:
            request = msgspec.convert({"request_id": "", **fields}, StageRequest)
        except msgspec.ValidationError as error:
            raise InvalidRequest("prompt", str(error)) from None
        if knobs.fields():
            request.options.diffusion = knobs
        return request
    raise InvalidRequest("prompt", f"expected a string, a list of messages or a dict, got {type(prompt).__name__}")


def _sampling(value: SamplingParams | dict[str, Any]) -> SamplingParams:
    """The whole sampling, from a struct or a dict of its fields (as vLLM's offline API takes it:
    no stage defaults under it); errors name the field (`temperature`)."""
    if isinstance(value, SamplingParams):
        value.validate()
        return value
    return merge_sampling(request=value)


def _array(payload: Payload) -> np.ndarray:
    from stages.connectors import resolve

    return resolve(payload)


_ENCODED = {"png", "jpeg", "webp", "mp4"}


def _attach_media(delta: OmniDelta, kind: str, array: np.ndarray, params: dict[str, Any]) -> None:
    """Raw arrays as they are; encoded files (params["format"], see stages/diffusion/media.py)
    kept as bytes in `files`, and images also decoded to pixels."""
    output_format = params.get("format")
    if output_format not in _ENCODED:
        setattr(delta, kind, array)
        return
    data = array.tobytes()
    delta.files.append((params.get("mime_type") or f"{kind}/{output_format}", data))
    if kind == "image":
        import io

        from PIL import Image

        delta.image = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def _failure(error: StageError) -> StageFailure:
    if error.type == "invalid_request_error":
        failure = InvalidRequest(
            error.param, error.message.removeprefix(f"{error.param}: ") if error.param else error.message
        )
        failure.error = error
        return failure
    return RequestFailed(error)
