"""The voice playground: a duplex conversation with a deployment over `/v1/realtime`.

The page talks to the realtime endpoint itself (the login session's cookie authenticates the
WebSocket); this view only lists the deployments that can answer with audio.
"""

from console.access import signed_in
from console.pages import render_page
from console.playground_requests import VOICES
from console.views.playgrounds import deployments_for


def voice_deployments() -> list[dict]:
    """Running deployments whose pipeline emits audio: the only ones a voice session can use."""
    return [deployment for deployment in deployments_for("speech") if "audio" in deployment["outputs"]]


@signed_in
def voice_playground(request):
    context = {"deployments": voice_deployments(), "voices": VOICES}
    return render_page(request, "console/playground_voice.html", context, active="voice")
