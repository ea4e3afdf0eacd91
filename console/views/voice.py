"""The voice playground: a duplex conversation with a deployment over `/v1/realtime`.

The page talks to the realtime endpoint itself (the login session's cookie authenticates the
WebSocket); this view only lists the deployments that can answer with audio.
"""

from django.http import JsonResponse

from console.access import signed_in
from console.pages import render_page
from console.playground_requests import VOICES
from console.views.playgrounds import deployments_for
from console.voice_code import voice_code_samples


def voice_deployments() -> list[dict]:
    """Running deployments whose pipeline emits audio: the only ones a voice session can use."""
    return [deployment for deployment in deployments_for("speech") if "audio" in deployment["outputs"]]


def _origin(request) -> str:
    return request.build_absolute_uri("/").rstrip("/")


@signed_in
def voice_playground(request):
    deployments = voice_deployments()
    first = deployments[0]["name"] if deployments else "my-voice-deployment"
    context = {"deployments": deployments, "voices": VOICES, "code": voice_code_samples(_origin(request), first)}
    return render_page(request, "console/playground_voice.html", context, active="voice")


@signed_in
def voice_code(request):
    """The "View code" samples for the form's current deployment, voice and instructions."""
    params = request.GET
    code = voice_code_samples(_origin(request), params.get("deployment", "")[:100], params.get("voice", "")[:64],
                              params.get("instructions", "")[:4000])  # fmt: skip
    return JsonResponse(code)
