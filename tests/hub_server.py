"""A local stand-in for the Hugging Face hub: exactly the endpoints an import calls.

- `GET /api/models/<repo>/revision/<revision>` (model_info, `?blobs=True`): `sha` and `siblings`
  (`rfilename`, `size`, `blobId`);
- `GET /api/models/<repo>/tree/<commit>?recursive=True` (snapshot_download's listing): the files;
- `HEAD` and `GET /<repo>/resolve/<commit>/<path>` (hf_hub_download): `ETag`, `X-Repo-Commit`,
  `Content-Length`, and `Range: bytes=N-` answered with a 206 and `Content-Range`.

Each repository is a directory served as of one made-up commit. The body is sent in small pieces
at `bytes_per_s` (so that progress can be watched), `drop_after[path] = n` closes the
connection once after the first `n` bytes of that file (an interrupted transfer), and a GET of
a file in `broken` answers 500 (a failed download). An unknown
repository is a 404 with the hub's `X-Error-Code: RepoNotFound`. Every request is recorded.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

PIECE = 8192


def repo_files(directory: Path) -> dict[str, Path]:
    return {
        str(path.relative_to(directory)): path
        for path in sorted(directory.rglob("*"))
        if path.is_file() and not any(part.startswith(".") for part in path.relative_to(directory).parts)
    }


class HubServer:
    def __init__(self, repos: dict[str, Path], *, bytes_per_s: float | None = None):
        self.repos = {repo: repo_files(directory) for repo, directory in repos.items()}
        self.commits = {repo: hashlib.sha1(repo.encode()).hexdigest() for repo in repos}
        self.bytes_per_s = bytes_per_s
        self.drop_after: dict[str, int] = {}
        self.broken: set[str] = set()  # files whose GET answers 500
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Range header)
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> HubServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def ranged_gets(self, filename: str) -> list[str]:
        return [r for method, path, r in self.requests if method == "GET" and path.endswith(f"/{filename}") and r]

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                hub._serve(self, body=False)

            def do_GET(self):
                hub._serve(self, body=True)

        return Handler

    def _serve(self, request: BaseHTTPRequestHandler, body: bool) -> None:
        path = unquote(urlsplit(request.path).path)
        with self.lock:
            self.requests.append((request.command, path, request.headers.get("Range")))
        if path.startswith("/api/models/") and "/revision/" in path:
            repo = path.removeprefix("/api/models/").split("/revision/")[0]
            return self._json(request, repo, lambda files: {
                "id": repo, "modelId": repo, "sha": self.commits[repo], "private": False,
                "siblings": [{"rfilename": name, "size": file.stat().st_size, "blobId": _digest(file)[:40]}
                             for name, file in files.items()],
            })  # fmt: skip
        if path.startswith("/api/models/") and "/tree/" in path:
            repo = path.removeprefix("/api/models/").split("/tree/")[0]
            return self._json(request, repo, lambda files: [
                {"type": "file", "path": name, "size": file.stat().st_size, "oid": _digest(file)[:40]}
                for name, file in files.items()
            ])  # fmt: skip
        if "/resolve/" in path:
            repo, _, rest = path.lstrip("/").partition("/resolve/")
            filename = rest.partition("/")[2]
            file = self.repos.get(repo, {}).get(filename)
            if file is None:
                return self._missing(request, "EntryNotFound" if repo in self.repos else "RepoNotFound")
            if body and filename in self.broken:
                return self._error(request, 500)
            return self._file(request, repo, filename, file, body)
        self._missing(request, "RepoNotFound")

    def _json(self, request, repo: str, make) -> None:
        if repo not in self.repos:
            return self._missing(request, "RepoNotFound")
        data = json.dumps(make(self.repos[repo])).encode()
        request.send_response(200)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        request.wfile.write(data)

    def _error(self, request, status: int) -> None:
        request.send_response(status)
        request.send_header("Content-Length", "0")
        request.end_headers()

    def _missing(self, request, code: str) -> None:
        data = json.dumps({"error": f"{code}: not here"}).encode()
        request.send_response(404)
        request.send_header("X-Error-Code", code)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        request.wfile.write(data)

    def _file(self, request, repo: str, filename: str, file: Path, body: bool) -> None:
        data = file.read_bytes()
        start = 0
        ranged = request.headers.get("Range", "")
        if ranged.startswith("bytes=") and body:
            start = int(ranged.removeprefix("bytes=").split("-")[0] or 0)
        request.send_response(206 if start else 200)
        request.send_header("ETag", f'"{_digest(file)}"')
        request.send_header("X-Repo-Commit", self.commits[repo])
        request.send_header("Accept-Ranges", "bytes")
        request.send_header("Content-Length", str(len(data) - start))
        if start:
            request.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        request.end_headers()
        if not body:
            return
        with self.lock:
            drop = self.drop_after.pop(filename, None)
        sent = start
        while sent < len(data):
            end = min(len(data), sent + PIECE, drop if drop is not None and drop > sent else len(data))
            request.wfile.write(data[sent:end])
            request.wfile.flush()
            sent = end
            if drop is not None and sent >= drop:
                request.close_connection = True
                request.connection.shutdown(2)  # the transfer breaks off mid-file
                return
            if self.bytes_per_s:
                time.sleep(PIECE / self.bytes_per_s)


def _digest(file: Path) -> str:
    return hashlib.sha256(file.read_bytes()).hexdigest()
