"""The generation engine's scheduling of decodes in pieces: a newcomer's first window goes ahead of a
batch of steady windows half-way through its decode; due windows of one shape join a batch that has
not begun; a failing batch is decoded again window by window; the replica host does not back off
while pieces run."""

from __future__ import annotations

import numpy as np

from stages.config import StageDeployConfig
from stages.generation.engine import GenerationEngine
from stages.protocol import StageRequest

PIECES = 4


class PiecedDecoder:
    """Audio of each window = its frames; every decode takes `PIECES` pieces; the log says which
    batch (its requests' ids) ran each piece."""

    sample_rate = 10
    seconds_per_frame = 0.02
    lookahead = 0

    def __init__(self, fail_with: str | None = None):
        self.log: list[tuple[str, ...]] = []
        self.fail_with = fail_with

    def open(self, request: StageRequest):
        return None

    def frames_of(self, request: StageRequest) -> list[int]:
        return list(request.prompt_token_ids or [])

    def batch_key(self, window) -> int:
        return window.end - window.start

    def decode(self, windows):
        return next(audio for audio in self.begin(windows) if audio is not None)

    def begin(self, windows):
        ids = tuple(window.stream.request_id for window in windows)
        for _ in range(PIECES - 1):
            self.log.append(ids)
            yield None
        self.log.append(ids)
        if self.fail_with in ids:
            raise RuntimeError(f"{self.fail_with} has a bad frame")
        yield [np.asarray(w.stream.frames[w.start : w.end], dtype=np.float32) for w in windows]


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _engine(decoder, clock, max_batch=8):
    deploy = StageDeployConfig(first_chunk_size=2, async_chunk_size=4, max_batch=max_batch, max_length=64)
    return GenerationEngine(decoder, deploy, clock=clock)


def _request(request_id, frames, seq=0, finished=False):
    return StageRequest(request_id=request_id, stage_id=2, seq=seq, finished=finished, prompt_token_ids=frames)


def _steps(engine, count):
    outputs = []
    for _ in range(count):
        outputs += engine.step()
    return outputs


def test_a_newcomers_first_window_goes_ahead_of_a_batch_half_way_through_its_decode():
    decoder, clock = PiecedDecoder(), Clock()
    engine = _engine(decoder, clock)
    for name in ("a", "b"):
        engine.add_request(_request(name, list(range(2))))
    _steps(engine, PIECES)  # both first windows, in one batch
    for name in ("a", "b"):
        engine.add_chunk(_request(name, list(range(2, 6)), seq=1))
    clock.now = 0.01  # a and b have 0.04 s of audio out: their deadline is 0.05 s
    _steps(engine, 2)  # their second windows, half-way
    engine.add_request(_request("new", [7, 7]))
    outputs = _steps(engine, PIECES)
    assert decoder.log[-PIECES - 2 :] == [("a", "b")] * 2 + [("new",)] * PIECES
    assert [output.request_id for output in outputs] == ["new"]
    outputs = _steps(engine, 2)
    assert [output.request_id for output in outputs] == ["a", "b"]
    assert [output.params["frames"] for output in outputs] == [[2, 6], [2, 6]]


def test_due_windows_of_one_shape_join_a_batch_that_has_not_begun():
    decoder, clock = PiecedDecoder(), Clock()
    engine = _engine(decoder, clock)
    engine.add_request(_request("b", [1, 2, 3], finished=True))  # decoded whole: another shape
    clock.now = 0.001
    engine.add_request(_request("a", [1, 2]))
    engine.step()
    clock.now = 0.002
    engine.add_request(_request("c", [4, 5]))  # a's batch waits behind b's: c joins it
    outputs = _steps(engine, 2 * PIECES - 1)
    assert decoder.log == [("b",)] * PIECES + [("a", "c")] * PIECES
    assert [output.request_id for output in outputs] == ["b", "a", "c"]


