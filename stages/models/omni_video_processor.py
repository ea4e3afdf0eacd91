"""The omni processors' video processor without torchvision: `FramesVideoProcessor`.

transformers' `Qwen2VLVideoProcessor` (what `Qwen2_5OmniProcessor` and `Qwen3OmniMoeProcessor`
call for `videos=`) imports torchvision, which does not load beside the CPU torch build. This
stand-in takes videos already decoded, sampled and resized to the patch grid
(stages/models/omni_video_decode.py) and patchifies them with the checkpoint's own
(PIL, torchvision-free) image processor: it rescales and normalises every frame and lays out its
patches in the vision tower's merge order, repeated over the temporal patch; `temporal_patches`
then keeps one copy per frame and pairs consecutive frames into temporal patches, which is
exactly `Qwen2VLVideoProcessor.patchify` (tested against it). The omni processor itself then
expands the `<|VIDEO|>` placeholders from `video_grid_thw`, as for any video processor.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from stages.models.omni_video_limits import checkpoint_limits, video_config


class FramesVideoProcessor:
    model_input_names = ["pixel_values_videos", "video_grid_thw"]

    def __init__(self, image_processor, config: dict[str, Any], processor_class: type):
        self.image_processor = image_processor
        self.patch_size = int(config.get("patch_size", image_processor.patch_size))
        self.merge_size = int(config.get("merge_size", image_processor.merge_size))
        self.temporal_patch_size = int(config.get("temporal_patch_size", image_processor.temporal_patch_size))
        self.normalization = {key: config[key] for key in ("image_mean", "image_std") if key in config}
        self.limits = checkpoint_limits(config, processor_class, self.factor)
        """This checkpoint's defaults (stages/models/omni_video_limits.py)."""

    @property
    def factor(self) -> int:
        """Frame sides are multiples of this: one merged patch."""
        return self.patch_size * self.merge_size

    def __call__(self, videos: list[list[Any]], **_ignored) -> dict[str, np.ndarray]:
        """`videos`: per video its frames (PIL images of one size, sides multiples of `factor`).
        The processor's own video kwargs (size, fps, ...) were applied when the frames were sampled."""
        patches, grids = [], []
        for frames in videos:
            video_patches, grid = self.patchify(frames)
            patches.append(video_patches)
            grids.append(grid)
        return {"pixel_values_videos": np.concatenate(patches), "video_grid_thw": np.array(grids, dtype=np.int64)}

    def patchify(self, frames: list[Any]) -> tuple[np.ndarray, list[int]]:
        """[temporal patches x grid_h x grid_w, channels x temporal x patch x patch] and [t, h, w]."""
        if pad := -len(frames) % self.temporal_patch_size:
            frames = list(frames) + [frames[-1]] * pad  # as transformers does: repeat the last frame
        images = self.image_processor(
            images=frames,
            do_resize=False,
            patch_size=self.patch_size,
            merge_size=self.merge_size,
            temporal_patch_size=self.temporal_patch_size,
            return_tensors="np",
            **self.normalization,
        )
        _, grid_h, grid_w = (int(value) for value in images["image_grid_thw"][0])
        patches = temporal_patches(images["pixel_values"], len(frames), self.temporal_patch_size, self.patch_size)
        return patches, [len(frames) // self.temporal_patch_size, grid_h, grid_w]


def temporal_patches(image_patches: np.ndarray, frames: int, temporal: int, patch: int) -> np.ndarray:
    """Per-frame image patches [frames x cells, C x temporal x p x p] (each frame repeated over
    `temporal`) -> video patches [frames/temporal x cells, C x temporal x p x p] of consecutive frames."""
    cells = image_patches.shape[0] // frames
    per_frame = image_patches.reshape(frames, cells, -1, temporal, patch, patch)[:, :, :, 0]
    grouped = per_frame.reshape(frames // temporal, temporal, cells, -1, patch, patch).transpose(0, 2, 3, 1, 4, 5)
    return np.ascontiguousarray(grouped.reshape(frames // temporal * cells, -1))


def attach_video_processor(processor, model_dir) -> Any:
    """Give a hand-built omni processor (stages.tiny.qwen_omni.load_processor) this video processor."""
    config = video_config(model_dir)
    processor.video_processor = FramesVideoProcessor(processor.image_processor, config, type(processor))
    return processor
