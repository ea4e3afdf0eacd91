"""The seeded tiny checkpoints the tests deploy and open, shared by the whole run."""

from __future__ import annotations

import subprocess
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
    if not is_built(TINY_ROOT / name):
        subprocess.run([PYTHON, "-m", "stages.tiny", str(TINY_ROOT), "--only", name], cwd=REPO, check=True,
                       capture_output=True)  # fmt: skip
    return TINY_ROOT / name
