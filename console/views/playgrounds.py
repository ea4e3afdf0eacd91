from django.http import Http404

from console.access import signed_in
from console.pages import render_page
from console.playground_requests import AUDIO_FORMATS, MODES, SPEECH_FORMATS, VOICES
from control_plane.deployments.queries import running_deployments
from control_plane.deployments.services import pipeline_config_of

WANTS = {"chat": {"text"}, "image": {"image"}, "speech": {"audio"}, "video": {"video"}}
TITLES = {"chat": "Chat", "image": "Image generation", "speech": "Speech", "video": "Video generation"}


def deployments_for(mode: str) -> list[dict]:
    """Running deployments, the ones whose outputs fit the playground first."""
    found = []
    for deployment in running_deployments():
        outputs = set(pipeline_config_of(deployment.pipeline).output_modalities)
        found.append({"name": deployment.name, "outputs": sorted(outputs), "fits": bool(outputs & WANTS[mode])})
    return sorted(found, key=lambda d: (not d["fits"], d["name"]))


@signed_in
def playground(request, mode: str):
    if mode not in MODES:
        raise Http404("no such playground")
    context = {
        "mode": mode,
        "title": TITLES[mode],
        "deployments": deployments_for(mode),
        "voices": VOICES,
        "audio_formats": AUDIO_FORMATS,
        "speech_formats": SPEECH_FORMATS,
    }
    return render_page(request, f"console/playground_{mode}.html", context, active=mode)
