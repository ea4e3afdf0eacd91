"""A live platform over two hosts of a `HostBed`: Redis (a private redis-server listening on
127.0.0.1 and on the root side of every host's veth), PostgreSQL reached from the hosts through
a relay on their veth addresses, web and orchestrator in the root namespace, and on each host
its own Celery worker pool serving queue `cpu.<host>`, whose replica hosts live on that host."""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import redis
import redis.asyncio
from host_bed import HostBed
from procs import PYTHON, Proc, free_port, redis_server_binary, wait_for
from tcp_relay import TcpRelay

from control_plane.orchestrator import wire
from control_plane.orchestrator.serving import serve
from stages import streams
from stages.orchestrator import Submit
from stages.protocol import SamplingParams, StageRequest

HOST_POOLS = "cpu,gpu,cpu.a,cpu.b"


def pool_of(host: str) -> str:
    return f"cpu.{host}"


class TcpRedis:
    """A private redis-server on a TCP port of the loopback and of each given address."""

    def __init__(self, directory: Path, addresses: list[str]):
        self.directory = directory
        self.addresses = addresses
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    def url(self, address: str = "127.0.0.1") -> str:
        return f"redis://{address}:{self.port}/0"

    def start(self) -> TcpRedis:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [redis_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1", *self.addresses,
             "--protected-mode", "no", "--save", "", "--appendonly", "no", "--dir", str(self.directory)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_for(redis.Redis.from_url(self.url(), socket_timeout=1).ping, timeout=10, what="redis-server")
        return self

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)


class HostsStack:
    def __init__(self, bed: HostBed, env: dict, tmp_path: Path, secret: str, *, cpus: dict[str, str] | None = None):
        self.bed = bed
        self.tmp = tmp_path
        self.cpus = cpus or {}
        self.headers = {"Authorization": f"Bearer {secret}"}
        self.procs: dict[str, Proc] = {}
        self.relays: list[TcpRelay] = []
        self.env = {**env, "OMNISTAGE_KNOWN_POOLS": HOST_POOLS}
        self.redis: TcpRedis | None = None
        self.host_envs: dict[str, dict] = {}
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"

    def start(self) -> HostsStack:
        self.redis = TcpRedis(self.tmp / "redis", self.bed.root_ips).start()
        self.env["REDIS_URL"] = self.redis.url()
        self.host_envs = {name: self._host_env(name) for name in self.bed.hosts}
        for name in self.bed.hosts:
            self.start_host(name)
        self.procs["orchestrator"] = self._proc("orchestrator", [PYTHON, "manage.py", "orchestrator"], self.env)
        self.procs["web"] = self._proc(
            "web",
            [PYTHON, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port), "control_plane.asgi:application"],
            self.env,
        )
        wait_for(lambda: httpx.get(f"{self.base}/health").status_code == 200, timeout=60, what="web up")
        return self

    def _host_env(self, name: str) -> dict:
        """The host's view: Redis and PostgreSQL at its veth peer's address."""
        host = self.bed[name]
        database = urlsplit(self.env["DATABASE_URL"])
        relay = TcpRelay(host.root_ip, (database.hostname or "127.0.0.1", database.port or 5432))
        self.relays.append(relay)
        netloc = database.netloc.rsplit("@", 1)
        credentials = f"{netloc[0]}@" if len(netloc) == 2 else ""
        database_url = urlunsplit(database._replace(netloc=f"{credentials}{host.root_ip}:{relay.port}"))
        return {**self.env, "REDIS_URL": self.redis.url(host.root_ip), "DATABASE_URL": database_url}

    def _proc(self, name: str, argv: list[str], env: dict) -> Proc:
        return Proc(argv, env, self.tmp / f"{name}-{time.monotonic_ns()}.log")

    # ------------------------------------------------------------------ hosts

    def start_host(self, name: str) -> Proc:
        """The host's Celery worker pool (queue `cpu.<name>`), which starts its replica hosts."""
        worker = [PYTHON, "-m", "celery", "-A", "control_plane", "worker", "-Q", pool_of(name), "-c", "1",
                  "-n", f"{name}@%h", "--without-mingle", "--without-gossip", "-l", "INFO"]  # fmt: skip
        argv = self.bed.argv(name, worker, cpus=self.cpus.get(name))
        self.procs[f"worker-{name}"] = self._proc(f"worker-{name}", argv, self.host_envs[name])
        return self.procs[f"worker-{name}"]

    def kill_host(self, name: str) -> None:
        self.bed.kill(name)
        self.procs.pop(f"worker-{name}").stop()

    def redis_client(self) -> redis.Redis:
        return redis.Redis.from_url(self.redis.url(), socket_timeout=5)

    # ------------------------------------------------------------------ the API

    def api(self, method: str, path: str, **kwargs) -> httpx.Response:
        return httpx.request(method, f"{self.base}{path}", headers=self.headers, timeout=30, **kwargs)

    def deploy(self, name: str, pipeline: str, model_dir: str, deploy_config: dict) -> dict:
        body = {"name": name, "pipeline": pipeline, "model_dir": model_dir, "deploy_config": deploy_config}
        response = self.api("POST", "/api/deployments/", json=body)
        assert response.status_code == 201, response.text
        return response.json()

    def deployment(self, name: str) -> dict:
        return self.api("GET", f"/api/deployments/{name}/").json()

    def wait_state(self, name: str, state: str, timeout: float = 300) -> dict:
        def reached():
            body = self.deployment(name)
            return body if body["state"] == state else None

        try:
            return wait_for(reached, timeout=timeout, interval=0.5, what=f"{name} {state}")
        except TimeoutError:
            print(self.deployment(name))
            print(self.logs())
            raise

    def replicas(self, name: str) -> list[dict]:
        return self.api("GET", f"/api/replicas/?deployment={name}").json()

    def all_running(self, name: str, per_host: int) -> list[dict]:
        """The deployment's replicas once every one is RUNNING, `per_host` on each host. A deployment
        runs as soon as each stage has a replica warmed up, while others may still be loading."""

        def running():
            replicas = self.replicas(name)
            hosts = sorted(r["host"] for r in replicas)
            ok = (
                all(r["state"] == "RUNNING" for r in replicas)
                and hosts == ["host-a"] * per_host + ["host-b"] * per_host
            )
            return replicas if ok else None

        return wait_for(running, timeout=600, interval=0.5, what="every replica RUNNING")

    def logs(self) -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-5000:]}" for log in self.tmp.glob("*.log"))

    # ------------------------------------------------------------------ stopping

    def stop(self) -> None:
        try:
            if "web" in self.procs:
                for deployment in self.api("GET", "/api/deployments/").json():
                    self.api("POST", f"/api/deployments/{deployment['name']}/stop/")
                time.sleep(1.0)
        except Exception as error:
            print(f"could not stop the deployments: {error!r}")
        finally:
            for name in self.bed.hosts:
                self.bed.terminate(name, timeout=10)
            for proc in self.procs.values():
                proc.stop()
            if self.redis is not None:
                self.redis.stop()
            for relay in self.relays:
                relay.close()


