"""Create-time checks of a deployment's checkpoint, without importing torch: the directory exists
(or is a hub id the workers may download), holds a `config.json` / `model_index.json` that parses,
and its architecture is one the pipeline's family serves. Each failure names `model_dir`.

A hub id (`org/name`) that is not a local directory is refused when the machine is offline
(`HF_HUB_OFFLINE` / `TRANSFORMERS_OFFLINE`): the workers would try the hub on every attempt.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

FAMILY_MODEL_TYPES: dict[str, frozenset[str]] = {
    "llm": frozenset({"qwen2", "qwen3", "llama", "mistral"}),
    "qwen2_5_omni": frozenset({"qwen2_5_omni"}),
    "qwen3_omni": frozenset({"qwen3_omni_moe"}),
    "text_to_image": frozenset(
        {"StableDiffusion3Pipeline", "PixArtSigmaPipeline", "PixArtAlphaPipeline", "FluxPipeline", "SanaPipeline"}
    ),
    "text_to_video": frozenset({"WanPipeline", "CogVideoXPipeline", "LTXPipeline", "HunyuanVideoPipeline"}),
    "ar_to_dit": frozenset({"ar_to_dit"}),
}
"""What each family serves: config.json `model_type` (or `omnistage_family`), or diffusers'
`model_index.json` `_class_name` (stages/models/ keeps the same lists for its own detection)."""
MODEL_FREE_FAMILIES = frozenset({"echo"})


class CheckpointInvalid(Exception):
    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def checkpoint_check(family: str, model_dir: str) -> None:
    """Raise CheckpointInvalid when `model_dir` cannot serve `family`."""
    if family in MODEL_FREE_FAMILIES:
        return
    path = Path(model_dir)
    if not path.is_dir():
        _check_hub_id(model_dir)
        return
    kind = _checkpoint_kind(path)
    known = FAMILY_MODEL_TYPES.get(family)
    if known is not None and kind not in known:
        raise CheckpointInvalid(
            f"{model_dir} is a {kind!r} checkpoint; the {family} family serves {', '.join(sorted(known))}."
        )


def hub_offline() -> bool:
    return any(os.environ.get(name, "").lower() in ("1", "true", "yes") for name in ("HF_HUB_OFFLINE",
               "TRANSFORMERS_OFFLINE"))  # fmt: skip


def _check_hub_id(model_dir: str) -> None:
    looks_like_hub_id = model_dir.count("/") == 1 and not model_dir.startswith((".", "/", "~"))
    if not looks_like_hub_id:
        raise CheckpointInvalid(f"no checkpoint directory at {model_dir!r}.")
    if hub_offline():
        raise CheckpointInvalid(
            f"{model_dir!r} is not a local directory and the Hugging Face hub is off (HF_HUB_OFFLINE); "
            "give a checkpoint directory."
        )


def _checkpoint_kind(path: Path) -> str:
    for name, key in (("config.json", "model_type"), ("model_index.json", "_class_name")):
        file = path / name
        if not file.is_file():
            continue
        try:
            config = json.loads(file.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise CheckpointInvalid(f"{file} is not valid JSON: {error}.") from None
        if not isinstance(config, dict):
            raise CheckpointInvalid(f"{file} is not a JSON object.")
        return str(config.get("omnistage_family") or config.get(key) or "")
    raise CheckpointInvalid(f"{path} has neither config.json nor model_index.json.")
