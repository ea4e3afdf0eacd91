"""Stage groups: stages of one pipeline that one replica host process runs together.

Stages whose deploy config names the same `group` are hosted by one process
(`workers.group_host`), which hands a request's outputs from one of them to the next in
memory instead of through the orchestrator and Redis. The rules:

- a group has at least two stages, on one device and pool (or pools), with one replica count
  (the group's);
- exactly one member, the group's entry, takes input from outside the group (the client's
  request, or a stage outside it); the others read only from members;
- what leaves the group: the outputs of the members the client sees, carrying only their
  client modality's payloads (hidden states for the next member stay inside), and the outputs
  of members with an edge out of the group, whole. Inner members (a talker whose codes only
  code2wav reads) send nothing back; the orchestrator takes them as finished once every member
  that sends something back finished.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from stages.errors import ConfigError

if TYPE_CHECKING:
    from stages.config import DeployConfig, EdgeConfig, PipelineConfig


@dataclass(frozen=True)
class StageGroup:
    name: str
    members: tuple[int, ...]
    """Stage ids in the pipeline's topological order; the entry first."""
    entry: int
    published: frozenset[int]
    """Members whose outputs leave the group."""
    leaving: frozenset[int]
    """Members with an edge to a stage outside the group: their outputs leave with every payload."""

    def __contains__(self, stage_id: int) -> bool:
        return stage_id in self.members


class StageGroups:
    """The groups of one deployment of one pipeline, indexed by stage id."""

    def __init__(self, pipeline: PipelineConfig, deploy: DeployConfig):
        self.pipeline = pipeline
        self.groups: dict[str, StageGroup] = {}
        for name, stage_ids in _members_by_group(pipeline, deploy).items():
            self.groups[name] = _group(pipeline, name, stage_ids)
        self._by_stage = {sid: group for group in self.groups.values() for sid in group.members}

    def of(self, stage_id: int) -> StageGroup | None:
        return self._by_stage.get(stage_id)

    def internal(self, edge: EdgeConfig) -> bool:
        """Whether the edge runs inside one group (its outputs pass in memory)."""
        group = self._by_stage.get(edge.source)
        return group is not None and edge.target in group

    def __bool__(self) -> bool:
        return bool(self.groups)


def ungrouped(deploy: DeployConfig) -> DeployConfig:
    """The deploy config without groups (in one process every stage is co-located already)."""
    import msgspec

    stages = {name: msgspec.structs.replace(config, group=None) for name, config in deploy.stages.items()}
    return msgspec.structs.replace(deploy, stages=stages)


def _members_by_group(pipeline: PipelineConfig, deploy: DeployConfig) -> dict[str, list[int]]:
    members: dict[str, list[int]] = {}
    for stage_id in topological_order(pipeline):
        stage_deploy = deploy.stages.get(pipeline.stage(stage_id).name)
        if stage_deploy is not None and stage_deploy.group is not None:
            members.setdefault(stage_deploy.group, []).append(stage_id)
    return members


def topological_order(pipeline: PipelineConfig) -> list[int]:
    order: list[int] = []
    remaining = [stage.id for stage in pipeline.stages]
    while remaining:
        free = [sid for sid in remaining if all(e.source in order for e in pipeline.upstream(sid))]
        order += free
        remaining = [sid for sid in remaining if sid not in free]
    return order


def _group(pipeline: PipelineConfig, name: str, stage_ids: list[int]) -> StageGroup:
    inside = set(stage_ids)
    entries = [
        sid
        for sid in stage_ids
        if not pipeline.upstream(sid) or any(edge.source not in inside for edge in pipeline.upstream(sid))
    ]
    leaving = {sid for sid in stage_ids if any(edge.target not in inside for edge in pipeline.downstream(sid))}
    published = {
        sid
        for sid in stage_ids
        if pipeline.stage(sid).output is not None or sid in leaving or not pipeline.downstream(sid)
    }
    return StageGroup(
        name=name,
        members=tuple(stage_ids),
        entry=entries[0] if entries else stage_ids[0],
        published=frozenset(published),
        leaving=frozenset(leaving),
    )


def validate_groups(pipeline: PipelineConfig, deploy: DeployConfig) -> None:
    """Errors name the first offending member's `group` field."""
    for name, stage_ids in _members_by_group(pipeline, deploy).items():
        names = [pipeline.stage(sid).name for sid in stage_ids]
        path = f"stages.{names[0]}.group"
        if len(stage_ids) < 2:
            raise ConfigError(path, f"group {name!r} has one stage ({names[0]}); a group needs at least two")
        configs = [deploy.for_stage(pipeline.stage(sid)) for sid in stage_ids]
        for field in ("device", "pool", "pools", "replicas"):
            values = {repr(getattr(config, field)) for config in configs}
            if len(values) > 1:
                found = {stage: getattr(config, field) for stage, config in zip(names, configs, strict=True)}
                raise ConfigError(path, f"the stages of group {name!r} must share one {field}, got {found}")
        inside = set(stage_ids)
        entries = [
            pipeline.stage(sid).name
            for sid in stage_ids
            if not pipeline.upstream(sid) or any(edge.source not in inside for edge in pipeline.upstream(sid))
        ]
        if len(entries) != 1:
            raise ConfigError(
                path,
                f"group {name!r} needs exactly one stage that takes input from outside it, found {entries} "
                "(a group is a connected part of the stage graph)",
            )