def omni_request(text: str, max_tokens: int = 12) -> StageRequest:
    return StageRequest(
        request_id=f"req-{uuid.uuid4().hex[:10]}",
        messages=[{"role": "user", "content": text}],
        sampling=SamplingParams(max_tokens=max_tokens, temperature=0.0),
        arrival_time=time.time(),
    )


async def collect(
    redis_url: str, deployment_id: str, request: StageRequest, *, timeout: float = 120.0, answered: set | None = None
) -> list:
    """The request's client messages; its id goes into `answered` once the first output came."""
    client = redis.asyncio.Redis.from_url(redis_url)
    messages = []
    try:
        async with asyncio.timeout(timeout):
            async for message in serve(deployment_id, request, client=client):
                messages.append(message)
                if answered is not None and message.kind == "output":
                    answered.add(request.request_id)
    finally:
        await client.aclose()
    return messages


def summary_of(messages: list):
    summaries = [m.summary for m in messages if m.summary is not None]
    return summaries[-1] if summaries else None


class ReplyLog:
    """Submits requests straight to the orchestrator's inbox with one reply stream, and records
    every message that comes back on it, with when it came, for as long as it runs: messages
    that arrive after a request ended (an answer given twice) are recorded too."""

    def __init__(self, redis_url: str, deployment_id: str):
        self.redis_url = redis_url
        self.client = redis.Redis.from_url(redis_url, socket_timeout=5)
        self.deployment_id = deployment_id
        self.stream = streams.client_replies(f"hosts-test:{uuid.uuid4().hex[:12]}")
        self.messages: dict[str, list[tuple[float, wire.ClientMessage]]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, name="reply-log", daemon=True)
        self._thread.start()

    def submit(self, request: StageRequest) -> str:
        with self._lock:
            self.messages[request.request_id] = []
        event = Submit(deployment_id=self.deployment_id, request=request, reply_to=self.stream, at=time.time())
        self.client.xadd(streams.orchestrator_inbox(), wire.encode_event(event))
        return request.request_id

    def _read(self) -> None:
        last = "0"
        reader = redis.Redis.from_url(self.redis_url, socket_timeout=5)
        while not self._stop.is_set():
            try:
                entries = reader.xread({self.stream: last}, count=500, block=200)
            except redis.RedisError:
                time.sleep(0.2)
                continue
            for _, items in entries or []:
                for entry_id, fields in items:
                    last = entry_id
                    request_id = fields.get(b"request", b"").decode()
                    with self._lock:
                        self.messages.setdefault(request_id, []).append(
                            (time.monotonic(), wire.decode_client_message(fields))
                        )

    def of(self, request_id: str) -> list[wire.ClientMessage]:
        with self._lock:
            return [message for _, message in self.messages.get(request_id, [])]

    def ended_at(self, request_id: str) -> float | None:
        with self._lock:
            ends = [at for at, message in self.messages.get(request_id, []) if message.kind in ("complete", "fail")]
        return ends[0] if ends else None

    def answered(self) -> set[str]:
        """Requests that had some output by now."""
        with self._lock:
            return {rid for rid, got in self.messages.items() if any(m.kind == "output" for _, m in got)}

    def wait_ended(self, request_ids: list[str], timeout: float) -> None:
        wait_for(lambda: all(self.ended_at(rid) is not None for rid in request_ids), timeout=timeout, interval=0.1,
                 what="every request to end")  # fmt: skip

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.client.close()
