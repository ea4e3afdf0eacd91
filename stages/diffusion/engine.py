"""The diffusion stage engine: diffusers pipelines behind the StageEngine interface.

Three ways to run, chosen by `options.batching` (see options.py):

- "step": step-level continuous batching (step_batcher.py) for pipelines with a
  `Denoiser` (SD3, PixArt-Sigma); requests join and leave between denoising steps and
  each `step()` is one denoising step of every running request;
- "request": compatible waiting requests share one pipeline `__call__` (request_batcher.py);
  each `step()` runs one whole batch; any diffusers pipeline;
- "none": one pipeline call per request, the baseline.

Pipelines without a denoiser fall back from "step" to "request". Requests whose input
arrives in chunks (`finished=False`, e.g. an upstream AR stage streaming its prompt)
wait until the last chunk before they are validated and queued.

Edits (an input image in `payloads["image"]`, `options.diffusion.strength`; image_to_image.py) run
in both step batching (where the denoiser supports them: SD3) and request batching (where
diffusers has an img2img pipeline for the family); elsewhere they fail naming `image`.
"""

from __future__ import annotations

import logging
from collections import deque
from pathlib import Path

import numpy as np
import torch

from stages.config import StageDeployConfig
from stages.diffusion.denoiser import make_denoiser
from stages.diffusion.image_to_image import image_to_image_pipeline
from stages.diffusion.options import DiffusionOptions, checkpoint_defaults, read_options
from stages.diffusion.outputs import error_output, progress_output, result_output
from stages.diffusion.params import parse_params
from stages.diffusion.request import DiffusionRequest
from stages.diffusion.request_batcher import RequestBatcher
from stages.diffusion.step_batcher import StepBatcher
from stages.diffusion.traits import pipeline_traits
from stages.engine import StageEngine
from stages.engine_stats import StepStats
from stages.errors import ConfigError, InvalidRequest
from stages.protocol import StageOutput, StageRequest
from stages.replica_stats import Capacity

