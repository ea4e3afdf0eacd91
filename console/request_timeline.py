"""A request's waterfall for its detail page, from the timings its history row keeps.

The orchestrator reports, per stage (stage_metrics): when the stage started after the request's
submission (`started_s`), when its first output came after that (`first_output_s`), how long it
ran (`duration_s`), and when a sample of its outputs came (`output_marks_s`: its chunks, or its
deltas). The request's own lane runs from submission to completion, with TTFT and TTFP marked,
and a queued segment while no replica had taken it. Positions are percentages of the lane.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from control_plane.inference.models import InferenceRequest


@dataclass
class Segment:
    kind: str
    """queued, request, waiting (a stage before its first output), running."""
    start_s: float
    end_s: float
    left: float = 0.0
    width: float = 0.0


@dataclass
class Mark:
    label: str
    at_s: float
    left: float = 0.0


@dataclass
class Lane:
    name: str
    kind: str
    """"request" or "stage"."""
    segments: list[Segment] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    chunks: list[float] = field(default_factory=list)
    """Left positions of the output marks."""
    outputs: int | None = None
    end_s: float = 0.0
    start_known: bool = True


@dataclass
class Timeline:
    total_s: float
    lanes: list[Lane]
    ticks: list[float]


def request_timeline(row: InferenceRequest) -> Timeline | None:
    stages = [_stage_lane(name, values) for name, values in (row.stage_metrics or {}).items()]
    stages = [lane for lane in stages if lane is not None]
    ends = [lane.end_s for lane in stages]
    total = row.e2el_s if row.e2el_s is not None else max(ends, default=0.0)
    if total <= 0:
        return None
    total = max([total, *ends])
    lanes = [_request_lane(row, total), *sorted(stages, key=lambda lane: lane.segments[0].start_s)]
    for lane in lanes:
        _place(lane, total)
    return Timeline(total_s=total, lanes=lanes, ticks=[round(total * step / 4, 4) for step in range(5)])


def _request_lane(row: InferenceRequest, total: float) -> Lane:
    lane = Lane(name="request", kind="request", end_s=total)
    queued = row.queue_s or 0.0
    if queued > 0:
        lane.segments.append(Segment("queued", 0.0, queued))
    lane.segments.append(Segment("request", queued, total))
    for label, value in (("TTFT", row.ttft_s), ("TTFP", row.ttfp_s)):
        if value is not None:
            lane.marks.append(Mark(label, value))
    return lane


def _stage_lane(name: str, values: dict) -> Lane | None:
    duration = values.get("duration_s")
    if duration is None:
        return None
    start = values.get("started_s")
    lane = Lane(name=name, kind="stage", start_known=start is not None)
    start = start or 0.0
    first = values.get("first_output_s")
    end = start + duration
    if first is not None and first > 0:
        lane.segments.append(Segment("waiting", start, start + first))
        lane.segments.append(Segment("running", start + first, end))
        lane.marks.append(Mark("first output", start + first))
    else:
        lane.segments.append(Segment("running", start, end))
    lane.chunks = [float(mark) for mark in values.get("output_marks_s") or []]
    outputs = values.get("outputs")
    lane.outputs = int(outputs) if outputs is not None else None
    lane.end_s = end
    return lane


def _place(lane: Lane, total: float) -> None:
    def percent(seconds: float) -> float:
        return round(max(0.0, min(100.0, 100 * seconds / total)), 3)

    for segment in lane.segments:
        segment.left = percent(segment.start_s)
        segment.width = round(percent(segment.end_s) - segment.left, 3)
    for mark in lane.marks:
        mark.left = percent(mark.at_s)
    lane.chunks = [percent(at) for at in lane.chunks]
