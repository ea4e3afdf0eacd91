"""A live platform for the console tests (tests/live_stack.py), shared by consecutive tests: a
private redis-server, a Celery worker, the orchestrator, the history writer and daphne."""

from __future__ import annotations

from live_stack import LiveStack
from procs import wait_for


class ConsoleStack(LiveStack):
    """The platform's processes on a private Redis, so that no other test run shares its queues."""

    def __init__(self, env: dict, tmp_path):
        super().__init__({**env}, tmp_path, worker_node="console")

    def deployments(self) -> list[dict]:
        from control_plane.deployments.models import Deployment

        return list(Deployment.objects.values("name", "state"))

    def stop_deployment(self, name: str) -> None:
        from control_plane.deployments.models import Deployment
        from control_plane.deployments.services import deployment_stop

        deployment_stop(deployment=Deployment.objects.get(name=name))  # the reconciler stops its replicas

    def logs(self) -> str:
        return super().logs(tail=3000)

    def stop(self) -> None:
        self.stop_processes()


def wait_running(name: str, stack: ConsoleStack, timeout: float = 120):
    from control_plane.deployments.models import Deployment

    def running():
        deployment = Deployment.objects.get(name=name)
        if deployment.state == "ERROR":
            raise AssertionError(f"{name} failed: {deployment.state_reason}")
        return deployment if deployment.state == "RUNNING" else None

    try:
        return wait_for(running, timeout=timeout, interval=0.1, what=f"{name} RUNNING")
    except TimeoutError:
        print(stack.logs())
        raise
