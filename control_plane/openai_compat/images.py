"""POST /v1/images/generations (JSON), and what it shares with images/edits (image_edits.py).

`n` images are `n` requests through the serving path (seeds `seed`, `seed+1`, ... when a
seed is given), run concurrently; `response_format` `b64_json` (default) or `url` (signed,
expiring links to the stored artifacts); `output_format` png/jpeg/webp; diffusion knobs
`num_inference_steps`, `guidance_scale`, `negative_prompt`, `seed`.
"""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

import msgspec
from django.http import JsonResponse

from control_plane.inference.errors import ApiError
from control_plane.inference.models import Route
from control_plane.inference.request_run import RequestRun
from control_plane.inference.signing import signed_artifact_url
from control_plane.inference.targets import Served, served_deployment
from control_plane.openai_compat.bodies import convert, read_json
from control_plane.openai_compat.knobs import request_knobs
from control_plane.openai_compat.session import served_view
from control_plane.openai_compat.sizes import parse_size
from stages.diffusion_knobs import DiffusionKnobs
from stages.protocol import RequestOptions, StageRequest

MAX_IMAGES = 10
OUTPUT_FORMATS = ("png", "jpeg", "webp")
MAX_PROMPT_CHARS = 32000


class ImageRequest(msgspec.Struct, kw_only=True):
    model: str
    prompt: str
    n: int = 1
    size: str | None = None
    response_format: str = "b64_json"
    output_format: str = "png"
    quality: str | None = None
    style: str | None = None
    background: str | None = None
    output_compression: int | None = None
    seed: int | None = None
    num_inference_steps: int | None = None
    guidance_scale: float | None = None
    negative_prompt: str | None = None
    user: str | None = None


def validate(body: ImageRequest) -> DiffusionKnobs:
    """The diffusion knobs of one image; raises 400 naming the field."""
    return request_knobs(image_fields(body))


def image_fields(body: ImageRequest) -> dict[str, Any]:
    """The knobs the body sets, by name, after the route's own checks (400 naming the field)."""
    if not body.prompt.strip():
        raise ApiError.invalid("prompt", "'prompt' cannot be empty.")
    if len(body.prompt) > MAX_PROMPT_CHARS:
        raise ApiError.invalid("prompt", f"'prompt' is limited to {MAX_PROMPT_CHARS} characters.")
    if not 1 <= body.n <= MAX_IMAGES:
        raise ApiError.invalid("n", f"'n' must be between 1 and {MAX_IMAGES}, got {body.n}.")
    if body.response_format not in ("b64_json", "url"):
        raise ApiError.invalid(
            "response_format", f"'response_format' must be 'b64_json' or 'url', got {body.response_format!r}."
        )
    output_format = "jpeg" if body.output_format == "jpg" else body.output_format
    if output_format not in OUTPUT_FORMATS:
        raise ApiError.invalid(
            "output_format", f"'output_format' must be one of {OUTPUT_FORMATS}, got {body.output_format!r}."
        )
    fields: dict[str, Any] = {"output_format": output_format}
    if body.size and body.size != "auto":
        fields["width"], fields["height"] = parse_size(body.size)
    if body.num_inference_steps is not None and not 1 <= body.num_inference_steps <= 200:
        raise ApiError.invalid("num_inference_steps", "'num_inference_steps' must be between 1 and 200.")
    if body.guidance_scale is not None and not 0 <= body.guidance_scale <= 30:
        raise ApiError.invalid("guidance_scale", "'guidance_scale' must be between 0 and 30.")
    if body.seed is not None and not 0 <= body.seed < 2**63 - MAX_IMAGES:
        raise ApiError.invalid("seed", "'seed' must be between 0 and 2**63 - 11.")
    fields.update(num_inference_steps=body.num_inference_steps, guidance_scale=body.guidance_scale,
                  negative_prompt=body.negative_prompt or None, seed=body.seed)  # fmt: skip
    return fields


def require_images(served: Served) -> None:
    if "image" not in served.output_modalities:
        raise ApiError(
            400,
            f"The model '{served.name}' does not generate images (it produces {served.output_modalities}).",
            param="model",
            code="unsupported_modality",
        )


async def run_images(run: RequestRun, requests: list[StageRequest]) -> None:
    """Serve every request concurrently (their outputs fold into the run's outcome, in request
    order); the first failure cancels the others."""

    async def one(request: StageRequest) -> None:
        deltas = await run.submit(request)
        await deltas.drain()

    try:
        async with asyncio.TaskGroup() as group:
            for request in requests:
                group.create_task(one(request))
    except* ApiError as failures:
        raise failures.exceptions[0] from None


async def respond(request, run: RequestRun, body: ImageRequest, output_format: str):
    artifacts = await run.complete()
    outcome = run.outcome
    images = [a for a in artifacts if a.kind == "image"]
    revised = outcome.text or None
    data = []
    for artifact, media in zip(images, [m for m in outcome.media if m.kind == "image"], strict=False):
        item: dict[str, Any] = {"revised_prompt": revised}
        if body.response_format == "url":
            item["url"], item["expires_at"] = signed_artifact_url(request, artifact)
        else:
            item["b64_json"] = base64.b64encode(media.data).decode()
        data.append(item)
    first = images[0].meta if images else {}
    size = f"{first.get('width')}x{first.get('height')}" if first.get("width") else body.size
    return JsonResponse(
        {
            "created": int(time.time()),
            "data": data,
            "output_format": output_format,
            "size": size,
            "usage": {"images": len(data), "input_tokens": 0, "output_tokens": 0, "total_tokens": 0},
        }
    )


def stage_requests(run: RequestRun, prompt_input: dict[str, Any], knobs: DiffusionKnobs, n: int):
    """The `n` images' requests: seeds `seed`, `seed+1`, ... when a seed is given."""
    requests = []
    for index in range(n):
        seed = None if knobs.seed is None else knobs.seed + index
        requests.append(
            StageRequest(
                request_id=f"{run.request_id}-{index}" if n > 1 else run.request_id,
                options=RequestOptions(diffusion=msgspec.structs.replace(knobs, seed=seed)),
                arrival_time=time.time(),
                **prompt_input,
            )
        )
    return requests


def prompt_input(served: Served, prompt: str) -> dict[str, Any]:
    if served.pipeline.needs_chat_template:
        return {"messages": [{"role": "user", "content": prompt}]}
    return {"prompt": prompt}


@served_view(Route.IMAGES, "POST")
async def generations(request, run: RequestRun):
    raw = read_json(request)
    run.inputs = {"model": raw.get("model")} if isinstance(raw.get("model"), str) else {}
    body = convert(raw, ImageRequest)
    knobs = validate(body)
    served = await served_deployment(run.caller, body.model, check=require_images)
    run.served = served
    parameters = {k: v for k, v in msgspec.to_builtins(body).items() if k not in ("prompt", "model") and v is not None}
    await run.open(served, inputs={"prompt": body.prompt}, parameters=parameters, modalities=["image"],
                   estimate={"images": float(body.n)})  # fmt: skip
    await run_images(run, stage_requests(run, prompt_input(served, body.prompt), knobs, body.n))
    return await respond(request, run, body, knobs.output_format)
