"""The web tier of one machine: N daphne processes accepting on one listening socket.

The supervisor binds the socket (so every process shares the port, and a restart of one
leaves the port open) and starts `OMNISTAGE_WEB_PROCESSES` daphne processes (default: the
number of cores) that adopt it with `--fd`; the kernel hands each new connection to one of
them. Web processes are stateless: a request, an SSE stream or a WebSocket lives in the one
process that accepted it, and everything shared (the Channels layer, the orchestrator's
streams, quotas, cache invalidation) goes through Redis. Why daphne: docs/web-tier.md.
"""

from __future__ import annotations

import json
import socket
import sys
import urllib.request

from control_plane.system.supervisor import Component

BACKLOG = 2048
WEBSOCKET_MAX_BYTES = 16 * 1024 * 1024  # the Realtime API allows 15 MiB appends; daphne's default is 1 MiB


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound and listening, inheritable by the web processes."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host.strip("[]"), port))
    sock.listen(BACKLOG)
    sock.set_inheritable(True)
    return sock


def web_argv(fd: int, *, access_log: bool) -> list[str]:
    return [
        sys.executable, "-m", "daphne", "--fd", str(fd),
        *(["--access-log", "-"] if access_log else ["-v", "0"]),
        "--websocket-max-message-size", str(WEBSOCKET_MAX_BYTES),
        "--websocket-max-frame-size", str(WEBSOCKET_MAX_BYTES),
        "control_plane.asgi:application",
    ]  # fmt: skip


def web_components(
    sock: socket.socket, processes: int, *, env: dict[str, str], access_log: bool = False
) -> list[Component]:
    """One component per web process on `sock`; each is ready once the socket answers /health
    while the process runs (any process may answer: they share the port)."""
    host, port = sock.getsockname()[:2]
    url = f"http://{_connectable(host)}:{port}/health"
    names = ["web"] if processes == 1 else [f"web-{index}" for index in range(1, processes + 1)]
    return [
        Component(name, web_argv(sock.fileno(), access_log=access_log), ready=lambda: health_ok(url), env=env,
                  pass_fds=(sock.fileno(),))
        for name in names
    ]  # fmt: skip


def health_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=1) as response:
        return response.status == 200 and json.loads(response.read())["status"] == "ok"


def _connectable(host: str) -> str:
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host
