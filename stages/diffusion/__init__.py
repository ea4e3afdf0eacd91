"""Diffusion stages: diffusers pipelines with request batching and step-level continuous batching.

`DiffusionEngine.from_pretrained(model_dir, stage_deploy)` loads a pipeline directory and serves it
(engine.py). Importing this package imports no torch; the engine does.
"""

from __future__ import annotations

__all__ = ["DiffusionEngine"]


def __getattr__(name: str):
    if name == "DiffusionEngine":
        from stages.diffusion.engine import DiffusionEngine

        return DiffusionEngine
    raise AttributeError(f"module 'stages.diffusion' has no attribute {name!r}")
