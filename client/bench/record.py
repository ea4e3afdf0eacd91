"""What the client saw of one request: perf_counter readings and the counts the server reported."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RequestRecord:
    """One request's client-side timeline. `start` is when the request was sent (for a realtime
    turn: when the server's `speech_stopped` arrived); every other time is a perf_counter reading."""

    start: float = 0.0
    end: float | None = None
    first_text: float | None = None
    last_text: float | None = None
    text_times: list[float] = field(default_factory=list)
    first_audio: float | None = None
    last_audio: float | None = None
    audio_seconds: float = 0.0
    images: int = 0
    prompt_tokens: int | None = None  # as the server counted them (chat template included)
    input_len: int | None = None  # the prompt's own tokens, as the dataset made it
    text_tokens: int | None = None  # output text tokens, as the server counted them
    audio_tokens: int | None = None
    request_id: str | None = None  # the server's id: /api/requests/{id}
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.end is not None

    def fail(self, message: str) -> RequestRecord:
        self.error = self.error or message
        return self

    def on_text(self, now: float) -> None:
        if self.first_text is None:
            self.first_text = now
        self.last_text = now
        self.text_times.append(now)

    def on_audio(self, now: float, seconds: float) -> None:
        if self.first_audio is None:
            self.first_audio = now
        self.last_audio = now
        self.audio_seconds += seconds

    def as_dict(self) -> dict:
        """The request's figures for the result file (milliseconds, RTF a ratio)."""
        ms = lambda seconds: None if seconds is None else seconds * 1000  # noqa: E731
        return {
            "request_id": self.request_id,
            "ok": self.ok,
            "error": self.error,
            "ttft_ms": ms(self.ttft),
            "tpot_ms": ms(self.tpot),
            "e2el_ms": ms(self.e2el) if self.ok else None,
            "audio_ttfp_ms": ms(self.ttfp),
            "audio_rtf": self.rtf,
            "audio_seconds": self.audio_seconds,
            "images": self.images,
            "input_len": self.input_len,
            "prompt_tokens": self.prompt_tokens,
            "text_tokens": self.text_tokens,
            "audio_tokens": self.audio_tokens,
        }

    # ------------------------------------------------------------ derived (seconds)

    @property
    def e2el(self) -> float:
        return self.end - self.start

    @property
    def ttft(self) -> float | None:
        return None if self.first_text is None else self.first_text - self.start

    @property
    def tpot(self) -> float | None:
        """Mean time per output text token after the first, with the server's token count."""
        tokens = self.text_tokens or len(self.text_times)
        if self.first_text is None or tokens < 2:
            return None
        return (self.last_text - self.first_text) / (tokens - 1)

    @property
    def itl(self) -> list[float]:
        """Gaps between consecutive text deltas as they arrived."""
        return [b - a for a, b in zip(self.text_times, self.text_times[1:], strict=False)]

    @property
    def ttfp(self) -> float | None:
        return None if self.first_audio is None else self.first_audio - self.start

    @property
    def rtf(self) -> float | None:
        """Seconds from the request to its last audio packet, per second of audio received."""
        if self.last_audio is None or self.audio_seconds <= 0:
            return None
        return (self.last_audio - self.start) / self.audio_seconds
