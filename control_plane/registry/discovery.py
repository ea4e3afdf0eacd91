"""Describe the checkpoints under the models folder (in a subprocess: the family registry it
consults belongs to the engine library, which this process never imports)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from django.conf import settings


class DiscoveryFailed(RuntimeError):
    pass


def discover_models(root: str | Path | None = None) -> list[dict]:
    root = Path(root or settings.MODELS_DIR)
    argv = [sys.executable, "-m", "stages.inventory", str(root)]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    if result.returncode != 0:
        raise DiscoveryFailed(f"could not list the checkpoints in {root}:\n{result.stderr.strip()}")
    return json.loads(result.stdout)
