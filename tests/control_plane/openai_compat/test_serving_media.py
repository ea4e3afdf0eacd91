"""Images and video jobs through the SDK against tiny diffusion deployments (SD3 and Wan
checkpoints built locally): images decode to the requested size, `url` links are signed and
expire, image edits start from the uploaded image (with their bad inputs answered 4xx naming
the field), video jobs run from the database with progress and download as MP4."""

from __future__ import annotations

import base64
import io
import time

import httpx
import numpy as np
import openai
import pytest
from PIL import Image
from procs import wait_for
from tiny_checkpoints import tiny_checkpoint

from control_plane.inference.models import InferenceRequest

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

FAST = {"num_inference_steps": 2}
EDIT_LIMIT = 256
"""The tiny image deployment renders at most EDIT_LIMIT x EDIT_LIMIT."""


@pytest.fixture(scope="session")
def tiny_diffusion():
    return {name: tiny_checkpoint(name) for name in ("sd3", "wan")}


def test_images_and_video_jobs(serving_stack, tiny_diffusion):
    images_and_video_jobs(serving_stack, tiny_diffusion)
    video_jobs_survive_a_web_restart(serving_stack)


def images_and_video_jobs(serving_stack, tiny_diffusion):
    limits = {"max_height": EDIT_LIMIT, "max_width": EDIT_LIMIT}
    serving_stack.deploy(
        "tiny-image", "text_to_image", model_dir=str(tiny_diffusion["sd3"]),
        deploy_config={"stages": {"dit": {"options": limits}}},
    )  # fmt: skip
    serving_stack.deploy("tiny-video", "text_to_video", model_dir=str(tiny_diffusion["wan"]))
    serving_stack.wait_running("tiny-image", "tiny-video", timeout=240)
    client = serving_stack.client(timeout=120)

    result = client.images.generate(
        model="tiny-image", prompt="a red square", n=2, size="64x32", extra_body={"seed": 7, **FAST}
    )
    assert len(result.data) == 2 and result.size == "64x32"
    images = [Image.open(io.BytesIO(base64.b64decode(item.b64_json))) for item in result.data]
    assert [image.size for image in images] == [(64, 32), (64, 32)]
    assert images[0].tobytes() != images[1].tobytes()  # seeds 7 and 8

    again = client.images.generate(
        model="tiny-image", prompt="a red square", size="64x32", extra_body={"seed": 7, **FAST}
    )
    # seeded: the same image up to one 8-bit level; the n=2 request ran as a batch of two, whose
    # float sums round differently from this batch of one
    alone = np.asarray(Image.open(io.BytesIO(base64.b64decode(again.data[0].b64_json))), dtype=int)
    assert np.abs(alone - np.asarray(images[0], dtype=int)).max() <= 1
    assert np.abs(alone - np.asarray(images[1], dtype=int)).max() > 16  # seed 8 is another image

    linked = client.images.generate(
        model="tiny-image", prompt="a blue circle", size="32x32", response_format="url", output_format="jpeg",
        extra_body=FAST,
    )  # fmt: skip
    fetched = httpx.get(linked.data[0].url)  # no key needed: signed and expiring
    assert fetched.status_code == 200 and fetched.headers["content-type"] == "image/jpeg"
    assert Image.open(io.BytesIO(fetched.content)).size == (32, 32)
    assert linked.data[0].model_extra["expires_at"] > time.time()

    image_edits(serving_stack)

    chat = client.chat.completions.create(
        model="tiny-image", messages=[{"role": "user", "content": "a green tree"}], extra_body={"size": "32x32", **FAST}
    )
    part = chat.choices[0].message.content[0]
    assert part["type"] == "image_url" and part["image_url"]["url"].startswith("data:image/png;base64,")

    video = client.videos.create(
        model="tiny-video", prompt="waves on a beach", size="32x32",
        extra_body={"num_frames": 5, "fps": 8, **FAST},
    )  # fmt: skip
    assert video.status == "queued" and video.id.startswith("video_")
    done = client.videos.poll(video.id, poll_interval_ms=300)
    assert done.status == "completed", done.error
    assert done.progress == 100 and done.size == "32x32" and float(done.seconds) > 0
    content = client.videos.download_content(video.id).read()
    assert content[4:8] == b"ftyp"  # an MP4 container
    listed = client.videos.list()
    assert [v.id for v in listed.data] == [video.id]

    row = InferenceRequest.objects.get(request_id=video.id)  # the job's reads wrote its history
    assert row.status == "completed" and row.progress == 1.0 and row.artifacts.get().kind == "video"
    deleted = client.videos.delete(video.id)
    assert deleted.deleted
    assert serving_stack.http("GET", f"/v1/videos/{video.id}").status_code == 404
    assert InferenceRequest.objects.filter(request_id=video.id, deleted_at__isnull=False).exists()

    serving_stack.history_written()
    rows = InferenceRequest.objects.filter(deployment_name="tiny-image", status="completed")
    assert rows.filter(route="images.generations").count() == 3 and rows.filter(route="chat.completions").count() == 1
    assert rows.filter(route="images.edits").count() == 3
    assert InferenceRequest.objects.filter(route="images.edits", status="failed").count() == len(BAD_EDITS) + 1


