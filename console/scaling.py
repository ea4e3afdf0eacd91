"""The notice a scale leaves on a deployment's page: it stays while the change is on its way and
goes once the stage has landed (as many replicas as asked, all RUNNING, the surplus gone).

The pending targets live in the user's session, so the notice follows the user across the
panel's refreshes without a message that outlives (or dies before) the change.
"""

from __future__ import annotations

from control_plane.deployments.models import Deployment, DeploymentState

SESSION_KEY = "console_scaling"


def scaling_requested(session, deployment: str, stage: str, replicas: int) -> None:
    pending = session.get(SESSION_KEY, {})
    pending.setdefault(deployment, {})[stage] = replicas
    session[SESSION_KEY] = pending


def scale_landed(replicas: list, stage: str, target: int) -> bool:
    rows = [replica for replica in replicas if replica.stage == stage]
    serving = [replica for replica in rows if replica.index < target]
    surplus = [replica for replica in rows if replica.index >= target]
    return (
        len(serving) == target
        and all(replica.state == DeploymentState.RUNNING for replica in serving)
        and all(replica.state == DeploymentState.STOPPED for replica in surplus)
    )


def scaling_notices(session, deployment) -> list[dict]:
    """The scales of this deployment still under way; landed ones (or any on a deployment that is
    stopping) are forgotten."""
    pending = session.get(SESSION_KEY, {})
    stages = pending.get(deployment.name, {})
    if not stages:
        return []
    replicas = list(deployment.replicas.all())
    running = deployment.desired_state == Deployment.Desired.RUNNING
    notices = []
    for stage, target in list(stages.items()):
        if not running or scale_landed(replicas, stage, target):
            del stages[stage]
            continue
        ready = sum(1 for r in replicas if r.stage == stage and r.index < target and r.state == DeploymentState.RUNNING)
        notices.append({"stage": stage, "replicas": target, "ready": ready})
    if not stages:
        del pending[deployment.name]
    session[SESSION_KEY] = pending
    return notices