def test_a_later_window_whose_request_ended_before_it_began_takes_the_rest():
    """Windows after a request's first are planned again when their batch begins."""
    decoder, clock = PiecedDecoder(), Clock()
    engine = _engine(decoder, clock)
    engine.add_request(_request("a", [1, 2]))
    _steps(engine, PIECES)  # a's first window [0, 2)
    clock.now = 0.001
    engine.add_request(_request("b", [1, 2, 3], finished=True))
    engine.add_chunk(_request("a", [3, 4, 5, 6], seq=1))  # a's next window [2, 6) is due, behind b's decode
    engine.step()
    engine.add_chunk(_request("a", [], seq=2, finished=True))
    outputs = _steps(engine, 2 * PIECES - 1)
    assert [(output.request_id, output.params["frames"], output.finished) for output in outputs] == [
        ("b", [0, 3], True),
        ("a", [2, 6], True),
    ]
    assert not engine.has_unfinished() and not engine.batches


def test_a_first_window_stays_as_it_was_queued_when_its_request_ends_before_it_begins():
    decoder, clock = PiecedDecoder(), Clock()
    engine = _engine(decoder, clock)
    engine.add_request(_request("b", [1, 2, 3], finished=True))
    clock.now = 0.001
    engine.add_request(_request("a", [1, 2]))  # its first window [0, 2) waits behind b's decode
    engine.step()
    engine.add_chunk(_request("a", [3, 4], seq=1, finished=True))
    outputs = _steps(engine, 3 * PIECES - 1)
    assert [(output.request_id, output.params["frames"]) for output in outputs] == [
        ("b", [0, 3]),
        ("a", [0, 2]),
        ("a", [2, 4]),
    ]


def test_a_failing_batch_is_decoded_again_window_by_window_and_fails_only_its_culprit():
    decoder, clock = PiecedDecoder(fail_with="bad"), Clock()
    engine = _engine(decoder, clock)
    engine.add_request(_request("bad", [1, 2], finished=True))
    engine.add_request(_request("good", [3, 4], finished=True))
    outputs = []
    while engine.has_unfinished():
        outputs += engine.step()
    by_request = {output.request_id: output for output in outputs}
    assert by_request["bad"].error is not None and "bad frame" in by_request["bad"].error.message
    assert by_request["good"].error is None and by_request["good"].finished


def test_steps_that_run_a_piece_count_as_work():
    """The replica host backs off between empty steps only when the engine is waiting for input."""
    decoder, clock = PiecedDecoder(), Clock()
    engine = _engine(decoder, clock)
    engine.add_request(_request("a", [1, 2, 3]))  # first window [0, 2) due; then it waits for frames
    worked = []
    for _ in range(PIECES + 1):
        outputs = engine.step()
        worked.append((engine.last_step.batch, bool(outputs)))
    assert worked == [(1, False)] * (PIECES - 1) + [(1, True), (0, False)]


def test_an_aborted_request_leaves_its_batch_and_the_others_still_get_their_audio():
    decoder, clock = PiecedDecoder(), Clock()
    engine = _engine(decoder, clock)
    for name in ("a", "b"):
        engine.add_request(_request(name, [1, 2]))
    engine.step()
    engine.abort("a")  # half-way through the batch's decode
    clock.now = 0.001
    engine.add_request(_request("c", [1, 2, 3], finished=True))
    engine.add_request(_request("d", [1, 2, 3], finished=True))
    engine.abort("c")  # before its batch began
    outputs = _steps(engine, 2 * PIECES)
    assert [output.request_id for output in outputs] == ["b", "d"]
    assert decoder.log == [("a", "b")] * PIECES + [("d",)] * PIECES
    assert list(engine.streams) == ["b"] and not engine.batches  # b waits for more frames


def test_a_batch_that_fails_after_its_culprit_was_aborted_sends_nothing_for_it():
    decoder, clock = PiecedDecoder(fail_with="bad"), Clock()
    engine = _engine(decoder, clock)
    engine.add_request(_request("bad", [1, 2], finished=True))
    engine.add_request(_request("good", [3, 4], finished=True))
    engine.step()
    engine.abort("bad")
    outputs = []
    while engine.has_unfinished():
        outputs += engine.step()
    assert [(output.request_id, output.error) for output in outputs] == [("good", None)]
