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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stages.models.dummy_weights import build_random, meta_parameter_bytes
from stages.models.weights_meter import active_meter


def dummy_pipeline(model_dir: str | Path, *, device: str, dtype, seed: int):
    import diffusers

    model_dir = Path(model_dir)
    index = json.loads((model_dir / "model_index.json").read_text())
    pipeline_class = getattr(diffusers, index["_class_name"])
    parts, models = {}, {}
    for name, value in index.items():
        if name.startswith("_"):
            continue
        if not _is_component(value):
            parts[name] = value
        elif value[0] is None:
            parts[name] = None
        else:
            component_class = getattr(importlib.import_module(value[0]), value[1])
            factory = _model_factory(component_class, model_dir / name, dtype)
            if factory is None:  # a tokenizer, scheduler or processor: from its files
                parts[name] = component_class.from_pretrained(model_dir / name)
            else:
                models[f"{model_dir}/{name}"] = (name, factory)
    _announce({part: factory for part, (_, factory) in models.items()})
    for part, (name, factory) in models.items():
        parts[name] = build_random(factory, device=device, seed=seed, part=part)
    return pipeline_class(**parts)


def _is_component(value) -> bool:
    return isinstance(value, list) and len(value) == 2


def _model_factory(component_class, folder: Path, dtype) -> Callable[[], Any] | None:
    """What builds the component's model from its folder's config; None when it is not a model."""
    from diffusers import ModelMixin
    from transformers import PreTrainedModel

    if issubclass(component_class, PreTrainedModel):
        config = component_class.config_class.from_pretrained(folder)
        return lambda: component_class._from_config(config, dtype=dtype)
    if issubclass(component_class, ModelMixin):
        config = component_class.load_config(folder)
        return lambda: component_class.from_config(config).to(dtype)
    return None


def _announce(models: dict[str, Callable[[], Any]]) -> None:
    """Tell the active weights meter every model's parameter bytes (by part) before the first is built."""
    meter = active_meter()
    if meter is None:
        return
    for part, factory in models.items():
        size = meta_parameter_bytes(factory)
        if size is not None:
            meter.expect(part, size)
