"""The generation stage engine: codec frames in, audio out, in chunks, batched across requests.

Each request collects codec frames as they stream in from the talker. Its window policy
(stages/generation/window_policy.py) says when it is due and for which frames: a small first
window (`first_chunk_size`: a fast first packet), then `async_chunk_size` frames, then, with a
growing policy, larger windows (what it has, once its audio buffered ahead of playback runs low);
or the rest once its input is complete (a backlog larger than the next window drains window by
window, each decode bounded). A request whose frames all arrived before its first chunk is decoded as
one whole sequence (that is the async-chunk-off path, and it equals the model's own
whole-sequence decoding exactly). Each step decodes every due window, windows of the same shape
(the decoder's `batch_key`, by default the same start, end and finality) in one forward of up to
`max_batch` windows (`WindowDecoder.decode`), the batch of the request whose audio runs out first
first; each chunk's audio is the window's samples for the chunk's frames, the
left context and look-ahead cut off. A failing batch is retried request by request, so one bad
request fails alone.

Audio leaves as `payloads["audio"]` (float32, mono) with `params["sample_rate"]`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from stages.config import StageDeployConfig
from stages.engine import StageEngine
from stages.engine_stats import StepStats
from stages.errors import InvalidRequest, StageFailure
from stages.generation.window_policy import WindowPolicy, earliest_deadline_first
from stages.protocol import StageError, StageOutput, StageRequest
from stages.replica_stats import Capacity
from stages.tensors import to_wire

logger = logging.getLogger(__name__)


@dataclass
class Window:
    """Frames [start, end) of one request to emit audio for; `final` when they are its last."""

    stream: CodeStream
    start: int
    end: int
    final: bool


@dataclass
class CodeStream:
    request_id: str
    conditioning: Any
    frames: list[Any] = field(default_factory=list)
    input_done: bool = False
    emitted: int = 0
    seq: int = 0
    started: float = field(default_factory=time.perf_counter)
    windows: int = 0
    first_audio_at: float | None = None

    @property
    def available(self) -> int:
        return len(self.frames)

    @property
    def arrived(self) -> float:
        return self.started


class WindowDecoder(Protocol):
    sample_rate: int
    seconds_per_frame: float
    lookahead: int
    """Frames after a chunk the decoder must see before that chunk's audio is final."""

    def open(self, request: StageRequest) -> Any:
        """Per-request conditioning (speaker, noise); raises InvalidRequest."""

    def frames_of(self, request: StageRequest) -> list[Any]:
        """The codec frames a request chunk carries (validated; raises InvalidRequest)."""

    def decode(self, windows: list[Window]) -> list[np.ndarray]:
        """Audio samples for each window's frames [start, end) (to the end when final)."""

    # Optional: `batch_key(window) -> hashable`: windows with equal keys may share one `decode` call
    # (default: the same start, end and finality).


