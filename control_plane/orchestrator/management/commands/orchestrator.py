"""The orchestrator loop: routes requests through stages over Redis streams."""

from __future__ import annotations

import os
import signal
import socket
import threading

from django.conf import settings
from django.core.management.base import BaseCommand

from control_plane.redis_client import get_redis
from stages import streams
from stages.heartbeat import Heartbeat


class Command(BaseCommand):
    help = "Run the Redis-stream orchestrator until SIGINT/SIGTERM."

    def handle(self, *args, **options):
        stop = threading.Event()
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        orchestrator_id = f"{socket.gethostname()}:{os.getpid()}"
        heartbeat = Heartbeat(
            get_redis(),
            streams.orchestrator_heartbeat(orchestrator_id),
            interval_s=settings.HEARTBEAT_INTERVAL_S,
            ttl_s=settings.HEARTBEAT_TTL_S,
            payload=lambda: {"id": orchestrator_id},
        ).start()
        self.stdout.write(f"orchestrator {orchestrator_id} running")
        try:
            stop.wait()
        finally:
            heartbeat.stop()
            self.stdout.write("orchestrator stopped")
