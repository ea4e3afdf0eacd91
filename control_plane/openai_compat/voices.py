"""/v1/audio/voices: the voices a deployment speaks with, and the caller's custom voices.

- `GET /v1/audio/voices?model=...`: the built-in voices its family publishes for its checkpoint
  (control_plane/inference/published_voices.py), then the caller's own voices made on that family
  and checkpoint (`type: "audio_sample"`).
- `POST /v1/audio/voices` (multipart: `file` or `audio_sample` an audio clip, `name`, `model`; the
  official SDK's `client.audio.voices.create(audio_sample=..., name=..., consent=..., model=...)`;
  its `consent` is accepted and kept with the row): a voice made from the clip, for families that
  can take a reference (400 `voice_reference_unsupported` otherwise). See
  control_plane/inference/custom_voices.py and docs/voices.md.
- `DELETE /v1/audio/voices/{name}` (or its id): the caller's voice, with its clip and conditioning.

OpenAI's own voice names are not the models' (Qwen-Omni has Chelsie and Ethan): a request naming
one is refused with the list of the model's voices, unless the deployment sets `map_openai_voices`,
which makes them speak with the model's default voice.
"""

from __future__ import annotations

import msgspec
from django.http import JsonResponse

from control_plane.inference.custom_voices import (
    check_clip,
    check_name,
    custom_voice_create,
    custom_voice_delete,
    custom_voice_exists,
    custom_voices_of,
    derive_conditioning,
    reference_unsupported,
    voice_object,
)
from control_plane.inference.errors import ApiError, openai_endpoint
from control_plane.inference.published_voices import published_voices
from control_plane.inference.targets import Served, served_deployment
from control_plane.inference.voice_names import OPENAI_VOICES
from control_plane.openai_compat.access import authenticate
from control_plane.openai_compat.bodies import read_form
from control_plane.openai_compat.transcription_inputs import read_audio
from control_plane.orm_threads import orm_in_thread


class VoiceForm(msgspec.Struct, kw_only=True):
    """The form fields of `POST /v1/audio/voices` beside the clip (`file`, or `audio_sample` as the SDK
    sends it): the voice's `name`, the deployment (`model`) whose checkpoint it is derived on."""

    model: str
    name: str
    consent: str | None = None


def require_speech(served: Served) -> None:
    if "audio" not in served.output_modalities:
        raise ApiError(400, f"The model '{served.name}' does not speak (it produces {served.output_modalities}).",
                       param="model", code="unsupported_modality")  # fmt: skip


def _required(value: str | None, name: str) -> str:
    if not value:
        raise ApiError(400, f"Missing required parameter: '{name}'.", param=name, code="missing_required_parameter")
    return value


@openai_endpoint("GET", "POST")
async def voice_collection(request):
    if request.method == "POST":
        return await voice_create(request)
    return await voice_list(request)


async def voice_list(request):
    caller = await authenticate(request)
    served = await served_deployment(caller, _required(request.GET.get("model"), "model"), check=require_speech)
    published = await published_voices(served)
    default = published["default_voice"]
    aliases = {name: default for name in OPENAI_VOICES} if served.deploy.map_openai_voices and default else {}
    data = [{"id": name, "object": "audio.voice", "name": name, "type": "preset", "created_at": 0,
             "default": name == default} for name in published["voices"]]  # fmt: skip
    own = await orm_in_thread(custom_voices_of)(caller.user, served) if published.get("reference_voices") else []
    data += [voice_object(voice) for voice in own]
    return JsonResponse({"object": "list", "model": served.name, "voices": [item["name"] for item in data],
                         "data": data, "default_voice": default, "openai_voice_aliases": aliases,
                         "reference_voices": bool(published.get("reference_voices")),
                         "reference_min_s": published.get("reference_min_s", 0.0)})  # fmt: skip


async def voice_create(request):
    caller = await authenticate(request)
    fields, files = read_form(request)
    form = {key: values[0] for key, values in fields.items() if values}
    served = await served_deployment(caller, _required(form.get("model"), "model"), check=require_speech)
    published = await published_voices(served)
    if not published.get("reference_voices"):
        raise reference_unsupported(served)
    name = check_name(form.get("name"), published["voices"])
    clip = read_audio({"file": files.get("file") or files.get("audio_sample") or []})
    check_clip(clip.samples, clip.sample_rate, float(published.get("reference_min_s") or 0.0))
    if await orm_in_thread(custom_voice_exists)(caller.user, name):
        raise ApiError(409, f"You already have a voice named '{name}'; delete it first or choose another name.",
                       param="name", code="voice_exists")  # fmt: skip
    archive = await derive_conditioning(served, clip.samples, clip.sample_rate)
    voice = await orm_in_thread(custom_voice_create)(caller=caller, served=served, name=name, clip=clip,
                                                     archive=archive, consent=form.get("consent", ""))  # fmt: skip
    return JsonResponse(voice_object(voice))


@openai_endpoint("DELETE")
async def voice_item(request, voice: str):
    caller = await authenticate(request)
    deleted = await orm_in_thread(custom_voice_delete)(caller.user, voice)
    if deleted is None:
        raise ApiError(404, f"You have no voice named '{voice}'.", param="voice", code="voice_not_found")
    return JsonResponse({"id": voice_object(deleted)["id"], "object": "audio.voice.deleted", "deleted": True,
                         "name": deleted.name})  # fmt: skip