class GenerationEngine(StageEngine):
    unit = "frames"
    last_step = StepStats()

    def __init__(
        self,
        decoder: WindowDecoder,
        stage_deploy: StageDeployConfig,
        stage_id: int = 2,
        policy: WindowPolicy | None = None,
        clock=time.perf_counter,
    ):
        self.decoder = decoder
        self.stage_id = stage_id
        self.max_batch = stage_deploy.max_batch
        self.max_frames = stage_deploy.max_length
        self.policy = policy or WindowPolicy.fixed(
            stage_deploy.first_chunk_size,
            stage_deploy.async_chunk_size,
            getattr(decoder, "seconds_per_frame", 0.0),
            decoder.lookahead,
        )
        self.clock = clock
        self.streams: dict[str, CodeStream] = {}

    def warm_up(self) -> None:
        """Let the decoder prepare the window shapes this engine's policy makes (CUDA graphs)."""
        warm_up = getattr(self.decoder, "warm_up", None)
        if warm_up is not None:
            warm_up(self.policy.planned_windows(self.max_frames), self.max_batch)

    def add_request(self, request: StageRequest) -> None:
        if request.request_id in self.streams:
            raise InvalidRequest("request_id", f"request {request.request_id!r} is already running")
        stream = CodeStream(request.request_id, self.decoder.open(request), started=self.clock())
        self._extend(stream, request)
        self.streams[request.request_id] = stream

    def add_chunk(self, request: StageRequest) -> None:
        stream = self.streams.get(request.request_id)
        if stream is not None:
            self._extend(stream, request)

    def _extend(self, stream: CodeStream, request: StageRequest) -> None:
        frames = self.decoder.frames_of(request)
        if len(stream.frames) + len(frames) > self.max_frames:
            raise InvalidRequest("codes", f"more than max_length={self.max_frames} codec frames")
        stream.frames.extend(frames)
        stream.input_done = stream.input_done or request.finished

    def step(self) -> list[StageOutput]:
        """Decode every due window, windows of one shape in one batch, the batch of the request whose
        audio runs out first first."""
        now = self.clock()
        due = []
        for stream in earliest_deadline_first(self.policy, list(self.streams.values())):
            span = self.policy.next_window(stream, now)
            if span is not None:
                due.append(Window(stream, *span))
        outputs = []
        for batch in _batches(due, getattr(self.decoder, "batch_key", _frames_span), self.max_batch):
            outputs.extend(self._decode_group(batch))
        self.last_step = StepStats(batch=len(due), units=sum(window.end - window.start for window in due))
        return outputs

    def _decode_group(self, group: list[Window]) -> list[StageOutput]:
        began = time.perf_counter()
        try:
            audios = self.decoder.decode(group)
        except Exception:
            if len(group) == 1:
                return [self._fail(group[0].stream, *_describe())]
            return [output for window in group for output in self._decode_group([window])]
        first = group[0]
        logger.debug(
            "decoded frames [%d, %d) of %d request(s) in %.3f s, %.3f s into the request; %d frames in",
            first.start,
            first.end,
            len(group),
            time.perf_counter() - began,
            self.clock() - first.stream.started,
            len(first.stream.frames),
        )
        return [self._emit(window, audio) for window, audio in zip(group, audios, strict=False)]

    def _emit(self, window: Window, audio: np.ndarray) -> StageOutput:
        stream = window.stream
        stream.emitted = window.end
        stream.windows += 1
        if stream.first_audio_at is None:
            stream.first_audio_at = self.clock()
        output = StageOutput(
            request_id=stream.request_id,
            stage_id=self.stage_id,
            seq=stream.seq,
            finished=window.final,
            finish_reason="stop" if window.final else None,
            modality="audio",
            payloads={"audio": to_wire(np.ascontiguousarray(audio, dtype=np.float32))},
            params={"sample_rate": self.decoder.sample_rate, "frames": [window.start, window.end]},
        )
        stream.seq += 1
        if window.final:
            output.metrics["stage_duration_s"] = self.clock() - stream.started
            del self.streams[stream.request_id]
        return output

    def _fail(self, stream: CodeStream, message: str, param: str | None) -> StageOutput:
        self.streams.pop(stream.request_id, None)
        return StageOutput(
            request_id=stream.request_id,
            stage_id=self.stage_id,
            seq=stream.seq,
            finished=True,
            finish_reason="error",
            error=StageError(message=message, type="server_error", param=param),
        )

    def abort(self, request_id: str) -> None:
        self.streams.pop(request_id, None)

    def has_unfinished(self) -> bool:
        return bool(self.streams)

    def capacity(self) -> Capacity:
        """Requests decoding here against the windows one step batches (more wait for the next step)."""
        return Capacity(kind="slots", used=len(self.streams), total=self.max_batch)


def _frames_span(window: Window) -> tuple[int, int, bool]:
    return window.start, window.end, window.final


def _batches(windows: list[Window], key, max_batch: int) -> list[list[Window]]:
    """Windows of equal keys together, at most `max_batch` each, in the order of their first window."""
    groups: dict[Any, list[Window]] = {}
    for window in windows:
        groups.setdefault(key(window), []).append(window)
    return [group[i : i + max_batch] for group in groups.values() for i in range(0, len(group), max_batch)]


def _describe() -> tuple[str, str | None]:
    import sys

    error = sys.exc_info()[1]
    if isinstance(error, StageFailure):
        return error.message, error.param
    return f"code2wav failed: {type(error).__name__}: {error}", None
