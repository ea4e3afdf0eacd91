"""One line per deployment for the deployments list: its state and, per stage, how many of its
replicas run out of how many it asks for."""

from __future__ import annotations

from control_plane.deployments.models import DeploymentState
from control_plane.deployments.services import pipeline_config_of


def deployment_row(deployment) -> dict:
    replicas = list(deployment.replicas.all())
    wanted = deployment.deploy_config.get("stages", {})
    stages = []
    for stage in pipeline_config_of(deployment.pipeline).stages:
        mine = [replica for replica in replicas if replica.stage == stage.name]
        stages.append({
            "name": stage.name,
            "kind": stage.kind,
            "desired": wanted.get(stage.name, {}).get("replicas", 1),
            "running": sum(1 for replica in mine if replica.state == DeploymentState.RUNNING),
            "replicas": len(mine),
        })  # fmt: skip
    return {
        "deployment": deployment,
        "stages": stages,
        "running": sum(stage["running"] for stage in stages),
        "desired": sum(stage["desired"] for stage in stages),
    }
