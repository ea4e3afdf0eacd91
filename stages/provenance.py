"""Where a checkpoint's weights came from, written next to them as `provenance.json`.

`{"source": "...", "random_weights": true}`: the source is a short human-readable origin (a package,
a hub id, a builder); `random_weights` says whether the weights were trained or drawn at random (the
tiny test checkpoints). Pure JSON, so the control plane reads it without importing any engine.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

PROVENANCE_FILE = "provenance.json"


@dataclass(frozen=True)
class Provenance:
    source: str
    random_weights: bool


def write_provenance(model_dir: str | Path, provenance: Provenance) -> None:
    (Path(model_dir) / PROVENANCE_FILE).write_text(json.dumps(asdict(provenance), indent=2) + "\n")


def read_provenance(model_dir: str | Path) -> Provenance | None:
    path = Path(model_dir) / PROVENANCE_FILE
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    return Provenance(source=str(data.get("source", "")), random_weights=bool(data.get("random_weights", False)))
