"""What a request produced so far, and what it consumed.

`Outcome.add(output)` folds one client-visible StageOutput in and returns the `Delta` it
added, which the interfaces render (SSE chunks, realtime events, browser events).
`Outcome.usage(...)` is the one account of a request's consumption: the history row's
`usage`, the usage record, the quota settlement and every interface's `usage` object are
read from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import redis.asyncio

from control_plane.inference.payloads import audio_samples, resolve
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

    @property
    def seconds(self) -> float:
        frames, fps = self.params.get("num_frames"), self.params.get("fps")
        return float(frames) / float(fps) if frames and fps else 0.0


@dataclass
class Delta:
    text: str = ""
    audio: np.ndarray | None = None
    sample_rate: int | None = None
    media: list[Media] = field(default_factory=list)
    progress: float | None = None
    params: dict[str, Any] = field(default_factory=dict)
    stage_id: int = 0


@dataclass(frozen=True)
class Usage:
    """What one request consumed. Text tokens are the entry stage's (the thinker's): the prompt
    tokens it read, whatever their source (text, audio, images), and the text tokens it wrote."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    audio_tokens: int = 0
    audio_seconds: float = 0.0
    sample_rate: int | None = None
    audio_seconds_in: float = 0.0
    images: int = 0
    videos: int = 0
    video_seconds: float = 0.0

    @property
    def modality(self) -> str:
        """The usage record's modality: the richest output."""
        if self.videos:
            return "video"
        if self.images:
            return "image"
        return "audio" if self.audio_seconds else "text"

    def history(self) -> dict[str, Any]:
        """The history row's `usage`, per modality."""
        usage: dict[str, Any] = {
            "text": {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens}
        }
        if self.audio_seconds:
            usage["audio"] = {
                "seconds": round(self.audio_seconds, 4),
                "tokens": self.audio_tokens,
                "sample_rate": self.sample_rate,
            }
        if self.audio_seconds_in:
            usage["audio_in"] = {"seconds": round(self.audio_seconds_in, 4)}
        if self.images:
            usage["image"] = {"count": self.images}
        if self.videos:
            usage["video"] = {"count": self.videos, "seconds": round(self.video_seconds, 4)}
        return usage

    def record(self) -> dict[str, float]:
        """The usage record's amounts (accounts.UsageRecord)."""
        return {
            "text_tokens_in": self.prompt_tokens,
            "text_tokens_out": self.completion_tokens,
            "audio_seconds_in": round(self.audio_seconds_in, 4),
            "audio_seconds_out": round(self.audio_seconds, 4),
            "images": self.images,
            "video_seconds": round(self.video_seconds, 4),
        }


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
        delta = Delta(params=dict(output.params), stage_id=output.stage_id)
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

    def merge(self, other: Outcome) -> None:
        """Add what another submission of the same request produced (the n images of one call)."""
        self.text_parts += other.text_parts
        self.audio_chunks += other.audio_chunks
        self.sample_rate = self.sample_rate or other.sample_rate
        self.media += other.media
        self.text_tokens += other.text_tokens
        if other.prompt_tokens is not None:
            self.prompt_tokens = (self.prompt_tokens or 0) + other.prompt_tokens
        self.summary = self.summary or other.summary
        self.finish_reason = self.finish_reason or other.finish_reason

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

    @property
    def metrics(self) -> dict[str, float]:
        return dict(self.summary.metrics) if self.summary else {}

    @property
    def ending_reason(self) -> str | None:
        return self.finish_reason or (self.summary.finish_reason if self.summary else None)

    def usage(self, audio_token_stages: list[str], audio_seconds_in: float = 0.0) -> Usage:
        summary = self.summary.usage if self.summary else {}
        prompt = int(summary["prompt_tokens"]) if "prompt_tokens" in summary else self.prompt_tokens or 0
        audio_tokens = 0
        if self.audio_chunks:
            audio_tokens = sum(int(summary.get(f"stage.{name}.output_tokens", 0)) for name in audio_token_stages)
        videos = [media for media in self.media if media.kind == "video"]
        return Usage(
            prompt_tokens=prompt,
            completion_tokens=int(summary.get("completion_tokens", self.text_tokens)),
            audio_tokens=audio_tokens,
            audio_seconds=self.audio_seconds,
            sample_rate=self.sample_rate if self.audio_chunks else None,
            audio_seconds_in=audio_seconds_in,
            images=sum(1 for media in self.media if media.kind == "image"),
            videos=len(videos),
            video_seconds=sum(media.seconds for media in videos),
        )
