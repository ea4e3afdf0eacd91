"""A TCP relay in the test process: connections to (listen address, port) are piped to a target,
so a service that listens only on 127.0.0.1 (the machine's PostgreSQL) is reachable from a
network namespace through its veth address."""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpRelay:
    def __init__(self, listen_host: str, target: tuple[str, int], port: int = 0):
        self.target = target
        self._server = socket.create_server((listen_host, port), reuse_port=False)
        self.address = self._server.getsockname()[:2]
        self._stopped = threading.Event()
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name=f"relay-{self.address}", daemon=True).start()

    @property
    def port(self) -> int:
        return self.address[1]

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets |= {client, upstream}
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._stopped.set()
        with contextlib.suppress(OSError):
            self._server.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.close()
            self._sockets.clear()
