"""A private platform for a benchmark: redis-server, a Celery worker, the orchestrator and the
web tier (`manage.py web`, N processes on one port), on a scratch SQLite file or a scratch
PostgreSQL database that is dropped afterwards. Nothing of a running `make run` is touched.

    with LivePlatform(scratch_dir, database="postgres", web_processes=2) as platform:
        deployment = platform.deploy("bench-echo", "echo", "-", {...})
        platform.port, platform.secret, platform.redis_url, platform.pids()
"""

from __future__ import annotations

import os
import signal
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from procs import PYTHON, Proc, RedisServer, free_port, wait_for  # noqa: E402

DEFAULT_POSTGRES = "postgres://postgres@127.0.0.1:5432"


class LivePlatform:
    def __init__(
        self,
        var_dir: Path,
        *,
        database: str = "sqlite",
        postgres_server: str = DEFAULT_POSTGRES,
        web_processes: int = os.cpu_count() or 1,
        worker_concurrency: int = 1,
        extra_env: dict[str, str] | None = None,
    ):
        self.var_dir = var_dir
        self.database = database
        self.postgres_server = postgres_server.rstrip("/")
        self.postgres_name = f"omnibench_{uuid.uuid4().hex[:10]}"
        self.web_processes = web_processes
        self.worker_concurrency = worker_concurrency
        self.extra_env = extra_env or {}
        self.procs: dict[str, Proc] = {}
        self.redis_server: RedisServer | None = None
        self.port = free_port()
        self.secret = ""
        self.user = None

    # ------------------------------------------------------------ lifecycle

    def __enter__(self) -> LivePlatform:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        self.redis_server = RedisServer(self.var_dir / "redis").start()
        env = {
            **os.environ,
            "OMNISTAGE_HEARTBEAT_INTERVAL": "0.5",
            "OMNISTAGE_HEARTBEAT_TTL": "3",
            "OMNISTAGE_LOG_LEVEL": "WARNING",
            **self.extra_env,  # may override the heartbeat and log settings above
            "OMNISTAGE_VAR_DIR": str(self.var_dir),
            "REDIS_URL": self.redis_server.url,
            "DJANGO_SETTINGS_MODULE": "control_plane.settings",
            "PYTHONPATH": str(REPO),
        }
        env.pop("DATABASE_URL", None)
        if self.database == "postgres":
            self._create_postgres_database()
            env["DATABASE_URL"] = f"{self.postgres_server}/{self.postgres_name}"
        for name in ("OMNISTAGE_VAR_DIR", "REDIS_URL", "DJANGO_SETTINGS_MODULE", "DATABASE_URL"):
            if name in env:
                os.environ[name] = env[name]
            else:
                os.environ.pop(name, None)
        import django

        django.setup()
        from django.contrib.auth import get_user_model
        from django.core.management import call_command

        from control_plane.accounts.services import api_key_create

        call_command("migrate", verbosity=0)
        call_command("sync_pipelines", verbosity=0)
        logs = self.var_dir / "logs"
        logs.mkdir(exist_ok=True)
        self.procs["worker"] = Proc(
            [PYTHON, "-m", "celery", "-A", "control_plane", "worker", "-Q", "cpu", "-c", str(self.worker_concurrency),
             "--without-mingle", "--without-gossip", "-l", "WARNING"], env, logs / "worker.log")  # fmt: skip
        self.procs["orchestrator"] = Proc([PYTHON, "manage.py", "orchestrator"], env, logs / "orchestrator.log")
        self.procs["history"] = Proc([PYTHON, "manage.py", "history_writer"], env, logs / "history.log")
        self.procs["web"] = Proc(
            [PYTHON, "manage.py", "web", "--host", "127.0.0.1", "--port", str(self.port),
             "--processes", str(self.web_processes)], env, logs / "web.log")  # fmt: skip
        self.user = get_user_model().objects.create_user(f"bench-{uuid.uuid4().hex[:6]}", password="x")
        _, self.secret = api_key_create(user=self.user, name="bench", scopes=["inference"])
        wait_for(lambda: "serving on" in self.procs["web"].output(), timeout=180, what="web tier up")

    def deploy(self, name: str, pipeline: str, model_dir: str, deploy_config: dict, timeout: float = 300):
        from control_plane.deployments.models import Deployment, Pipeline
        from control_plane.deployments.services import deployment_create

        deployment = deployment_create(
            name=name, pipeline=Pipeline.objects.get(name=pipeline), model_dir=model_dir, deploy_config=deploy_config
        )
        wait_for(
            lambda: Deployment.objects.get(pk=deployment.pk).state == "RUNNING", timeout=timeout, what=f"{name} RUNNING"
        )
        return deployment

    def stop(self) -> None:
        for proc in reversed(list(self.procs.values())):
            proc.stop()
        if self.redis_server is not None:
            self.redis_server.stop()
        if self.database == "postgres":
            from django.db import connections

            connections.close_all()
            self._drop_postgres_database()

    # ------------------------------------------------------------ facts

    @property
    def redis_url(self) -> str:
        return self.redis_server.url

    def log_tail(self, name: str = "web", chars: int = 5000) -> str:
        return self.procs[name].output()[-chars:]

    def pids(self) -> dict[str, int]:
        """Every platform process by name: the supervised web processes (from the web log), the
        orchestrator, the history writer, the Celery worker and its children, redis-server."""
        import psutil

        found = {
            "redis-server": self.redis_server.process.pid,
            "orchestrator": self.procs["orchestrator"].pid,
            "history": self.procs["history"].pid,
        }
        worker = psutil.Process(self.procs["worker"].pid)
        found["worker"] = worker.pid
        for index, child in enumerate(worker.children(recursive=True)):
            found[f"worker-child-{index}"] = child.pid
        web = psutil.Process(self.procs["web"].pid)
        found["web-supervisor"] = web.pid
        for index, child in enumerate(web.children()):
            found[f"web-{index + 1}"] = child.pid
        return found

    def web_pids(self) -> list[int]:
        return [pid for name, pid in self.pids().items() if name.startswith("web-") and name != "web-supervisor"]

    def signal_web(self, signum: int = signal.SIGTERM) -> None:
        self.procs["web"].signal(signum)

    # ------------------------------------------------------------ PostgreSQL

    def _admin_connection(self):
        import psycopg

        return psycopg.connect(f"{self.postgres_server}/postgres", autocommit=True)

    def _create_postgres_database(self) -> None:
        with self._admin_connection() as connection:
            connection.execute(f'CREATE DATABASE "{self.postgres_name}"')

    def _drop_postgres_database(self) -> None:
        deadline = time.monotonic() + 10
        while True:
            try:
                with self._admin_connection() as connection:
                    connection.execute(f'DROP DATABASE IF EXISTS "{self.postgres_name}" WITH (FORCE)')
                return
            except Exception as error:
                if time.monotonic() > deadline:
                    print(f"could not drop {self.postgres_name}: {error}")
                    return
                time.sleep(0.5)
