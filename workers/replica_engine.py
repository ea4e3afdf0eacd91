"""Builds the stage engine a ReplicaSpec describes (in the replica host's own process).

CPU threads: every replica is its own process, and a pool hosts several, so each takes its
stage's `cpu_threads`, else `OMNISTAGE_REPLICA_THREADS`, else 1 torch thread, instead
of torch's default of one per core (three tiny omni replicas on 2 cores otherwise took 4.5x
longer to the first audio packet).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

import msgspec

from stages.config import StageDeployConfig
from stages.engine import StageEngine
from stages.errors import ConfigError
from stages.models import get_family, load_stage_engine
from stages.models.weights_meter import metering
from stages.protocol import ReplicaSpec
from workers.device_pinning import local_device


def stage_deploy_of(spec: ReplicaSpec) -> StageDeployConfig:
    """The stage's deploy config, placed on the device the spec assigns to this replica."""
    return placed(spec.stage_deploy, spec.device, "stage_deploy")


def placed(stage_deploy: StageDeployConfig, device: str, path: str) -> StageDeployConfig:
    """`stage_deploy` on `device` (its own when empty) by its name in this process (a host pinned to
    `cuda:N` sees it as `cuda:0`), checked (errors name their field under `path`)."""
    local = local_device(device or stage_deploy.device, os.environ)
    if local != stage_deploy.device:
        stage_deploy = msgspec.structs.replace(stage_deploy, device=local)
    stage_deploy.validate(path)
    return stage_deploy


def replica_threads(stage_deploy: StageDeployConfig) -> int:
    if stage_deploy.cpu_threads is not None:
        return stage_deploy.cpu_threads
    value = os.environ.get("OMNISTAGE_REPLICA_THREADS") or "1"
    if not value.isdigit() or int(value) < 1:
        raise ConfigError("OMNISTAGE_REPLICA_THREADS", f"expected an integer >= 1, got {value!r}")
    return int(value)


def load_replica_engine(
    spec: ReplicaSpec,
    progress: Callable[[float, str], None] | None = None,
    weights: Callable[[int, int], None] | None = None,
) -> StageEngine:
    """The family's engine for the spec's stage; the entry stage also runs the family's input processing.
    `progress(fraction, phase)` hears the loading phases (imports, then the weights and the engine);
    `weights(loaded, total)` the bytes of weights read so far, as the family's loader reads them."""
    progress = progress or _silent
    stage_deploy = stage_deploy_of(spec)
    progress(0.1, "importing the model family")
    family = get_family(spec.family)
    if family.uses_torch:
        progress(0.3, "importing torch")
        import torch

        torch.set_num_threads(replica_threads(stage_deploy))
    pipeline = spec.pipeline or family.pipeline
    if spec.stage not in {stage.name for stage in pipeline.stages}:
        names = sorted(stage.name for stage in pipeline.stages)
        raise ConfigError("stage", f"pipeline {pipeline.name!r} has no stage {spec.stage!r} (has {names})")
    progress(0.5, "loading weights and building the engine")
    with metering(weights) if weights is not None else contextlib.nullcontext():
        engine = load_stage_engine(family, spec.stage, spec.model_dir, stage_deploy, pipeline)
    progress(0.95, "engine loaded")
    return engine


def _silent(fraction: float, phase: str) -> None:
    pass
