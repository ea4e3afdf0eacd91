"""`manage.py web`: N daphne processes share one listening socket; connections are served by
every one of them, and a web process that dies is handled as any supervised component."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket

import psutil
import pytest
from django.contrib.auth import get_user_model
from procs import PYTHON, Proc, free_port, pid_alive, wait_for
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from control_plane.accounts.services import api_key_create

pytestmark = pytest.mark.slow

PROCESSES = 2


def health_on(sock: socket.socket, port: int) -> bytes:
    sock.sendall(f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    reply = b""
    while b'{"status": "ok"}' not in reply:
        chunk = sock.recv(4096)
        assert chunk, f"connection closed after {reply!r}"
        reply += chunk
    return reply


def serving_pids(pids: list[int], port: int) -> set[int]:
    """The web processes that hold an accepted connection on `port`."""
    holding = set()
    for pid in pids:
        for conn in psutil.Process(pid).net_connections(kind="tcp"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_ESTABLISHED:
                holding.add(pid)
    return holding


@pytest.fixture
def web_tier(platform_env, tmp_path):
    port = free_port()
    proc = Proc([PYTHON, "manage.py", "web", "--port", str(port), "--processes", str(PROCESSES)], platform_env,
                tmp_path / "web.log")  # fmt: skip
    try:
        wait_for(lambda: "serving on" in proc.output(), timeout=180, what="the web tier up")
        pids = dict(re.findall(r"\[\s*(web-\d+)\] ready \(pid (\d+)\)", proc.output()))
        assert len(pids) == PROCESSES, proc.output()
        yield proc, port, {name: int(pid) for name, pid in pids.items()}
    finally:
        proc.stop()


def test_every_web_process_serves_connections_on_the_one_port(web_tier):
    proc, port, pids = web_tier
    connections = []
    try:
        # the kernel hands each new connection to one of the processes accepting on the socket
        for _ in range(200):
            sock = socket.create_connection(("127.0.0.1", port), timeout=30)
            connections.append(sock)
            assert b"HTTP/1.1 200" in health_on(sock, port)
            if serving_pids(list(pids.values()), port) == set(pids.values()):
                break
        assert serving_pids(list(pids.values()), port) == set(pids.values()), proc.output()
        for sock in connections:  # every connection, whichever process holds it, keeps answering
            assert b"HTTP/1.1 200" in health_on(sock, port)
    finally:
        for sock in connections:
            sock.close()


async def test_websockets_are_served_by_whichever_process_accepts_them(web_tier):
    """Each WebSocket lives in the process that accepted it (nothing goes through the Channels
    layer): every connection gets the realtime consumer's answer, here the refusal of a model
    that does not exist, after its key was checked in that process."""
    from asgiref.sync import sync_to_async

    _, port, pids = web_tier
    user = await sync_to_async(get_user_model().objects.create_user)("ws-user", password="pw-123456")
    _, secret = await sync_to_async(api_key_create)(user=user, name="ws", scopes=["inference"])
    url = f"ws://127.0.0.1:{port}/v1/realtime?model=no-such-model"

    async def refusal() -> dict:
        events = []
        async with connect(url, additional_headers={"Authorization": f"Bearer {secret}"}) as ws:
            with pytest.raises(ConnectionClosed):  # the consumer hangs up after the error
                async with asyncio.timeout(60):
                    while True:
                        events.append(json.loads(await ws.recv()))
        assert [event["type"] for event in events] == ["error"], events
        return events[0]["error"]

    errors = await asyncio.gather(*(refusal() for _ in range(20)))
    assert {error["code"] for error in errors} == {"model_not_found"}, errors


def test_a_killed_web_process_stops_the_tier_and_exits_non_zero(web_tier):
    proc, _, pids = web_tier
    os.kill(pids["web-2"], signal.SIGKILL)
    assert proc.process.wait(timeout=60) != 0
    assert "web-2 exited with code -9; stopping everything" in proc.output()
    assert "all components stopped" in proc.output()
    wait_for(lambda: not any(pid_alive(pid) for pid in pids.values()), timeout=15, what="web processes gone")
