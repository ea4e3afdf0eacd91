"""The generation stage engine: codec frames in, audio out, in chunks, batched across requests.

Each request collects codec frames as they stream in from the talker. Its window policy
(stages/generation/window_policy.py) says when it is due and for which frames: a small first
window (`first_chunk_size`: a fast first packet), then `async_chunk_size` frames, then, with a
growing policy, larger windows (what it has, once its audio buffered ahead of playback runs low);
or the rest once its input is complete (a backlog larger than the largest window drains window by
window, each decode bounded). A request whose frames all arrived before its first chunk is decoded as
one whole sequence (that is the async-chunk-off path, and it equals the model's own
whole-sequence decoding exactly). A later window whose batch has not begun is planned again at every
step, so one whose request's input completed while it waited takes the rest with it. Due windows of
one shape (the decoder's `batch_key`, by default the same start, end and finality) start decoding
together, up to `max_batch` in a batch, and each step advances one batch in flight by one piece of
its decode (a decoder with `begin` decodes in pieces, one step of its ODE each; others in one): the
batch with the earliest deadline (`most_urgent`), so a newcomer's first window goes ahead of steady
windows even half-way through their decode. Each
chunk's audio is the window's samples for the chunk's frames, the left context and look-ahead cut
off. A failing batch is started again request by request, so one bad request fails alone.

Audio leaves as `payloads["audio"]` (float32, mono) with `params["sample_rate"]`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
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


@dataclass
class DecodingBatch:
    """Windows of one shape decoding together: the earliest of their deadlines, the decoder's pieces
    still to run (None until the first piece runs: till then due windows of the shape join it)."""

    windows: list[Window]
    key: Any
    deadline: float
    queued: float
    pieces: Iterator[list[np.ndarray] | None] | None = None


def most_urgent(batches: list[DecodingBatch]) -> DecodingBatch:
    """The batch whose next piece runs: earliest deadline first, preemptively. A newcomer's first
    window (its deadline is its arrival) goes ahead of steady windows of requests with audio still
    buffered, even while their batch is half-way through its decode; among equals, the oldest batch."""
    return min(batches, key=lambda batch: (batch.deadline, batch.queued))


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

    # Optional: `begin(windows)`: the same decode in pieces, an iterator yielding None after each
    # piece and the audio after the last (the engine interleaves the pieces of several batches).

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
        self.batches: list[DecodingBatch] = []
        self.batch_key = getattr(decoder, "batch_key", _frames_span)

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
        """Queue each due window in a batch of its shape (the decoder's `batch_key`) that has not begun,
        then advance the most urgent batch by one piece (`most_urgent`); its outputs once it is done."""
        now = self.clock()
        self._replan_waiting(now)
        decoding = {window.stream.request_id for batch in self.batches for window in batch.windows}
        for stream in earliest_deadline_first(self.policy, list(self.streams.values())):
            span = None if stream.request_id in decoding else self.policy.next_window(stream, now)
            if span is not None:
                self._queue(Window(stream, *span))
        if not self.batches:
            self.last_step = StepStats()
            return []
        batch = most_urgent(self.batches)
        outputs = self._advance(batch)
        done = sum(window.end - window.start for window in batch.windows) if outputs else 0
        self.last_step = StepStats(batch=len(batch.windows), units=done)
        return outputs

    def _replan_waiting(self, now: float) -> None:
        """Later windows of batches that have not begun, planned again from what their requests hold now:
        one whose request's input completed while it waited decodes the rest with it, not in a window
        after it. First windows stay as they were queued: they are what a request's first audio waits for."""
        replanned = []
        for batch in self.batches:
            if batch.pieces is not None:
                continue
            kept = []
            for window in batch.windows:
                span = None if window.start == 0 else self.policy.next_window(window.stream, now)
                if span is None or span == (window.start, window.end, window.final):
                    kept.append(window)
                else:
                    replanned.append(Window(window.stream, *span))
            if len(kept) < len(batch.windows):
                batch.windows = kept
                batch.deadline = min((self.policy.deadline(window.stream) for window in kept), default=batch.deadline)
        self.batches = [batch for batch in self.batches if batch.windows]
        for window in replanned:
            self._queue(window)

    def _queue(self, window: Window) -> None:
        key = self.batch_key(window)
        deadline = self.policy.deadline(window.stream)
        for batch in self.batches:
            if batch.pieces is None and batch.key == key and len(batch.windows) < self.max_batch:
                batch.windows.append(window)
                batch.deadline = min(batch.deadline, deadline)
                return
        self.batches.append(DecodingBatch([window], key, deadline, queued=time.perf_counter()))

    def _begin(self, windows: list[Window]) -> Iterator[list[np.ndarray] | None]:
        begin = getattr(self.decoder, "begin", None)
        return begin(windows) if begin is not None else _in_one_piece(self.decoder, windows)

    def _advance(self, batch: DecodingBatch) -> list[StageOutput]:
        """One piece of `batch`; its windows' outputs once it yields their audio. A failing batch of
        several windows is started again window by window, so one bad request fails alone."""
        if batch.pieces is None:
            batch.pieces = self._begin(batch.windows)
        try:
            audios = next(batch.pieces)
        except Exception:
            self.batches.remove(batch)
            live = [window for window in batch.windows if self._live(window)]
            if len(batch.windows) == 1:
                return [self._fail(window.stream, *_describe()) for window in live]
            for window in live:
                self._restart_alone(window, batch)
            return []
        if audios is None:
            return []
        self.batches.remove(batch)
        first = batch.windows[0]
        logger.debug(
            "decoded frames [%d, %d) of %d request(s) in %.3f s, %.3f s into the request; %d frames in",
            first.start,
            first.end,
            len(batch.windows),
            time.perf_counter() - batch.queued,
            self.clock() - first.stream.started,
            len(first.stream.frames),
        )
        return [
            self._emit(window, audio)
            for window, audio in zip(batch.windows, audios, strict=False)
            if self._live(window)
        ]

    def _restart_alone(self, window: Window, failed: DecodingBatch) -> None:
        """The window's decode again in a batch of its own, begun at once so that no window joins it."""
        alone = DecodingBatch([window], failed.key, self.policy.deadline(window.stream), failed.queued)
        alone.pieces = self._begin([window])
        self.batches.append(alone)

    def _live(self, window: Window) -> bool:
        """Whether the window's request still runs here (not aborted while its batch decoded)."""
        return self.streams.get(window.stream.request_id) is window.stream

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
        """The request's stream goes; its window leaves a batch that has not begun (one that has
        finishes for the others, the aborted window's audio dropped)."""
        self.streams.pop(request_id, None)
        for batch in self.batches:
            if batch.pieces is None:
                batch.windows = [window for window in batch.windows if window.stream.request_id != request_id]
        self.batches = [
            batch for batch in self.batches if any(w.stream.request_id in self.streams for w in batch.windows)
        ]

    def has_unfinished(self) -> bool:
        return bool(self.streams)

    def capacity(self) -> Capacity:
        """Requests decoding here against the windows one step batches (more wait for the next step)."""
        return Capacity(kind="slots", used=len(self.streams), total=self.max_batch)


def _in_one_piece(decoder: WindowDecoder, windows: list[Window]) -> Iterator[list[np.ndarray]]:
    yield decoder.decode(windows)


def _frames_span(window: Window) -> tuple[int, int, bool]:
    return window.start, window.end, window.final


def _describe() -> tuple[str, str | None]:
    import sys

    error = sys.exc_info()[1]
    if isinstance(error, StageFailure):
        return error.message, error.param
    return f"code2wav failed: {type(error).__name__}: {error}", None
