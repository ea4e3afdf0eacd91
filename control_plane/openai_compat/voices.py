"""GET /v1/audio/voices?model=...: the voices a deployment speaks with, as its family publishes
them for its checkpoint (`python -m stages.models.voices`, run once per checkpoint and process:
reading them may need torch, which the control plane never imports).

OpenAI's own voice names are not the models' (Qwen-Omni has Chelsie and Ethan): a request naming
one is refused by the model with the list of its voices, unless the deployment sets
`map_openai_voices`, which makes them speak with the model's default voice.
"""

from __future__ import annotations

import asyncio
import json
import sys

from django.http import JsonResponse

from control_plane.inference.errors import ApiError, openai_endpoint
from control_plane.inference.targets import Served, served_deployment
from control_plane.inference.voice_names import OPENAI_VOICES
from control_plane.openai_compat.access import authenticate

READ_TIMEOUT_S = 120.0
_published: dict[tuple[str, str], dict] = {}


async def published_voices(served: Served) -> dict:
    """{"voices": [...], "default_voice": ...} of the deployment's checkpoint."""
    key = (served.pipeline.family, served.deployment.model_dir)
    if key not in _published:
        argv = [sys.executable, "-m", "stages.models.voices", *key]
        process = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                       stderr=asyncio.subprocess.PIPE)  # fmt: skip
        try:
            out, err = await asyncio.wait_for(process.communicate(), READ_TIMEOUT_S)
        except TimeoutError:
            process.kill()
            raise ApiError(503, "Reading the model's voices timed out; retry later.", code="voices_unavailable",
                           headers={"Retry-After": "5"}) from None  # fmt: skip
        if process.returncode != 0:
            reason = err.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise ApiError(500, f"The model's voices could not be read: {reason[0]}", code="voices_unavailable")
        _published[key] = json.loads(out)
    return _published[key]


def require_speech(served: Served) -> None:
    if "audio" not in served.output_modalities:
        raise ApiError(400, f"The model '{served.name}' does not speak (it produces {served.output_modalities}).",
                       param="model", code="unsupported_modality")  # fmt: skip


@openai_endpoint("GET")
async def voice_list(request):
    caller = await authenticate(request)
    model = request.GET.get("model")
    if not model:
        raise ApiError(400, "Missing required parameter: 'model'.", param="model", code="missing_required_parameter")
    served = await served_deployment(caller, model, check=require_speech)
    published = await published_voices(served)
    default = published["default_voice"]
    aliases = {name: default for name in OPENAI_VOICES} if served.deploy.map_openai_voices and default else {}
    data = [{"id": name, "object": "audio.voice", "name": name, "type": "preset", "created_at": 0,
             "default": name == default} for name in published["voices"]]  # fmt: skip
    return JsonResponse({"object": "list", "model": served.name, "voices": published["voices"], "data": data,
                         "default_voice": default, "openai_voice_aliases": aliases})  # fmt: skip
