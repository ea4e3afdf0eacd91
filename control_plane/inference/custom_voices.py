"""Custom voices: a user's voices made from a reference clip (`CustomVoice`), for families whose
audio stages can be conditioned on one (the family publishes `reference_voices`).

Making one: the clip, decoded and checked at the API (MIN_CLIP_S, or the family's reference length
`reference_min_s` when longer, to MAX_CLIP_S seconds), goes to
`python -m stages.models.voice_reference` (the family's derivation needs torch, so it runs in a
subprocess), which answers with the conditioning as an .npz archive. Both are stored as the
artifacts of the creation's history row (route `audio.voices`), owned by the user. A voice belongs
to its owner alone and speaks on the deployments of the family and checkpoint it was made on; a
request naming it carries its conditioning inline (request params `voice_conditioning`,
stages/voice_conditioning.py).
"""

from __future__ import annotations

import io
import re
import uuid
from collections import OrderedDict
from typing import Any

import numpy as np
from django.db import IntegrityError, transaction
from django.utils import timezone

from control_plane.inference import audio_encoding
from control_plane.inference.errors import ApiError
from control_plane.inference.models import Artifact, CustomVoice, InferenceRequest, Route, Status
from control_plane.inference.published_voices import ToolFailed, run_stages_tool
from control_plane.inference.services import artifact_add, request_delete
from control_plane.inference.targets import Caller, Served
from control_plane.inference.voice_names import OPENAI_VOICES
from stages.protocol import Tensor
from stages.voice_conditioning import VoiceConditioning, conditioning_params

MIN_CLIP_S = 1.0
MAX_CLIP_S = 30.0
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
CANNOT_TAKE_REFERENCE = 3
"""`stages.models.voice_reference`'s exit status for a family that cannot take a reference clip."""
_CACHED = 64
_conditioning: OrderedDict[uuid.UUID, dict[str, Any]] = OrderedDict()


def public_id(voice: CustomVoice) -> str:
    return f"voice_{voice.id.hex}"


def voice_object(voice: CustomVoice) -> dict[str, Any]:
    """The voice as the API shows it (OpenAI's `audio.voice`, plus where it speaks)."""
    return {"id": public_id(voice), "object": "audio.voice", "name": voice.name, "type": "audio_sample",
            "created_at": int(voice.created_at.timestamp()), "model": voice.deployment_name,
            "nearest_voice": voice.nearest_voice, "default": False}  # fmt: skip


def check_name(name: str | None, builtin: list[str]) -> str:
    if not name:
        raise ApiError(400, "Missing required parameter: 'name'.", param="name", code="missing_required_parameter")
    if not NAME.match(name):
        raise ApiError.invalid("name", "'name' must be 1-64 letters, digits, '_', '-' or '.', starting with a "
                               "letter or digit.")  # fmt: skip
    if name.lower() in {voice.lower() for voice in builtin} | set(OPENAI_VOICES):
        raise ApiError.invalid("name", f"'{name}' is a built-in or OpenAI voice name; choose another.")
    return name


def check_clip(samples: np.ndarray, sample_rate: int, min_s: float = 0.0) -> None:
    """The clip's length: at least MIN_CLIP_S and the family's reference length (`min_s`), at most MAX_CLIP_S."""
    seconds, least = samples.shape[0] / sample_rate, max(MIN_CLIP_S, min_s)
    if seconds < least:
        raise ApiError(400, f"The clip is {seconds:.2f} s long; a voice needs at least {least:g} s of speech.",
                       param="file", code="audio_too_short")  # fmt: skip
    if seconds > MAX_CLIP_S:
        raise ApiError(400, f"The clip is {seconds:.1f} s long; a voice takes at most {MAX_CLIP_S:g} s.",
                       param="file", code="audio_too_long")  # fmt: skip


async def derive_conditioning(served: Served, samples: np.ndarray, sample_rate: int) -> bytes:
    """The conditioning archive (.npz) the family derives from the clip on the deployment's checkpoint."""
    args = (served.pipeline.family, served.deployment.model_dir, str(int(sample_rate)))
    try:
        return await run_stages_tool("stages.models.voice_reference", *args, what="Deriving the voice",
                                     stdin=np.asarray(samples, dtype="<f4").tobytes())  # fmt: skip
    except ToolFailed as failed:
        if failed.returncode == CANNOT_TAKE_REFERENCE:
            raise reference_unsupported(served) from None
        raise


