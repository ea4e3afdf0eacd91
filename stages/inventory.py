"""What checkpoints a models folder holds: `python -m stages.inventory ROOT` prints them as JSON.

One entry per checkpoint directory (one with a `config.json` or a diffusers `model_index.json`):
its name, path, the family that serves it, architecture, size on disk, parameter count (from the
safetensors headers, no weights read), dtype, and provenance (source, random weights or trained).
Reading this needs no torch, but detecting the family imports the family registry, so the control
plane runs it in a subprocess, as it does for the pipeline families.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from stages.errors import ConfigError
from stages.models import detect_family
from stages.models.weight_reads import safetensors_header
from stages.provenance import read_provenance

CHECKPOINT_FILES = ("config.json", "model_index.json")
TINY_MARKER = ".complete"  # written by stages.tiny's builders (random weights unless a provenance says otherwise)
SAFETENSORS_DTYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64", "I64": "int64"}


def inventory(root: str | Path) -> list[dict]:
    root = Path(root)
    if not root.is_dir():
        return []
    return [describe(child) for child in sorted(root.iterdir()) if is_checkpoint(child)]


def is_checkpoint(path: Path) -> bool:
    return path.is_dir() and not path.name.startswith(".") and any((path / f).is_file() for f in CHECKPOINT_FILES)


def describe(model_dir: Path) -> dict:
    weights = list(model_dir.rglob("*.safetensors"))
    tensor_dtypes, parameter_count = _safetensors_summary(weights)
    source, random_weights = _provenance(model_dir)
    return {
        "name": model_dir.name,
        "path": str(model_dir.absolute()),
        "family": _family(model_dir),
        "architecture": _architecture(model_dir),
        "size_bytes": sum(f.stat().st_size for f in model_dir.rglob("*") if f.is_file()),
        "parameter_count": parameter_count,
        "dtype": _config_dtype(model_dir) or (tensor_dtypes.most_common(1)[0][0] if tensor_dtypes else ""),
        "source": source,
        "random_weights": random_weights,
    }


def _family(model_dir: Path) -> str:
    try:
        return detect_family(model_dir)
    except ConfigError:
        return ""


def _architecture(model_dir: Path) -> str:
    config = _json(model_dir / "config.json")
    if config:
        return (
            (config.get("architectures") or [""])[0] or config.get("omnistage_family") or config.get("model_type", "")
        )
    return _json(model_dir / "model_index.json").get("_class_name", "")


def _config_dtype(model_dir: Path) -> str:
    config = _json(model_dir / "config.json")
    return str(config.get("dtype") or config.get("torch_dtype") or "")


def _provenance(model_dir: Path) -> tuple[str, bool]:
    provenance = read_provenance(model_dir)
    if provenance is not None:
        return provenance.source, provenance.random_weights
    if (model_dir / TINY_MARKER).is_file():
        return f"stages.tiny ({(model_dir / TINY_MARKER).read_text().strip()})", True
    return "local", False


def _safetensors_summary(files: list[Path]) -> tuple[Counter, int]:
    dtypes: Counter = Counter()
    parameters = 0
    for file in files:
        for name, tensor in safetensors_header(file).items():
            if name == "__metadata__":
                continue
            count = 1
            for dim in tensor["shape"]:
                count *= dim
            parameters += count
            dtypes[SAFETENSORS_DTYPES.get(tensor["dtype"], tensor["dtype"].lower())] += count
    return dtypes, parameters


def _json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


if __name__ == "__main__":
    json.dump(inventory(sys.argv[1]), sys.stdout)
