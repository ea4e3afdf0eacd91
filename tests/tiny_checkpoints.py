"""The seeded tiny checkpoints the tests deploy and open, shared by the whole run."""

from __future__ import annotations

import fcntl
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from procs import PYTHON, REPO

from stages.tiny import is_built

TINY_ROOT = REPO / "var" / "models"
"""Where `make run` builds them too (the platform's default models directory)."""


def tiny_checkpoint(name: str) -> Path:
    """The seeded tiny checkpoint `name` under the repository's var/models (where `make run` builds
    them), built by a `python -m stages.tiny` child only when it is not complete yet: every test that
    deploys or opens a tiny model shares this copy instead of building its own (each build starts a
    torch interpreter)."""
    with building(name):
        if not is_built(TINY_ROOT / name):
            subprocess.run([PYTHON, "-m", "stages.tiny", str(TINY_ROOT), "--only", name], cwd=REPO, check=True,
                           capture_output=True)  # fmt: skip
    return TINY_ROOT / name


@contextmanager
def building(name: str) -> Iterator[None]:
    """Held while checkpoint `name` under TINY_ROOT is checked and built: test workers running in
    parallel build it once, the others wait and find it built."""
    TINY_ROOT.mkdir(parents=True, exist_ok=True)
    with open(TINY_ROOT / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
