"""Image-to-image (image edits): denoising starts from the input image noised to `strength`.

As in diffusers' img2img pipelines (`get_timesteps`), a request with `num_inference_steps`
N and strength s runs the last `N - int(N - N * s)` steps of the N-step schedule: its
latents are the VAE-encoded image noised to the first of those timesteps. s = 1 is pure
noise (the full schedule); small s keeps most of the image.

Whole-request batching calls the family's own diffusers img2img pipeline, built from the
loaded pipeline's components (`AutoPipelineForImage2Image.from_pipe`: the same modules, no
second copy of the weights). Step batching does the same inside a `Denoiser`.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

DEFAULT_STRENGTH = 0.6
"""diffusers' img2img default."""


def start_step(num_inference_steps: int, strength: float) -> int:
    """Index of the first step of the schedule an edit runs."""
    noised_steps = min(num_inference_steps * strength, num_inference_steps)
    return int(max(num_inference_steps - noised_steps, 0))


def denoising_steps(num_inference_steps: int, strength: float | None) -> int:
    """How many steps a request runs (all of them without a strength)."""
    if strength is None:
        return num_inference_steps
    return num_inference_steps - start_step(num_inference_steps, strength)


def skip_to_strength(scheduler, num_inference_steps: int, strength: float):
    """The part of `scheduler`'s (already set) timesteps an edit runs; the scheduler starts there."""
    begin = start_step(num_inference_steps, strength) * scheduler.order
    if hasattr(scheduler, "set_begin_index"):
        scheduler.set_begin_index(begin)
    return scheduler.timesteps[begin:]


def image_to_image_pipeline(pipe):
    """diffusers' img2img pipeline over `pipe`'s components, or None when the family has none.

    It gets its own scheduler (no weights) so that its calls never touch `pipe`'s state.
    """
    from diffusers import AutoPipelineForImage2Image

    scheduler = type(pipe.scheduler).from_config(pipe.scheduler.config)
    try:
        edit_pipe = AutoPipelineForImage2Image.from_pipe(pipe, scheduler=scheduler)
    except ValueError as error:  # no img2img counterpart in diffusers (e.g. PixArt-Sigma, Wan)
        logger.info("%s has no image-to-image pipeline: %s", type(pipe).__name__, error)
        return None
    edit_pipe.set_progress_bar_config(disable=True)
    return edit_pipe
