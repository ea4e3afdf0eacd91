"""The orchestrator loop: routes requests through stages over Redis streams, runs the
reconciler (when it holds the leader lease) and the periodic history retention cleanup
(when it holds that lease). Survives Redis restarts by reconnecting."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time

import redis
from django.conf import settings
from django.core.management.base import BaseCommand

from control_plane.inference.retention_schedule import RetentionSchedule
from control_plane.orchestrator.driver import RedisOrchestrator
from control_plane.redis_client import get_redis
from stages import streams
from stages.heartbeat import Heartbeat

log = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Run the Redis-stream orchestrator until SIGINT/SIGTERM."

    def handle(self, *args, **options):
        stop = threading.Event()
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        orchestrator_id = f"{socket.gethostname()}:{os.getpid()}"
        client = get_redis(timeout=5)
        heartbeat = Heartbeat(
            client,
            streams.orchestrator_heartbeat(orchestrator_id),
            interval_s=settings.HEARTBEAT_INTERVAL_S,
            ttl_s=settings.HEARTBEAT_TTL_S,
            payload=lambda: {"id": orchestrator_id},
        ).start()
        driver = RedisOrchestrator(client, orchestrator_id=orchestrator_id)
        history_retention = RetentionSchedule(client, orchestrator_id)
        self.stdout.write(f"orchestrator {orchestrator_id} running")
        claimed = False
        try:
            while not stop.is_set():
                try:
                    if not claimed:
                        driver.sync_deployments()
                        driver.claim_abandoned()
                        claimed = True
                    driver.run_once()
                    history_retention.poll()
                except redis.ConnectionError as error:
                    log.warning("redis unavailable (%s); retrying", error)
                    driver.forget_groups()
                    claimed = False
                    stop.wait(1.0)
                except Exception:
                    log.exception("orchestrator loop error")
                    time.sleep(0.5)
        finally:
            heartbeat.stop()
            self.stdout.write("orchestrator stopped")
