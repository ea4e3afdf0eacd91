"""A hub download's progress, read from the folder it writes to and stored on the Model row.

huggingface_hub writes each file to `.cache/huggingface/download/<file>.<etag>.<id>.incomplete`
and renames it into place once complete; so the bytes done are the complete files' sizes plus the
partial ones' and the files done are the listed files in place at their listed size. Sampling the
folder (a few times a second, in a thread) needs nothing of the library's progress bars.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from django.db import close_old_connections, connection
from django.utils import timezone

from control_plane.registry.models import Model

PARTIALS = Path(".cache") / "huggingface" / "download"
INTERVAL_S = 0.25
HEARTBEAT_S = 5.0  # the row is touched at least this often while the download runs (see Model.import_stalled)


def folder_progress(folder: Path, files: dict[str, int]) -> tuple[int, int]:
    """(bytes done, files done) of a download of `files` ({path: size}) into `folder`. The complete
    files are read before the partial ones, so a file that completes meanwhile is missed, not counted twice."""
    complete = [path for path, size in files.items() if _size(folder / path) == size]
    partial = (
        sum(_size(p) or 0 for p in (folder / PARTIALS).rglob("*.incomplete")) if (folder / PARTIALS).is_dir() else 0
    )
    done = sum(files[path] for path in complete) + partial
    return min(done, sum(files.values())), len(complete)


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size if path.is_file() else None
    except OSError:  # renamed or deleted while sampled
        return None


class ProgressRecorder:
    """While open, stores the download's progress on the row whenever it changed (and touches
    the row every few seconds even when it did not: a live import)."""

    def __init__(self, model_pk: int, folder: Path, files: dict[str, int], interval_s: float = INTERVAL_S):
        self.model_pk = model_pk
        self.folder = folder
        self.files = files
        self.interval_s = interval_s
        self.last: tuple[int, int] | None = None
        self.written = 0.0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"import-progress-{model_pk}", daemon=True)

    def __enter__(self) -> ProgressRecorder:
        self.record()
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        self.thread.join()
        self.record()

    def record(self) -> None:
        sample = folder_progress(self.folder, self.files)
        if (
            self.last is not None
        ):  # a file renamed between the two reads of a sample is missed once, never counted twice
            sample = (max(sample[0], self.last[0]), max(sample[1], self.last[1]))
        if sample != self.last or time.monotonic() - self.written > HEARTBEAT_S:
            self.last, self.written = sample, time.monotonic()
            Model.objects.filter(pk=self.model_pk).update(
                bytes_done=sample[0], files_done=sample[1], updated_at=timezone.now()
            )

    def _run(self) -> None:
        try:
            while not self.stopping.wait(self.interval_s):
                close_old_connections()
                self.record()
        finally:
            connection.close()