def reference_unsupported(served: Served) -> ApiError:
    return ApiError(400, f"The model '{served.name}' ({served.pipeline.family}) cannot make a voice from a "
                    "reference clip.", param="model", code="voice_reference_unsupported")  # fmt: skip


def archive_conditioning(archive: bytes) -> VoiceConditioning:
    with np.load(io.BytesIO(archive), allow_pickle=False) as arrays:
        return VoiceConditioning(bos_token=int(arrays["bos_token"]), cond=_tensor(arrays["cond"]),
                                 ref_mel=_tensor(arrays["ref_mel"]), nearest=str(arrays["nearest"]))  # fmt: skip


def _tensor(array: np.ndarray) -> Tensor:
    little = np.ascontiguousarray(array, dtype="<f4")
    return Tensor(dtype="float32", shape=list(little.shape), data=little.tobytes())


def custom_voice_create(
    *, caller: Caller, served: Served, name: str, clip, archive: bytes, consent: str = ""
) -> CustomVoice:
    """Store the clip and its conditioning as the artifacts of a completed `audio.voices` row, and
    the voice naming them. 409 when the user has a voice of that name already."""
    conditioning = archive_conditioning(archive)
    voice_id = uuid.uuid4()
    now = timezone.now()
    try:
        with transaction.atomic():
            row = InferenceRequest.objects.create(
                request_id=f"voice_{voice_id.hex}", user=caller.user, api_key=caller.api_key,
                deployment=served.deployment, deployment_name=served.name, route=Route.VOICES,
                inputs={"name": name, "file": clip.summary()}, parameters={"name": name, "consent": consent[:200]},
                status=Status.COMPLETED, http_status=200, started_at=now, finished_at=now,
            )  # fmt: skip
            mime = audio_encoding.MIME_TYPES.get(clip.format, f"audio/{clip.format}")
            artifact_add(row, kind="audio", data=clip.data, mime_type=mime, extension=clip.format,
                         meta={"sample_rate": clip.sample_rate, "duration_s": round(clip.duration_s, 3)})  # fmt: skip
            artifact_add(row, kind="conditioning", data=archive, mime_type="application/x-npz",
                         extension="npz", meta={"nearest_voice": conditioning.nearest})  # fmt: skip
            return CustomVoice.objects.create(
                id=voice_id, user=caller.user, name=name, family=served.pipeline.family,
                model_dir=served.deployment.model_dir, deployment_name=served.name, request=row,
                nearest_voice=conditioning.nearest,
            )  # fmt: skip
    except IntegrityError:
        raise ApiError(409, f"You already have a voice named '{name}'; delete it first or choose another name.",
                       param="name", code="voice_exists") from None  # fmt: skip


def custom_voices_of(user, served: Served) -> list[CustomVoice]:
    """The user's voices that speak on this deployment (its family and checkpoint)."""
    return list(CustomVoice.objects.filter(user=user, family=served.pipeline.family,
                                           model_dir=served.deployment.model_dir))  # fmt: skip


def custom_voice_named(user, served: Served, name: str) -> CustomVoice | None:
    return next((voice for voice in custom_voices_of(user, served) if voice.name.lower() == name.lower()), None)


def custom_voice_exists(user, name: str) -> bool:
    return CustomVoice.objects.filter(user=user, name__iexact=name).exists()


def custom_voice_delete(user, reference: str) -> CustomVoice | None:
    """Delete the user's voice named `reference` (or of that id) with its clip and conditioning."""
    voices = CustomVoice.objects.filter(user=user).select_related("request")
    voice = voices.filter(name__iexact=reference).first()
    if voice is None and reference.startswith("voice_"):
        try:
            voice = voices.filter(id=uuid.UUID(reference.removeprefix("voice_"))).first()
        except ValueError:
            voice = None
    if voice is None:
        return None
    _conditioning.pop(voice.id, None)
    request_delete(voice.request)  # the voice goes with its row
    return voice


def custom_voice_conditioning(voice: CustomVoice) -> dict[str, Any]:
    """The voice's conditioning as request params carry it, read from its stored artifact (kept in
    this process for the next request)."""
    cached = _conditioning.get(voice.id)
    if cached is None:
        artifact = Artifact.objects.get(request_id=voice.request_id, kind=Artifact.Kind.CONDITIONING)
        with artifact.file.open("rb") as stored:
            cached = conditioning_params(archive_conditioning(stored.read()))
        _conditioning[voice.id] = cached
        while len(_conditioning) > _CACHED:
            _conditioning.popitem(last=False)
    _conditioning.move_to_end(voice.id)
    return cached
