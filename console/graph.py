"""Layout of a pipeline's stage graph for the inline SVG drawing: boxes in layers, left to right."""

from __future__ import annotations

from dataclasses import dataclass, field

from stages.config import PipelineConfig

BOX_WIDTH = 150
BOX_HEIGHT = 64
GAP_X = 56
GAP_Y = 20
MARGIN = 8


@dataclass
class StageBox:
    id: int
    name: str
    kind: str
    output: str | None
    x: int
    y: int
    width: int = BOX_WIDTH
    height: int = BOX_HEIGHT
    replicas: list = field(default_factory=list)

    @property
    def center_y(self) -> int:
        return self.y + self.height // 2


@dataclass
class Arrow:
    x1: int
    y1: int
    x2: int
    y2: int
    label: str
    streaming: bool

    @property
    def label_x(self) -> int:
        return (self.x1 + self.x2) // 2

    @property
    def label_y(self) -> int:
        return min(self.y1, self.y2) - 6


@dataclass
class StageGraph:
    boxes: list[StageBox]
    arrows: list[Arrow]
    width: int
    height: int


def _layers(config: PipelineConfig) -> dict[int, int]:
    """Each stage's layer: the length of the longest path to it from the entry stage."""
    layer = {stage.id: 0 for stage in config.stages}
    for _ in config.stages:  # a DAG settles within len(stages) rounds
        for edge in config.edges:
            layer[edge.target] = max(layer[edge.target], layer[edge.source] + 1)
    return layer


def stage_graph(config: PipelineConfig, replicas_by_stage: dict[str, list] | None = None) -> StageGraph:
    layer = _layers(config)
    rows: dict[int, int] = {}
    boxes: dict[int, StageBox] = {}
    for stage in sorted(config.stages, key=lambda s: (layer[s.id], s.id)):
        row = rows.get(layer[stage.id], 0)
        rows[layer[stage.id]] = row + 1
        boxes[stage.id] = StageBox(
            id=stage.id,
            name=stage.name,
            kind=stage.kind,
            output=stage.output,
            x=MARGIN + layer[stage.id] * (BOX_WIDTH + GAP_X),
            y=MARGIN + 14 + row * (BOX_HEIGHT + GAP_Y),
            replicas=(replicas_by_stage or {}).get(stage.name, []),
        )
    arrows = []
    for edge in config.edges:
        source, target = boxes[edge.source], boxes[edge.target]
        arrows.append(
            Arrow(source.x + source.width, source.center_y, target.x - 4, target.center_y, edge.carries, edge.streaming)
        )
    width = MARGIN * 2 + (max(layer.values()) + 1) * (BOX_WIDTH + GAP_X) - GAP_X
    height = MARGIN * 2 + 14 + max(rows.values()) * (BOX_HEIGHT + GAP_Y) - GAP_Y
    return StageGraph(list(boxes.values()), arrows, width, height)