def png_of(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def picture(width: int, height: int, colour: str) -> bytes:
    image = Image.new("RGB", (width, height), colour)
    image.paste(Image.new("RGB", (width // 2, height // 2), "black"), (width // 4, height // 4))
    return png_of(image)


def decoded(result) -> list[Image.Image]:
    return [Image.open(io.BytesIO(base64.b64decode(item.b64_json))) for item in result.data]


def image_edits(serving_stack):
    client = serving_stack.client(timeout=120)
    red = ("red.png", picture(48, 32, "red"), "image/png")
    sized = client.images.edit(
        model="tiny-image", image=red, prompt="make it blue", size="64x32",
        extra_body={"seed": 3, "strength": 0.5, **FAST},
    )  # fmt: skip
    assert sized.size == "64x32" and [image.size for image in decoded(sized)] == [(64, 32)]

    # strength 0.5 of 2 steps runs the last one, from the image half noised
    half = {"seed": 3, "strength": 0.5, **FAST}
    own_size = client.images.edit(model="tiny-image", image=red, prompt="make it blue", extra_body=half)
    assert [image.size for image in decoded(own_size)] == [(48, 32)]  # no size: the input's own
    green = ("green.png", picture(48, 32, "green"), "image/png")
    other = client.images.edit(model="tiny-image", image=green, prompt="make it blue", extra_body=half)
    assert decoded(other)[0].tobytes() != decoded(own_size)[0].tobytes()  # the result starts from the image

    serving_stack.history_written()
    row = InferenceRequest.objects.filter(route="images.edits", status="completed").order_by("created_at").first()
    assert row.inputs["image"] == {"width": 48, "height": 32, "format": "png", "bytes": len(red[1])}
    assert row.parameters["strength"] == 0.5 and row.parameters["size"] == "64x32"
    artifact = row.artifacts.get()
    assert artifact.kind == "image" and (artifact.meta["width"], artifact.meta["height"]) == (64, 32)

    for name, fields, files, status, param in BAD_EDITS:
        response = serving_stack.http(
            "POST", "/v1/images/edits", data={"model": "tiny-image", "prompt": "x", **fields}, files=files
        )
        assert response.status_code == status, f"{name}: {response.status_code} {response.text[:300]}"
        error = response.json()["error"]
        assert error["param"] == param and error["message"], f"{name}: {error}"
        assert set(error) == {"message", "type", "param", "code"}, name
    with pytest.raises(openai.BadRequestError) as raised:  # the SDK sees the same errors
        client.images.edit(model="tiny-image", image=red, prompt="x", extra_body={"strength": 2})
    assert raised.value.body["param"] == "strength"


def _png(width: int = 32, height: int = 32) -> dict:
    return {"image": ("in.png", picture(width, height, "white"), "image/png")}


# (name, form fields, files, status, param); each is one failed images.edits row
BAD_EDITS = [
    ("strength zero", {"strength": "0"}, _png(), 400, "strength"),
    ("strength above one", {"strength": "1.5"}, _png(), 400, "strength"),
    ("strength not a number", {"strength": "half"}, _png(), 400, "strength"),
    ("mask", {}, {**_png(), "mask": ("mask.png", picture(32, 32, "black"), "image/png")}, 400, "mask"),
    ("undecodable image", {}, {"image": ("in.png", b"\x89PNG not really", "image/png")}, 400, "image"),
    ("image over the byte limit", {}, {"image": ("in.png", b"\0" * (10 * 1024 * 1024 + 1), "image/png")}, 413, "image"),
    ("image over the size limit", {}, _png(EDIT_LIMIT + 64, 32), 400, "image"),
    ("two images", {}, [("image[]", ("a.png", picture(32, 32, "red"), "image/png"))] * 2, 400, "image"),
]  # fmt: skip


def video_jobs_survive_a_web_restart(serving_stack):
    client = serving_stack.client(timeout=120)
    video = client.videos.create(
        model="tiny-video", prompt="a slow clip", size="32x32", extra_body={"num_frames": 5, "num_inference_steps": 40}
    )
    wait_for(
        lambda: InferenceRequest.objects.filter(request_id=video.id, status="running").exists(),
        timeout=30,
        what="the job to start",
    )
    serving_stack.procs["web"].stop()  # the process running the job dies
    serving_stack.start_web()
    InferenceRequest.objects.filter(request_id=video.id).update(lease_expires_at=None)  # skip the 30 s lease
    done = client.videos.poll(video.id, poll_interval_ms=500)
    assert done.status == "completed", done.error
    row = InferenceRequest.objects.get(request_id=video.id)
    assert row.attempts == 2 and row.artifacts.filter(kind="video").count() == 1
