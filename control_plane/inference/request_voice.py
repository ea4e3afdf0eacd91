"""The voice a request asks for, checked once here against what the deployment's family publishes,
and turned into what the stages read (they do not check it again): the request's
`options.voice` and, for a custom voice, its conditioning in the request params.

- no voice, or one of OpenAI's names on a deployment that maps them (`map_openai_voices`): nothing,
  the model's default voice;
- a built-in voice of the checkpoint (any case): the name in the checkpoint's spelling;
- one of the caller's custom voices made on this family and checkpoint: its name, and its
  `voice_conditioning` param (control_plane/inference/custom_voices.py);
- anything else: 400 naming `voice`, listing the built-in voices and the caller's own.
A pipeline that does not speak, or a family that publishes no voice names, gets the name as sent.
"""

from __future__ import annotations

from typing import Any

from control_plane.inference.custom_voices import custom_voice_conditioning, custom_voice_named, custom_voices_of
from control_plane.inference.errors import ApiError
from control_plane.inference.published_voices import published_voices
from control_plane.inference.targets import Served
from control_plane.inference.voice_names import resolve_voice
from control_plane.orm_threads import orm_in_thread
from stages.voice_conditioning import PARAM


async def request_voice(served: Served, user, requested: str | None) -> tuple[str | None, dict[str, Any]]:
    """(the voice for `RequestOptions.voice`, None for the model's default; the params it adds)."""
    voice = resolve_voice(served.deploy, requested)
    if not voice:
        return None, {}
    if "audio" not in served.output_modalities:
        return voice, {}
    published = await published_voices(served)
    builtin = published["voices"]
    if not builtin:
        return voice, {}
    spelled = next((name for name in builtin if name.lower() == voice.lower()), None)
    if spelled is not None:
        return spelled, {}
    if published.get("reference_voices"):
        custom = await orm_in_thread(custom_voice_named)(user, served, voice)
        if custom is not None:
            return custom.name, {PARAM: await orm_in_thread(custom_voice_conditioning)(custom)}
        builtin = builtin + [own.name for own in await orm_in_thread(custom_voices_of)(user, served)]
    raise ApiError(400, f"Unknown voice {voice!r}; this model has {builtin}.", param="voice", code="invalid_voice")
