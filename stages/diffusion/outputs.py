"""The StageOutputs a diffusion stage emits: progress, the finished image or video, errors.

- progress: `modality` "image" (or "video"), not finished, no payloads,
  `params = {"progress": step / total, "step": step, "total_steps": total}`;
- result: finished, `payloads["image"]` or `payloads["video"]` (see media.py for the payload
  convention), `params` with format, mime_type, size, seed, steps (and an edit's strength) and
  `progress` 1.0;
- error: finished with `finish_reason` "error" and a `StageError` naming the field if any.
"""

from __future__ import annotations

import time

import numpy as np

from stages.diffusion.media import MIME_TYPES, encode_image, encode_video
from stages.diffusion.request import DiffusionRequest
from stages.errors import StageFailure
from stages.protocol import StageError, StageOutput


def modality(is_video: bool) -> str:
    return "video" if is_video else "image"


def progress_output(request: DiffusionRequest, step: int, total: int, is_video: bool) -> StageOutput:
    return StageOutput(
        request_id=request.request_id,
        stage_id=request.stage_id,
        seq=request.next_seq(),
        modality=modality(is_video),
        params={"progress": step / total, "step": step, "total_steps": total},
    )


def result_output(request: DiffusionRequest, pixels: np.ndarray, is_video: bool) -> StageOutput:
    params = request.params
    fmt = params.output_format
    kind = modality(is_video)
    payload = encode_video(pixels, fmt, params.fps) if is_video else encode_image(pixels, fmt)
    info = {
        "format": fmt,
        "mime_type": MIME_TYPES[fmt],
        "height": params.height,
        "width": params.width,
        "seed": params.seed,
        "num_inference_steps": params.num_inference_steps,
        "guidance_scale": params.guidance_scale,
        "progress": 1.0,
    }
    if is_video:
        info.update(num_frames=params.num_frames, fps=params.fps)
    if params.is_edit:
        info["strength"] = params.strength
    return StageOutput(
        request_id=request.request_id,
        stage_id=request.stage_id,
        seq=request.next_seq(),
        finished=True,
        finish_reason="stop",
        modality=kind,
        payloads={kind: payload},
        params=info,
        metrics={
            "e2e_s": time.perf_counter() - request.arrival,
            "transformer_calls": float(request.transformer_calls),
        },
    )


def error_output(request: DiffusionRequest, error: Exception, is_video: bool) -> StageOutput:
    if isinstance(error, StageFailure):
        stage_error = StageError(message=error.message, type=error.error_type, param=error.param)
    else:
        stage_error = StageError(message=f"{type(error).__name__}: {error}", type="server_error")
    return StageOutput(
        request_id=request.request_id,
        stage_id=request.stage_id,
        seq=request.next_seq(),
        finished=True,
        finish_reason="error",
        modality=modality(is_video),
        error=stage_error,
    )
