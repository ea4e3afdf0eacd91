from django.http import Http404
from django.shortcuts import render

from console.access import signed_in
from console.history import api_video_jobs
from console.pages import render_page
from console.playground_requests import AUDIO_FORMATS, MODES, SPEECH_FORMATS, VOICES
from control_plane.deployments.queries import pipeline_list, running_deployments
from control_plane.deployments.services import pipeline_config_of
from control_plane.inference.models import FINAL_STATUSES

WANTS = {"chat": {"text"}, "image": {"image"}, "speech": {"audio"}, "video": {"video"}}
TITLES = {"chat": "Chat", "image": "Image generation", "speech": "Speech", "video": "Video generation"}


def deployments_for(mode: str) -> list[dict]:
    """Running deployments, the ones whose outputs fit the playground first, each with the request
    defaults its family publishes."""
    found = []
    for deployment in running_deployments():
        config = pipeline_config_of(deployment.pipeline)
        outputs = set(config.output_modalities)
        found.append({"name": deployment.name, "outputs": sorted(outputs), "fits": bool(outputs & WANTS[mode]),
                      "defaults": video_defaults(config)})  # fmt: skip
    return sorted(found, key=lambda d: (not d["fits"], d["name"]))


def video_defaults(config) -> dict:
    """The video form's frame count and its step: a count the family's engines accept (4k + 1)."""
    multiple = config.frame_multiple
    return {"num_frames": config.request_defaults.get("num_frames", multiple + 1), "frame_multiple": multiple}


def _first_video_defaults(deployments: list[dict]) -> dict:
    """The form opens on the first fitting deployment's defaults, or the catalog's video family's."""
    fitting = [deployment for deployment in deployments if deployment["fits"]]
    if fitting:
        return fitting[0]["defaults"]
    for pipeline in pipeline_list():
        config = pipeline_config_of(pipeline)
        if "video" in config.output_modalities and not config.internal:
            return video_defaults(config)
    return {"num_frames": 1, "frame_multiple": 1}


@signed_in
def playground(request, mode: str):
    if mode not in MODES:
        raise Http404("no such playground")
    deployments = deployments_for(mode)
    context = {
        "mode": mode,
        "title": TITLES[mode],
        "deployments": deployments,
        "voices": VOICES,
        "audio_formats": AUDIO_FORMATS,
        "speech_formats": SPEECH_FORMATS,
    }
    if mode == "video":
        context["video_defaults"] = _first_video_defaults(deployments)
        context.update(_api_jobs(request))
    return render_page(request, f"console/playground_{mode}.html", context, active=mode)


def _api_jobs(request) -> dict:
    jobs = api_video_jobs(request.user)
    return {"api_jobs": jobs, "api_jobs_pending": any(job.status not in FINAL_STATUSES for job in jobs)}


@signed_in
def video_api_jobs(request):
    """The video page's list of the user's API jobs, polled while one of them is unfinished."""
    return render(request, "console/partials/api_video_jobs.html", _api_jobs(request))
