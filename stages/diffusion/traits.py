"""Size rules and defaults of a diffusers pipeline without a step-batching denoiser.

Read from the pipeline itself: the VAE's spatial (and temporal) downscale, the
transformer's patch size, and the defaults of its `__call__` signature.
"""

from __future__ import annotations

import inspect

from stages.diffusion.params import PipelineTraits

FALLBACK_SIZE = 512


def pipeline_traits(pipe) -> PipelineTraits:
    defaults = {
        name: parameter.default
        for name, parameter in inspect.signature(pipe.__call__).parameters.items()
        if parameter.default is not inspect.Parameter.empty
    }
    spatial = getattr(pipe, "vae_scale_factor_spatial", None) or getattr(pipe, "vae_scale_factor", 8)
    is_video = "num_frames" in defaults
    return PipelineTraits(
        size_multiple=spatial * _patch_size(pipe),
        default_height=defaults.get("height") or _default_size(pipe, spatial),
        default_width=defaults.get("width") or _default_size(pipe, spatial),
        default_steps=defaults.get("num_inference_steps") or 28,
        default_guidance=float(defaults.get("guidance_scale") or 5.0),
        is_video=is_video,
        frame_multiple=getattr(pipe, "vae_scale_factor_temporal", 1) if is_video else 1,
        default_frames=defaults.get("num_frames") or 1,
    )


def _patch_size(pipe) -> int:
    denoiser = getattr(pipe, "transformer", None) or getattr(pipe, "unet", None)
    patch = getattr(getattr(denoiser, "config", None), "patch_size", None) or 1
    return patch[-1] if isinstance(patch, list | tuple) else int(patch)


def _default_size(pipe, spatial: int) -> int:
    sample_size = getattr(getattr(getattr(pipe, "transformer", None), "config", None), "sample_size", None)
    return sample_size * spatial if isinstance(sample_size, int) else FALLBACK_SIZE
