"""The diffusion engine's switches, read from `StageDeployConfig.options`.

| option | values | default | what it does |
| --- | --- | --- | --- |
| `batching` | "step", "request", "none" | "step" | step-level continuous batching, whole-request batching, or one pipeline call at a time |
| `cfg_batching` | bool | true | conditional and unconditional rows in one transformer forward (false: two forwards) |
| `step_cache` | float >= 0 | 0 (off) | TeaCache-style threshold: skip the transformer for a request while its accumulated relative input change stays below it |
| `cpu_offload` | "none", "model", "sequential" | "none" | diffusers' model / sequential CPU offload (CUDA devices only) |
| `max_height`, `max_width` | int | 1024 | largest size a request may ask for |
| `max_steps` | int | 200 | most denoising steps a request may ask for |
| `max_frames` | int | 81 | most video frames a request may ask for |
| `progress_events` | bool | true | one progress output per denoising step |
| `default_steps`, `default_guidance`, `default_height`, `default_width`, `default_frames` | number | the pipeline's | defaults for requests that do not say |

`stage_deploy.max_batch` bounds how many requests denoise together.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import msgspec

from stages.config import StageDeployConfig
from stages.errors import ConfigError

Batching = Literal["step", "request", "none"]
Offload = Literal["none", "model", "sequential"]


class DiffusionOptions(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    batching: Batching = "step"
    cfg_batching: bool = True
    step_cache: float = 0.0
    cpu_offload: Offload = "none"
    max_height: int = 1024
    max_width: int = 1024
    max_steps: int = 200
    max_frames: int = 81
    progress_events: bool = True
    default_steps: int | None = None
    default_guidance: float | None = None
    default_height: int | None = None
    default_width: int | None = None
    default_frames: int | None = None


DEFAULTS_FILE = "omnistage.json"
"""A checkpoint may ship request defaults (`{"diffusion_defaults": {"default_height": 32, ...}}`),
e.g. so a tiny video model does not default to its real sibling's 81 frames at 480x832."""


def checkpoint_defaults(model_dir: str | Path) -> dict[str, Any]:
    path = Path(model_dir) / DEFAULTS_FILE
    if not path.is_file():
        return {}
    return dict(json.loads(path.read_text()).get("diffusion_defaults", {}))


def read_options(stage_deploy: StageDeployConfig, defaults: dict[str, Any] | None = None) -> DiffusionOptions:
    """Parse and check the options (over the checkpoint's `defaults`); errors name `options.<field>`."""
    options = _convert({**(defaults or {}), **stage_deploy.options})
    if options.step_cache < 0:
        raise ConfigError("options.step_cache", "must be >= 0 (0 turns step caching off)")
    for name in ("max_height", "max_width", "max_steps", "max_frames"):
        if getattr(options, name) < 1:
            raise ConfigError(f"options.{name}", "must be at least 1")
    if options.cpu_offload != "none" and not stage_deploy.device.startswith("cuda"):
        raise ConfigError(
            "options.cpu_offload", f"CPU offload needs a CUDA device, the stage runs on {stage_deploy.device!r}"
        )
    return options


def _convert(data: dict[str, Any]) -> DiffusionOptions:
    try:
        return msgspec.convert(data, DiffusionOptions)
    except msgspec.ValidationError as error:
        message = str(error)
        field = message.rsplit("`$.", 1)[1].rstrip("`") if "`$." in message else ""
        if not field and "unknown field" in message:
            field = message.split("`")[1] if "`" in message else ""
        raise ConfigError(f"options.{field}" if field else "options", message) from None
