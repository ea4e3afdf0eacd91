"""How a Qwen-Omni thinker samples a video part, and how much video it accepts: `VideoLimits`.

Defaults per checkpoint (`checkpoint_limits`), key by key: the checkpoint's
`video_preprocessor_config.json` where it sets one (`fps`, `min_frames`, `max_frames`, per-frame
`min_pixels`/`max_pixels` or `size`); else the per-frame `size` the checkpoint's processor class
passes its video processor (Qwen2.5-Omni 128..768 x 28^2 pixels, Qwen3-Omni 128..768 x 32^2);
else the values of Qwen's reference sampler (qwen-vl-utils): 2 frames per second, 4..768 frames,
and a whole-clip budget of 0.9 x 128000 tokens' worth of pixels. transformers' processors pass
their class defaults over the checkpoint's own video config at call time; here the checkpoint
wins, so a small checkpoint can ask for small frames.

A deployment overrides any field for its thinker with `StageDeployConfig.options["video"]`,
e.g. `{"max_frames": 64, "max_seconds": 60}` (`deployed_limits`, given the thinker stage's deploy
config by `family.prepare_request`; the thinker's builder checks the options once, so bad ones
fail the build).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stages.errors import ConfigError

REFERENCE_TOKENS = 128000
"""The context length qwen-vl-utils (and transformers' `max_video_tokens`) derive the clip budget from."""


@dataclass(frozen=True)
class VideoLimits:
    fps: float = 2.0
    """Frames sampled per second of video."""
    min_frames: int = 4
    max_frames: int = 768
    """At most this many frames, spread evenly over the whole clip."""
    min_pixels: int = 128 * 28 * 28
    max_pixels: int = 768 * 28 * 28
    """Bounds of one sampled frame's area after resizing."""
    max_total_pixels: int = int(0.9 * REFERENCE_TOKENS * 28 * 28)
    """Budget of the whole clip: long clips get smaller frames (never below 1.05 x min_pixels)."""
    max_seconds: float = 600.0
    """Longer videos are refused."""
    max_source_pixels: int = 7680 * 4320
    """Videos whose frames are larger than this (8K) are refused."""

    def with_options(self, options: dict[str, Any], field: str) -> VideoLimits:
        known = sorted(item.name for item in dataclasses.fields(self))
        changes = {}
        for key, value in options.items():
            if key not in known:
                raise ConfigError(f"{field}.{key}", f"unknown video limit; known: {known}")
            whole = isinstance(getattr(self, key), int)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ConfigError(f"{field}.{key}", f"must be a positive number, got {value!r}")
            if whole and value != int(value):
                raise ConfigError(f"{field}.{key}", f"must be a whole number, got {value!r}")
            changes[key] = int(value) if whole else float(value)
        limits = dataclasses.replace(self, **changes)
        if limits.min_pixels > limits.max_pixels or limits.min_frames > limits.max_frames:
            raise ConfigError(field, "min_pixels/min_frames must not exceed max_pixels/max_frames")
        return limits


def deployed_limits(defaults: VideoLimits, options: dict[str, Any]) -> VideoLimits:
    """The thinker stage's `options["video"]` over the checkpoint's defaults."""
    video = options.get("video") or {}
    if not isinstance(video, dict):
        raise ConfigError("options.video", "must be an object of video limits")
    return defaults.with_options(video, "options.video")


def checkpoint_limits(config: dict[str, Any], processor_class: type, factor: int) -> VideoLimits:
    """The defaults of one checkpoint: its video config over its processor class's over Qwen's."""
    size = {**_processor_frame_size(processor_class), **config.get("size", {})}
    defaults = VideoLimits(
        min_pixels=int(config.get("min_pixels", size.get("shortest_edge", 128 * factor * factor))),
        max_pixels=int(config.get("max_pixels", size.get("longest_edge", 768 * factor * factor))),
        max_total_pixels=int(0.9 * REFERENCE_TOKENS * factor * factor),
    )
    sampling = {key: config[key] for key in ("fps", "min_frames", "max_frames") if config.get(key) is not None}
    return defaults.with_options(sampling, "video_preprocessor_config.json")


def video_config(model_dir: str | Path) -> dict[str, Any]:
    path = Path(model_dir) / "video_preprocessor_config.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def _processor_frame_size(processor_class: type) -> dict[str, int]:
    kwargs = getattr(processor_class, "valid_processor_kwargs", None)
    defaults = getattr(kwargs, "_defaults", None) or {}
    return dict(defaults.get("videos_kwargs", {}).get("size") or {})
