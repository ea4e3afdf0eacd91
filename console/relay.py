"""Turn the serving path's client messages into browser events, and keep what the history needs.

Browser events (JSON, each tagged with the run's `ref`):
    text      {delta}                              a text delta
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
from dataclasses import dataclass, field

from console.media import data_url, pcm_float32
from control_plane.orchestrator.wire import ClientMessage
from stages.protocol import StageOutput, Tensor

DEFAULT_SAMPLE_RATE = 24000


@dataclass
class Media:
    kind: str
    data: bytes
    mime_type: str
    params: dict


@dataclass
class RunRecord:
    """Everything a run produced, for the history row and its artifacts."""

    text: list[str] = field(default_factory=list)
    pcm: list[bytes] = field(default_factory=list)
    sample_rate: int = DEFAULT_SAMPLE_RATE
    media: list[Media] = field(default_factory=list)
    progress: float = 0.0
    stage_errors: list[str] = field(default_factory=list)

    @property
    def audio_seconds(self) -> float:
        return sum(len(chunk) for chunk in self.pcm) / 4 / self.sample_rate

    @property
    def output_text(self) -> str:
        return "".join(self.text)


def output_events(output: StageOutput, record: RunRecord) -> list[dict]:
    events = []
    if output.text:
        record.text.append(output.text)
        events.append({"type": "text", "delta": output.text, "stage": output.stage_id})
    for name, payload in output.payloads.items():
        if not isinstance(payload, Tensor):
            events.append({"type": "notice", "message": f"the {name} payload came by reference and is not shown"})
            continue
        events.append(_payload_event(name, payload, output, record))
    progress = output.params.get("progress")
    if progress is not None and not output.payloads:
        record.progress = float(progress)
        events.append(
            {
                "type": "progress",
                "progress": float(progress),
                "step": output.params.get("step"),
                "total": output.params.get("total_steps"),
            }
        )
    if output.error is not None:
        record.stage_errors.append(output.error.message)
    return events


def _payload_event(name: str, payload: Tensor, output: StageOutput, record: RunRecord) -> dict:
    if name == "audio":
        pcm = pcm_float32(payload)
        record.sample_rate = int(output.params.get("sample_rate", record.sample_rate))
        record.pcm.append(pcm)
        return {"type": "audio", "pcm": base64.b64encode(pcm).decode(), "sample_rate": record.sample_rate}
    mime_type = output.params.get("mime_type") or ("video/mp4" if name == "video" else "image/png")
    info = {key: value for key, value in output.params.items() if isinstance(value, (int, float, str))}
    record.media.append(Media(name, payload.data, mime_type, info))
    record.progress = 1.0
    return {"type": name, "data": data_url(payload.data, mime_type), "mime_type": mime_type, "params": info}


def message_events(message: ClientMessage, record: RunRecord) -> list[dict]:
    if message.output is not None:
        return output_events(message.output, record)
    return []
