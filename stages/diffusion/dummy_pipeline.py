"""A diffusers pipeline directory served with `load_format: dummy`: its models built from their configs on
the device with seeded random weights, no weight file read.

`model_index.json` names the pipeline class and each component's library and class, as
`DiffusionPipeline.from_pretrained` reads it: models (diffusers `ModelMixin`s, transformers
`PreTrainedModel`s) are built from their folder's config through the shared dummy path
(stages/models/dummy_weights.py), the rest (tokenizers, schedulers, processors) load from their files as
usual, and the index's plain settings (Wan's `boundary_ratio`, ...) pass to the pipeline as they are.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path


def dummy_pipeline(model_dir: str | Path, *, device: str, dtype, seed: int):
    import diffusers

    model_dir = Path(model_dir)
    index = json.loads((model_dir / "model_index.json").read_text())
    pipeline_class = getattr(diffusers, index["_class_name"])
    parts = {}
    for name, value in index.items():
        if name.startswith("_"):
            continue
        if not _is_component(value):
            parts[name] = value
        elif value[0] is None:
            parts[name] = None
        else:
            component_class = getattr(importlib.import_module(value[0]), value[1])
            parts[name] = _component(component_class, model_dir / name, device=device, dtype=dtype, seed=seed)
    return pipeline_class(**parts)


def _is_component(value) -> bool:
    return isinstance(value, list) and len(value) == 2


def _component(component_class, folder: Path, *, device: str, dtype, seed: int):
    from diffusers import ModelMixin
    from transformers import PreTrainedModel

    from stages.models.dummy_weights import build_random

    if issubclass(component_class, PreTrainedModel):
        config = component_class.config_class.from_pretrained(folder)
        return build_random(lambda: component_class._from_config(config, dtype=dtype), device=device, seed=seed)
    if issubclass(component_class, ModelMixin):
        config = component_class.load_config(folder)
        return build_random(lambda: component_class.from_config(config), device=device, seed=seed).to(dtype)
    return component_class.from_pretrained(folder)
