"""The group host: one replica host process running every stage of a stage group.

    python -m workers.replica_host --spec-json '<ReplicaSpec JSON with group and members>' ...

It is the replica host (`workers.replica_host`: input stream, heartbeats, draining, failure
rules, restarts by the control plane) around a `GroupChain` instead of one engine: the group's
entry stage takes requests and chunks from the replica's input stream; the chain hands each
request's outputs from member to member in memory and returns only what leaves the group,
which goes to the deployment's output stream. A request stays on this host until every member
it needs finished.

Payloads that leave the group go inline or through Redis, never this host's shared memory
(their reader is the orchestrator or another group, whose host is not looked up).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from stages.config import DeployConfig, StageDeployConfig
from stages.engine import StageEngine
from stages.errors import ConfigError
from stages.groups import StageGroups
from stages.models.weights_meter import metering
from stages.orchestrator.replica_streams import stage_stream
from stages.protocol import ReplicaSpec, StageOutput
from workers.group_chain import GroupChain
from workers.replica_host import ReplicaHost


class GroupHost(ReplicaHost):
    def __init__(self, spec: ReplicaSpec, client, **kwargs):
        kwargs.setdefault("build_engine", lambda spec: load_group_chain(spec, weights=self.reporter.set_weights))
        super().__init__(spec, client, **kwargs)

    def _wait_ms(self) -> int | None:
        """While requests run, outputs arrive on the chain's queue, where `step()` waits for them:
        the input stream is only looked at, so an output is never held up behind a blocking read."""
        return None if self.engine.has_unfinished() else super()._wait_ms()

    def _ended(self, output: StageOutput) -> bool:
        return output.request_id not in self.engine.active

    def _offload(self, output: StageOutput) -> StageOutput:
        return self.connectors.offload_output(output, same_host=_nowhere, preference=self.connector_preference)


def _nowhere(_key: str) -> bool:
    return False


def member_deploys(spec: ReplicaSpec) -> dict[str, StageDeployConfig]:
    """Each member's deploy config, placed on the device the spec assigns to the group's replica."""
    from workers.replica_engine import placed

    return {name: placed(stage_deploy, spec.device, f"members.{name}") for name, stage_deploy in spec.members.items()}


def load_group_chain(spec: ReplicaSpec, weights: Callable[[int, int], None] | None = None) -> GroupChain:
    """Build every member's engine (one after another) and the chain between them; `weights(loaded, total)`
    hears the bytes of the members' weights read so far (each member's announced as it starts)."""
    from stages.models import get_family, load_stage_engine
    from workers.replica_engine import replica_threads

    family = get_family(spec.family)
    pipeline = spec.pipeline or family.pipeline
    deploys = member_deploys(spec)
    deploy = DeployConfig(stages=deploys)
    deploy.validate(pipeline)
    group = StageGroups(pipeline, deploy).groups.get(spec.group)
    if group is None or pipeline.stage(group.entry).name != spec.stage:
        raise ConfigError(
            "group", f"the members {sorted(deploys)} do not form group {spec.group!r} entered at {spec.stage!r}"
        )
    if family.uses_torch:
        import torch

        torch.set_num_threads(replica_threads(deploys[spec.stage]))

    def build(name: str) -> StageEngine:
        stage_deploy = deploy.for_stage(pipeline.stage_named(name))
        return load_stage_engine(family, name, spec.model_dir, stage_deploy, pipeline)

    with metering(weights) if weights is not None else contextlib.nullcontext():
        return GroupChain(
            pipeline, group, build, streams=lambda name: stage_stream(pipeline.stage_named(name).kind, deploys[name])
        )
