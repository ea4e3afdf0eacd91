"""Seeded tiny checkpoints of real architectures, built locally (no model hub).

`build(name, out_dir)` runs the builder registered under `name`; `build_all(root)` builds every
registered checkpoint under `root/<name>` and skips those already complete (a `.complete` marker is
written last). Each checkpoint gets a `provenance.json` (random weights unless its builder says otherwise). The registry maps names to "module:function" strings so importing it imports no torch.
Each area adds its builders here, one line each. `build_all(root, builders=REAL_SHAPES)` writes the
real-shape directories instead (published configs, no weights: stages/tiny/real_shapes.py).
"""

from __future__ import annotations

import importlib
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from stages.provenance import Provenance, read_provenance, write_provenance

BUILDERS: dict[str, str] = {
    "qwen2": "stages.tiny.llm:build_qwen2",
    "qwen3": "stages.tiny.llm:build_qwen3",
    "llama": "stages.tiny.llm:build_llama",
    "qwen2_5_omni": "stages.tiny.qwen_omni:build_qwen2_5_omni",
    "qwen3_omni": "stages.tiny.qwen_omni:build_qwen3_omni",
    "sd3": "stages.tiny.diffusion:build_sd3",
    "pixart": "stages.tiny.diffusion:build_pixart",
    "wan": "stages.tiny.diffusion:build_wan",
    "ar_to_dit": "stages.tiny.diffusion:build_ar_to_dit",
    "smollm2-135m-instruct": "stages.tiny.smollm2:build_smollm2",
}

REAL_SHAPES: dict[str, str] = {
    "qwen2_5_omni_7b": "stages.tiny.real_shapes:write_qwen2_5_omni_7b",
    "qwen3_omni_30b_a3b": "stages.tiny.real_shapes:write_qwen3_omni_30b_a3b",
    "qwen2_5_0_5b": "stages.tiny.real_shapes:write_qwen2_5_0_5b",
    "sd3_medium": "stages.tiny.real_shapes:write_sd3_medium",
}
"""Real-shape config directories (no weights; they serve with `load_format: dummy`)."""

COMPLETE_MARKER = ".complete"


def builder(name: str, builders: dict[str, str] = BUILDERS) -> Callable[[Path], Path]:
    if name not in builders:
        raise KeyError(f"no builder named {name!r} (known: {sorted(builders)})")
    module_name, _, function_name = builders[name].partition(":")
    return getattr(importlib.import_module(module_name), function_name)


def is_built(out_dir: str | Path) -> bool:
    return (Path(out_dir) / COMPLETE_MARKER).exists()


def build(name: str, out_dir: str | Path, builders: dict[str, str] = BUILDERS) -> Path:
    """Build checkpoint `name` into `out_dir` (rebuilt from scratch) and mark it complete."""
    out = Path(out_dir)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    builder(name, builders)(out)
    if read_provenance(out) is None:  # a builder that fetched trained weights says so itself
        write_provenance(out, Provenance(source=f"stages.tiny ({name})", random_weights=True))
    (out / COMPLETE_MARKER).write_text(name + "\n")
    return out


def build_all(
    root: str | Path,
    only: Iterable[str] | None = None,
    progress: Callable[[str], None] | None = None,
    builders: dict[str, str] = BUILDERS,
) -> dict[str, Path]:
    """Build the registered checkpoints (or `only` those) under `root/<name>`, skipping complete ones."""
    names = list(only) if only else list(builders)
    built = {}
    for name in names:
        out = Path(root) / name
        if is_built(out):
            if progress:
                progress(f"{name}: already built at {out}")
        else:
            if progress:
                progress(f"{name}: building at {out} ...")
            build(name, out, builders)
            if progress:
                progress(f"{name}: done")
        built[name] = out
    return built
