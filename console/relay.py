"""A playground run's deltas as browser events.

Browser events (JSON, each tagged with the run's `ref`):
    started   {request_id, code}                   the request is recorded and submitted
    text      {delta, stage}                       a text delta
    audio     {pcm, sample_rate}                   base64 float32 little-endian mono PCM
    progress  {progress, step, total}              denoising steps of an image or video
    image     {data, mime_type, params}            a data URL
    video     {data, mime_type, params}            a data URL
    done      {request_id, finish_reason, metrics, usage}
    error     {message, field}
    cancelled {}                                   the run was stopped at the browser's request
"""

from __future__ import annotations

import base64

from console.media import data_url
from console.playground_requests import PlaygroundRequest
from control_plane.inference.errors import ApiError
from control_plane.inference.models import Route
from control_plane.inference.outcome import Delta
from control_plane.inference.request_run import RequestRun

ROUTES = {"chat": Route.CHAT, "image": Route.IMAGES, "speech": Route.SPEECH, "video": Route.VIDEOS}
MODALITIES = {"chat": ["text", "audio"], "image": ["image"], "speech": ["audio"], "video": ["video"]}


def estimate(playground: PlaygroundRequest) -> dict[str, float]:
    """What the quota reserves for a run (as /v1 reserves it for the same request)."""
    if playground.mode == "image":
        return {"images": 1}
    if playground.mode == "chat":
        return {"text_tokens": playground.parameters["max_tokens"]}
    return {}


class Relay:
    def __init__(self, run: RequestRun):
        self.run = run

    def delta_events(self, delta: Delta) -> list[dict]:
        events = []
        if delta.text:
            events.append({"type": "text", "delta": delta.text, "stage": delta.stage_id})
        if delta.audio is not None:
            pcm = delta.audio.astype("<f4", copy=False).reshape(-1).tobytes()
            events.append({"type": "audio", "pcm": base64.b64encode(pcm).decode(), "sample_rate": delta.sample_rate})
        info = {key: value for key, value in delta.params.items() if isinstance(value, (int, float, str))}
        for media in delta.media:
            events.append({"type": media.kind, "data": data_url(media.data, media.mime_type),
                           "mime_type": media.mime_type, "params": info})  # fmt: skip
        if delta.progress is not None and delta.audio is None and not delta.media:
            params = delta.params
            events.append({"type": "progress", "progress": delta.progress, "step": params.get("step"),
                           "total": params.get("total_steps")})  # fmt: skip
        return events

    async def done_events(self, artifacts) -> list[dict]:
        """The last event, once the history has the run (its link shows it all)."""
        outcome = self.run.outcome
        return [{"type": "done", "request_id": self.run.request_id, "finish_reason": outcome.ending_reason,
                 "metrics": outcome.metrics, "usage": self.run.usage().history()}]  # fmt: skip

    def error_events(self, error: ApiError) -> list[dict]:
        return [{"type": "error", "message": error.message, "field": error.param}]
