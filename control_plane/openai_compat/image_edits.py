"""POST /v1/images/edits (multipart): image-to-image on the deployment's entry stage.

One input image (`image`, or `image[]` with one file) and a `prompt`, with the fields of
images/generations (`n`, `size`, `response_format`, `output_format`, `seed`,
`num_inference_steps`, `guidance_scale`, `negative_prompt`) and `strength` in (0, 1], an
extra form field (OpenAI's edits have none; the stage defaults to 0.6): how much noise the
image gets before the prompt denoises it. Without `size` the result keeps the image's size
(rounded down to what the model needs).

The image travels to the entry stage as `payloads["image"]` (the uploaded file's bytes);
only pipelines whose entry stage starts from an input image (`StageConfig.init_image`:
text_to_image) take edits. `mask` (inpainting) is not supported and answers 400 naming it.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec

from control_plane.inference.errors import ApiError
from control_plane.inference.models import Route
from control_plane.inference.request_run import RequestRun
from control_plane.inference.targets import Served, served_deployment
from control_plane.openai_compat.bodies import convert, read_form
from control_plane.openai_compat.chat_inputs import decode_image_bytes, max_media_bytes
from control_plane.openai_compat.images import (
    ImageRequest,
    image_fields,
    prompt_input,
    require_images,
    respond,
    run_images,
    stage_requests,
)
from control_plane.openai_compat.knobs import request_knobs
from control_plane.openai_compat.session import served_view
from stages.diffusion_knobs import DiffusionKnobs
from stages.protocol import Tensor


class ImageEditRequest(ImageRequest, kw_only=True):
    strength: float | None = None


def validate_edit(body: ImageEditRequest) -> DiffusionKnobs:
    """The diffusion knobs of one edited image; raises 400 naming the field."""
    fields = image_fields(body)
    if body.strength is not None and not (math.isfinite(body.strength) and 0 < body.strength <= 1):
        raise ApiError.invalid("strength", f"'strength' must be in (0, 1], got {body.strength}.")
    return request_knobs(fields, {"strength": body.strength})


def read_input_image(files: dict[str, list[Any]]):
    """(file bytes, decoded PIL image) of the one uploaded input image."""
    uploads = files.get("image", []) + files.get("image[]", [])
    if not uploads:
        raise ApiError(400, "Missing required parameter: 'image' (an image file).", param="image",
                       code="missing_required_parameter")  # fmt: skip
    if len(uploads) > 1:
        raise ApiError.invalid("image", f"Image edits start from one input image, got {len(uploads)}.")
    upload = uploads[0]
    if upload.size > max_media_bytes():
        raise ApiError(413, f"'image' is larger than {max_media_bytes()} bytes.", param="image", code="media_too_large")
    raw = upload.read()
    return raw, decode_image_bytes(raw, "image")


def refuse_mask(form: dict[str, str], files: dict[str, list[Any]]) -> None:
    if "mask" in files or "mask" in form:
        raise ApiError(
            400,
            "'mask' is not supported: edits here redraw the whole image (image-to-image, no inpainting). "
            "Leave 'mask' out, and use 'strength' for how much of the image to keep.",
            param="mask",
            code="unsupported_parameter",
        )


def require_image_input(served: Served) -> None:
    require_images(served)
    if not served.pipeline.entry_stage.init_image:
        raise ApiError(
            400,
            f"The model '{served.name}' cannot start from an input image: image edits need a pipeline whose "
            "first stage does image-to-image (text_to_image deployments).",
            param="image",
            code="unsupported_input",
        )


def image_payload(raw: bytes) -> Tensor:
    """An encoded file as a stage payload (the media payload convention of the diffusion stages)."""
    return Tensor(dtype="uint8", shape=[len(raw)], data=raw)


def image_summary(image, raw: bytes) -> dict[str, Any]:
    """The input image for the history row, without its bytes."""
    return {"width": image.width, "height": image.height, "format": (image.format or "").lower(), "bytes": len(raw)}


@served_view(Route.IMAGE_EDITS, "POST")
async def edits(request, run: RequestRun):
    fields, files = read_form(request)
    form = {key: values[0] for key, values in fields.items() if values}
    run.inputs = {"model": form.get("model")} if form.get("model") else {}
    raw, image = read_input_image(files)
    refuse_mask(form, files)
    body = convert(form, ImageEditRequest, strict=False)
    knobs = validate_edit(body)
    served = await served_deployment(run.caller, body.model, check=require_image_input)
    run.served = served
    parameters = {k: v for k, v in msgspec.to_builtins(body).items() if k not in ("prompt", "model") and v is not None}
    await run.open(served, inputs={"prompt": body.prompt, "image": image_summary(image, raw)}, parameters=parameters,
                   modalities=["image"], estimate={"images": float(body.n)})  # fmt: skip
    entry = {**prompt_input(served, body.prompt), "payloads": {"image": image_payload(raw)}}
    await run_images(run, stage_requests(run, entry, knobs, body.n))
    return await respond(request, run, body, knobs.output_format)
