"""What a request produced so far: text, audio, images, video, progress, and how it ended.

`Outcome.add(output)` folds one client-visible StageOutput in and returns the `Delta` it
added, which the streaming views turn into events.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import redis.asyncio

from control_plane.openai_compat.payloads import audio_samples, resolve
from stages.orchestrator import RequestSummary
from stages.protocol import StageError, StageOutput

DEFAULT_SAMPLE_RATE = 24000


@dataclass
class Media:
    """An encoded image or video as a stage produced it."""

    kind: str
    data: bytes
    format: str
    mime_type: str
    params: dict[str, Any]

    @property
    def width(self) -> int | None:
        return self.params.get("width")

    @property
    def height(self) -> int | None:
        return self.params.get("height")


@dataclass
class Delta:
    text: str = ""
    audio: np.ndarray | None = None
    sample_rate: int | None = None
    media: list[Media] = field(default_factory=list)
    progress: float | None = None


@dataclass
class Outcome:
    text_parts: list[str] = field(default_factory=list)
    audio_chunks: list[np.ndarray] = field(default_factory=list)
    sample_rate: int | None = None
    media: list[Media] = field(default_factory=list)
    progress: float = 0.0
    finish_reason: str | None = None
    text_tokens: int = 0
    prompt_tokens: int | None = None
    summary: RequestSummary | None = None
    error: StageError | None = None

    async def add(self, output: StageOutput, client: redis.asyncio.Redis | None = None) -> Delta:
        delta = Delta()
        if output.modality == "text" or output.text:
            if output.text:
                self.text_parts.append(output.text)
                delta.text = output.text
            self.text_tokens += len(output.token_ids)
            if output.finished and output.finish_reason:
                self.finish_reason = output.finish_reason
        if "num_prompt_tokens" in output.metrics and self.prompt_tokens is None:
            self.prompt_tokens = int(output.metrics["num_prompt_tokens"])
        if "audio" in output.payloads:
            samples = audio_samples(await resolve(output.payloads["audio"], client))
            self.sample_rate = int(output.params.get("sample_rate") or self.sample_rate or DEFAULT_SAMPLE_RATE)
            if samples.size:
                self.audio_chunks.append(samples)
                delta.audio = samples
                delta.sample_rate = self.sample_rate
        for kind in ("image", "video"):
            if kind in output.payloads:
                tensor = await resolve(output.payloads[kind], client)
                media = Media(
                    kind=kind,
                    data=tensor.data,
                    format=str(output.params.get("format", "png" if kind == "image" else "mp4")),
                    mime_type=str(output.params.get("mime_type", "image/png" if kind == "image" else "video/mp4")),
                    params=dict(output.params),
                )
                self.media.append(media)
                delta.media.append(media)
        if "progress" in output.params:
            self.progress = float(output.params["progress"])
            delta.progress = self.progress
        return delta

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    @property
    def audio(self) -> np.ndarray | None:
        if not self.audio_chunks:
            return None
        return np.concatenate(self.audio_chunks)

    @property
    def audio_seconds(self) -> float:
        if not self.audio_chunks or not self.sample_rate:
            return 0.0
        return sum(chunk.size for chunk in self.audio_chunks) / self.sample_rate

    def stage_tokens(self, stage_names: list[str]) -> int:
        usage = self.summary.usage if self.summary else {}
        return sum(int(usage.get(f"stage.{name}.output_tokens", 0)) for name in stage_names)

    @property
    def completion_tokens(self) -> int:
        usage = self.summary.usage if self.summary else {}
        return int(usage.get("completion_tokens", self.text_tokens))

    @property
    def prompt_token_count(self) -> int:
        usage = self.summary.usage if self.summary else {}
        if "prompt_tokens" in usage:
            return int(usage["prompt_tokens"])
        return self.prompt_tokens or 0

    @property
    def metrics(self) -> dict[str, float]:
        return dict(self.summary.metrics) if self.summary else {}

    def usage_by_modality(self, audio_stages: list[str]) -> dict[str, Any]:
        usage: dict[str, Any] = {
            "text": {"prompt_tokens": self.prompt_token_count, "completion_tokens": self.completion_tokens}
        }
        if self.audio_chunks:
            usage["audio"] = {
                "seconds": round(self.audio_seconds, 4),
                "tokens": self.stage_tokens(audio_stages),
                "sample_rate": self.sample_rate,
            }
        images = [m for m in self.media if m.kind == "image"]
        videos = [m for m in self.media if m.kind == "video"]
        if images:
            usage["image"] = {"count": len(images)}
        if videos:
            usage["video"] = {"count": len(videos), "seconds": round(sum(video_seconds(v) for v in videos), 4)}
        return usage


def video_seconds(media: Media) -> float:
    frames, fps = media.params.get("num_frames"), media.params.get("fps")
    if frames and fps:
        return float(frames) / float(fps)
    return 0.0
