"""The history writer loop: requests' history rows and usage records from Redis into the
database (control_plane/inference/history_writer.py). Started by `manage.py omni_up`; run
one or more anywhere the database and Redis are reachable. Survives Redis restarts."""

from __future__ import annotations

import os
import signal
import socket
import threading

from django.conf import settings
from django.core.management.base import BaseCommand

from control_plane.inference.history_log import client
from control_plane.inference.history_writer import HistoryWriter
from control_plane.inference.redis_names import history_writer_heartbeat
from control_plane.redis_client import get_redis
from stages.heartbeat import Heartbeat


class Command(BaseCommand):
    help = "Write request history and usage from Redis into the database until SIGINT/SIGTERM."

    def add_arguments(self, parser):
        parser.add_argument("--batch", type=int, default=500, help="requests per transaction at most")

    def handle(self, *args, **options):
        stop = threading.Event()
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        consumer = f"{socket.gethostname()}:{os.getpid()}"
        writer = HistoryWriter(client(), consumer, batch=options["batch"])
        heartbeat = Heartbeat(get_redis(timeout=5), history_writer_heartbeat(consumer),
                              interval_s=settings.HEARTBEAT_INTERVAL_S, ttl_s=settings.HEARTBEAT_TTL_S,
                              payload=lambda: {"id": consumer, "written": writer.written}).start()  # fmt: skip
        self.stdout.write(f"history writer {consumer} running")
        try:
            writer.run(stop)
        finally:
            heartbeat.stop()
        self.stdout.write(f"history writer stopped ({writer.written} requests written)")