logger = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class DiffusionEngine(StageEngine):
    unit = "steps"
    last_step = StepStats()

    def __init__(self, pipe, options: DiffusionOptions | None = None, max_batch: int = 16):
        self.pipe = pipe
        self.options = options or DiffusionOptions()
        self.max_batch = max_batch
        denoiser = make_denoiser(pipe) if self.options.batching == "step" else None
        self.traits = denoiser.traits() if denoiser else pipeline_traits(pipe)
        self.mode = self.options.batching
        if self.mode == "step" and denoiser is None:
            logger.info("%s has no step-batching denoiser; using request batching", type(pipe).__name__)
            self.mode = "request"
        _check_accelerations(self.options, self.mode)
        self.step_batcher = (
            StepBatcher(denoiser, self.options.cfg_batching, self.options.step_cache) if denoiser else None
        )
        batch_limit = 1 if self.mode == "none" else max_batch
        edit_pipe = image_to_image_pipeline(pipe) if self.mode != "step" else None
        self.request_batcher = RequestBatcher(pipe, self.traits, batch_limit, edit_pipe)
        self.waiting: deque[DiffusionRequest] = deque()
        self.requests: dict[str, DiffusionRequest] = {}
        self.partial: dict[str, StageRequest] = {}
        """Requests still receiving input chunks, by id."""

    @classmethod
    def from_pretrained(cls, model_dir: str | Path, stage_deploy: StageDeployConfig | None = None) -> DiffusionEngine:
        stage_deploy = stage_deploy or StageDeployConfig()
        options = read_options(stage_deploy, checkpoint_defaults(model_dir))
        return cls(load_pipeline(model_dir, stage_deploy, options), options, stage_deploy.max_batch)

    # --- StageEngine ----------------------------------------------------------------

    def add_request(self, request: StageRequest) -> None:
        if request.request_id in self.requests or request.request_id in self.partial:
            raise InvalidRequest("request_id", f"request {request.request_id!r} is already running")
        if not request.finished:
            self.partial[request.request_id] = request
            return
        self._queue(request)

    def add_chunk(self, request: StageRequest) -> None:
        pending = self.partial.get(request.request_id)
        if pending is None:
            return  # aborted, or never started: nothing waits for this chunk
        text = (pending.prompt or "") + (request.prompt or "")
        params = {**pending.params, **request.params}
        pending.prompt, pending.params = text, params
        if request.finished:
            del self.partial[request.request_id]
            pending.finished = True
            self._queue(pending)

    def step(self) -> list[StageOutput]:
        self.last_step = StepStats()
        if not self.waiting and not (self.step_batcher and self.step_batcher.running):
            return []
        with torch.inference_mode():
            if self.mode == "step":
                return self._denoise_one_step()
            return self._run_one_batch()

    def abort(self, request_id: str) -> None:
        self.partial.pop(request_id, None)
        request = self.requests.pop(request_id, None)
        if request is None:
            return
        if request in self.waiting:
            self.waiting.remove(request)
        if self.step_batcher:
            self.step_batcher.remove(request_id)

    def has_unfinished(self) -> bool:
        return bool(self.requests or self.partial)

    def capacity(self) -> Capacity:
        """Requests admitted (denoising, or queued for the next batch) against `max_batch`."""
        return Capacity(kind="slots", used=len(self.requests), total=self.max_batch)

    def shutdown(self) -> None:
        self.waiting.clear()
        self.requests.clear()
        self.partial.clear()
        if self.step_batcher:
            self.step_batcher.running.clear()

    @property
    def num_running(self) -> int:
        return len(self.step_batcher.running) if self.step_batcher else 0

    @property
    def supports_edits(self) -> bool:
        if self.mode == "step":
            return self.step_batcher.denoiser.supports_edits
        return self.request_batcher.edit_pipe is not None

    # --- internals --------------------------------------------------------------------

    def _queue(self, request: StageRequest) -> None:
        params = parse_params(request, self.traits, self.options)
        if params.is_edit and not self.supports_edits:
            raise InvalidRequest(
                "image",
                f"{type(self.pipe).__name__} cannot start from an input image: image edits need Stable Diffusion 3 "
                "(step or request batching) or another family with a diffusers img2img pipeline (request batching)",
            )
        state = DiffusionRequest(request_id=request.request_id, stage_id=request.stage_id, params=params)
        self.requests[request.request_id] = state
        self.waiting.append(state)

    def _denoise_one_step(self) -> list[StageOutput]:
        outputs: list[StageOutput] = []
        admitted = []
        while self.waiting and len(self.step_batcher.running) + len(admitted) < self.max_batch:
            admitted.append(self.waiting.popleft())
        for request, error in self.step_batcher.admit(admitted):
            outputs.append(self._failed(request, error))
        if not self.step_batcher.running:
            return outputs
        running = len(self.step_batcher.running)
        result = self.step_batcher.step()
        self.last_step = StepStats(batch=running, units=len(result.advanced))
        if self.options.progress_events:
            for request in result.advanced:
                outputs.append(progress_output(request, request.step_index, request.total_steps, self.traits.is_video))
        for request, pixels in result.finished:
            outputs.append(self._finished(request, pixels))
        for request, error in result.failed:
            outputs.append(self._failed(request, error))
        return outputs

    def _run_one_batch(self) -> list[StageOutput]:
        batch = self.request_batcher.take_batch(self.waiting)
        try:
            result = self.request_batcher.run(batch)
        except Exception as error:  # noqa: BLE001 - the batch fails, the engine keeps serving
            logger.exception("diffusion batch of %d failed", len(batch))
            return [self._failed(request, error) for request in batch]
        self.last_step = StepStats(batch=len(batch), units=len(batch) * result.progress_steps)
        outputs: list[StageOutput] = []
        for request, pixels in zip(batch, result.pixels, strict=True):
            request.transformer_calls = result.progress_steps
            if self.options.progress_events:
                total = request.params.denoising_steps
                for step in range(1, result.progress_steps + 1):
                    outputs.append(progress_output(request, step, total, self.traits.is_video))
            outputs.append(self._finished(request, pixels))
        return outputs

    def _finished(self, request: DiffusionRequest, pixels: np.ndarray) -> StageOutput:
        self.requests.pop(request.request_id, None)
        try:
            return result_output(request, pixels, self.traits.is_video)
        except Exception as error:  # noqa: BLE001 - e.g. an encoder failure
            return error_output(request, error, self.traits.is_video)

    def _failed(self, request: DiffusionRequest, error: Exception) -> StageOutput:
        self.requests.pop(request.request_id, None)
        logger.warning("diffusion request %s failed: %s", request.request_id, error)
        return error_output(request, error, self.traits.is_video)


def _check_accelerations(options: DiffusionOptions, mode: str) -> None:
    if mode == "step":
        return
    if options.step_cache > 0:
        raise ConfigError("options.step_cache", f"step caching needs step batching; this stage runs {mode!r} batching")
    if not options.cfg_batching:
        raise ConfigError("options.cfg_batching", "turning CFG batching off applies to step batching only")


def load_pipeline(model_dir: str | Path, stage_deploy: StageDeployConfig, options: DiffusionOptions):
    """A diffusers pipeline from a local directory (or hub id), placed per the deploy config; with
    `load_format: dummy` its models are built from their configs with seeded random weights."""
    from diffusers import DiffusionPipeline

    from stages.diffusion.dummy_pipeline import dummy_pipeline
    from stages.models.dummy_weights import dummy_seed
    from stages.models.weight_reads import announce_pipeline, counted_reads

    seed = dummy_seed(stage_deploy)
    if seed is None:
        announce_pipeline(model_dir)
        with counted_reads("transformers", "diffusers"):
            pipe = DiffusionPipeline.from_pretrained(str(model_dir), dtype=DTYPES[stage_deploy.dtype])
    else:
        build_on = stage_deploy.device if options.cpu_offload == "none" else "cpu"
        pipe = dummy_pipeline(model_dir, device=build_on, dtype=DTYPES[stage_deploy.dtype], seed=seed)
    pipe.set_progress_bar_config(disable=True)
    if options.cpu_offload == "model":
        pipe.enable_model_cpu_offload(device=stage_deploy.device)
    elif options.cpu_offload == "sequential":
        pipe.enable_sequential_cpu_offload(device=stage_deploy.device)
    else:
        pipe.to(stage_deploy.device)
    return pipe
