"""Per-request diffusion parameters: the request's knobs (`RequestOptions.diffusion`, typed and
checked once at the edge by stages/diffusion_knobs.py) over the defaults, checked against what the
deployment and its pipeline allow.

Every check raises `InvalidRequest` naming the field, so one bad request fails alone.
An edit (a request with an input image in `payloads["image"]`) also takes `strength`
(default 0.6) and, without a size, renders at its image's size.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

from stages.diffusion.image_to_image import DEFAULT_STRENGTH, denoising_steps
from stages.diffusion.init_image import read_init_image, size_from_image
from stages.diffusion.options import DiffusionOptions
from stages.diffusion_knobs import IMAGE_FORMATS, VIDEO_FORMATS, DiffusionKnobs
from stages.errors import InvalidRequest
from stages.protocol import StageRequest


@dataclass(frozen=True)
class PipelineTraits:
    """What a loaded pipeline needs from its inputs."""

    size_multiple: int
    """Height and width must be multiples of this (VAE downscale x transformer patch)."""
    default_height: int
    default_width: int
    default_steps: int
    default_guidance: float
    is_video: bool = False
    frame_multiple: int = 1
    """Video: num_frames - 1 must be a multiple of this (the VAE's temporal downscale)."""
    default_frames: int = 1
    fps: int = 16


@dataclass(frozen=True)
class DiffusionParams:
    prompt: str
    negative_prompt: str
    height: int
    width: int
    num_inference_steps: int
    guidance_scale: float
    seed: int
    output_format: str
    num_frames: int = 1
    fps: int = 16
    """A video's frame rate."""
    strength: float | None = None
    """Set for an edit (image-to-image, see image_to_image.py); None for text-to-image."""
    init_image: Any = field(default=None, compare=False, repr=False)
    """An edit's input image (RGB PIL image, see init_image.py)."""

    @property
    def do_cfg(self) -> bool:
        return self.guidance_scale > 1.0

    @property
    def is_edit(self) -> bool:
        return self.init_image is not None

    @property
    def denoising_steps(self) -> int:
        """The steps this request runs: fewer than `num_inference_steps` for an edit below strength 1."""
        return denoising_steps(self.num_inference_steps, self.strength)

    def batch_key(self) -> tuple:
        """Requests with equal keys can share one pipeline call (request batching)."""
        return (self.height, self.width, self.num_inference_steps, self.guidance_scale, self.num_frames, self.strength)


def parse_params(request: StageRequest, traits: PipelineTraits, options: DiffusionOptions) -> DiffusionParams:
    """The request's knobs (`options.diffusion`, typed and checked at the edge) over the deployment's and
    the pipeline's defaults, checked against what this deployment allows."""
    knobs = request.options.diffusion
    prompt = request_prompt(request)
    image = read_init_image(request)
    strength = _strength(knobs, image)
    default_height, default_width = _default_size(knobs, image, traits, options)
    height = default_height if knobs.height is None else knobs.height
    width = default_width if knobs.width is None else knobs.width
    _check_size("height", height, traits.size_multiple, options.max_height)
    _check_size("width", width, traits.size_multiple, options.max_width)
    steps = knobs.num_inference_steps
    if steps is None:
        steps = options.default_steps or traits.default_steps
    if not 1 <= steps <= options.max_steps:
        raise InvalidRequest("num_inference_steps", f"must be between 1 and {options.max_steps}, got {steps}")
    guidance = _default_guidance(options, traits) if knobs.guidance_scale is None else knobs.guidance_scale
    seed = secrets.randbelow(2**31) if knobs.seed is None else knobs.seed
    formats = VIDEO_FORMATS if traits.is_video else IMAGE_FORMATS
    output_format = knobs.output_format or formats[0]
    if output_format not in formats:
        raise InvalidRequest("output_format", f"must be one of {', '.join(formats)}, got {output_format!r}")
    return DiffusionParams(
        prompt=prompt,
        negative_prompt=knobs.negative_prompt or "",
        height=height,
        width=width,
        num_inference_steps=steps,
        guidance_scale=guidance,
        seed=seed,
        output_format=output_format,
        num_frames=_frames(knobs, traits, options),
        fps=knobs.fps or traits.fps,
        strength=strength,
        init_image=image,
    )


def request_prompt(request: StageRequest) -> str:
    """The text to render: `prompt`, else `options.extra["prompt"]`, else the last user message."""
    prompt = request.prompt or request.options.extra.get("prompt")
    if not prompt and request.messages:
        content = request.messages[-1].get("content", "")
        if isinstance(content, list):
            content = " ".join(part.get("text", "") for part in content if isinstance(part, dict))
        prompt = content
    if not isinstance(prompt, str) or not prompt.strip():
        raise InvalidRequest("prompt", "a diffusion stage needs a non-empty text prompt")
    return prompt


def _strength(knobs: DiffusionKnobs, image) -> float | None:
    if image is None:
        if knobs.strength is not None:
            raise InvalidRequest("strength", "applies to image edits only: send an input image")
        return None
    return DEFAULT_STRENGTH if knobs.strength is None else knobs.strength


def _default_size(knobs: DiffusionKnobs, image, traits: PipelineTraits, options: DiffusionOptions) -> tuple[int, int]:
    """(height, width) for a request that names none: an edit keeps its image's size."""
    if image is not None and (knobs.height is None or knobs.width is None):
        return size_from_image(image, traits.size_multiple, options.max_height, options.max_width)
    return options.default_height or traits.default_height, options.default_width or traits.default_width


def _default_guidance(options: DiffusionOptions, traits: PipelineTraits) -> float:
    return traits.default_guidance if options.default_guidance is None else options.default_guidance


def _check_size(name: str, value: int, multiple: int, limit: int) -> None:
    if value < multiple or value % multiple:
        raise InvalidRequest(name, f"must be a positive multiple of {multiple}, got {value}")
    if value > limit:
        raise InvalidRequest(name, f"must be at most {limit} (this deployment's limit), got {value}")


def _frames(knobs: DiffusionKnobs, traits: PipelineTraits, options: DiffusionOptions) -> int:
    if not traits.is_video:
        if knobs.num_frames not in (None, 1):
            raise InvalidRequest("num_frames", "this pipeline makes images; num_frames applies to video pipelines")
        return 1
    frames = knobs.num_frames
    if frames is None:
        frames = options.default_frames or traits.default_frames
    if frames < 1 or (frames - 1) % traits.frame_multiple:
        raise InvalidRequest("num_frames", f"must be {traits.frame_multiple}k + 1 (e.g. 1, 5, 9, ...), got {frames}")
    if frames > options.max_frames:
        raise InvalidRequest("num_frames", f"must be at most {options.max_frames}, got {frames}")
    return frames
