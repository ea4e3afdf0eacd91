"""A video file (MP4, WebM, MKV, ... bytes) -> the frames a Qwen-Omni thinker sees: `decode_video`.

Decoded with PyAV. Frames are sampled and resized the way Qwen's reference sampler does
(qwen-vl-utils `smart_nframes` / `fetch_video`, also transformers' `Qwen2VLVideoProcessor`):

- count: `limits.fps` frames per second of video, clamped to [min_frames, max_frames] and to the
  frames the video has, rounded down to a multiple of the temporal patch (2); indices spread
  evenly from the first frame to the last. A video of one frame keeps it (the video processor
  repeats it to fill the temporal patch);
- size: `smart_resize` to multiples of one merged patch, within [min_pixels, max_pixels] per
  frame, where max_pixels shrinks to the clip's share of `max_total_pixels` for long clips
  (never below 1.05 x min_pixels); bicubic, as the PIL image processor resizes images;
- the sampled frames stand for `fps = count / total frames x the video's frame rate`, which
  sets `video_second_per_grid` (the temporal M-RoPE step).

Bad input raises InvalidRequest naming the field: data that is not a video, a video without
frames (or frame size), longer than `limits.max_seconds`, with frames larger than
`limits.max_source_pixels` or narrower than 1:200.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import Any

from stages.errors import InvalidRequest
from stages.models.omni_video_limits import VideoLimits

NO_FRAMES = "the video has no frames (empty, or cut short before its first frame)"


@dataclass
class SampledVideo:
    frames: list[Any]
    """PIL RGB images of one size; both sides multiples of the merged patch."""
    fps: float
    """Sampled frames per second of video."""


@dataclass
class VideoFacts:
    frames: int
    frame_rate: float
    width: int
    height: int


def decode_video(data: bytes, field: str, limits: VideoLimits, *, factor: int, temporal: int) -> SampledVideo:
    import av

    try:
        facts = _probe(data, field, limits)
        count = sample_count(facts, limits, temporal)
        height, width = frame_size(facts, limits, count, factor=factor, temporal=temporal)
        indices = sample_indices(facts.frames, count)
        frames = _decode_frames(data, indices, width, height)
    except av.error.EOFError:
        raise InvalidRequest(field, NO_FRAMES) from None
    except av.error.FFmpegError as error:
        raise InvalidRequest(field, f"could not decode the video data: {error}") from None
    except ValueError as error:  # smart_resize refuses aspect ratios beyond 200:1
        raise InvalidRequest(field, f"cannot sample this video: {error}") from None
    if not frames:
        raise InvalidRequest(field, NO_FRAMES)
    return SampledVideo(frames=frames, fps=count / facts.frames * facts.frame_rate)


def _probe(data: bytes, field: str, limits: VideoLimits) -> VideoFacts:
    """The video stream's frame count (its packets, without decoding), frame rate and size."""
    import av

    with av.open(io.BytesIO(data), mode="r") as container:
        if not container.streams.video:
            raise InvalidRequest(field, "the data holds no video stream")
        stream = container.streams.video[0]
        width, height = stream.codec_context.width, stream.codec_context.height
        if not width or not height:
            raise InvalidRequest(field, "the video stream has no frame size")
        if width * height > limits.max_source_pixels:
            raise InvalidRequest(
                field, f"the video's frames are {width}x{height}; at most {limits.max_source_pixels} pixels"
            )
        rate = float(stream.average_rate or stream.guessed_rate or limits.fps)
        _check_seconds(container.duration / 1e6 if container.duration else 0.0, field, limits)
        frames = sum(1 for packet in container.demux(stream) if packet.size)
    if frames == 0:
        raise InvalidRequest(field, NO_FRAMES)
    _check_seconds(frames / rate, field, limits)
    return VideoFacts(frames=frames, frame_rate=rate, width=width, height=height)


def _check_seconds(seconds: float, field: str, limits: VideoLimits) -> None:
    if seconds > limits.max_seconds:
        raise InvalidRequest(field, f"the video is {seconds:.1f} s long; at most {limits.max_seconds:g} s")


def sample_count(facts: VideoFacts, limits: VideoLimits, temporal: int) -> int:
    """qwen-vl-utils' `smart_nframes` for fps sampling; one frame for a one-frame video."""
    ceil_min = math.ceil(limits.min_frames / temporal) * temporal
    floor_max = math.floor(min(limits.max_frames, facts.frames) / temporal) * temporal
    wanted = facts.frames / facts.frame_rate * limits.fps
    count = math.floor(min(max(wanted, ceil_min), floor_max, facts.frames) / temporal) * temporal
    return count or facts.frames


def sample_indices(total: int, count: int) -> list[int]:
    """`count` frame indices spread evenly over [0, total - 1] (qwen-vl-utils' linspace, rounded)."""
    import numpy as np

    return np.linspace(0, total - 1, count).round().astype(int).tolist()


def frame_size(facts: VideoFacts, limits: VideoLimits, count: int, *, factor: int, temporal: int) -> tuple[int, int]:
    """(height, width) of the sampled frames: qwen-vl-utils' `fetch_video` resize."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    clip_share = limits.max_total_pixels / count * temporal
    max_pixels = max(min(limits.max_pixels, clip_share), int(limits.min_pixels * 1.05))
    return smart_resize(facts.height, facts.width, factor=factor, min_pixels=limits.min_pixels, max_pixels=max_pixels)


def _decode_frames(data: bytes, indices: list[int], width: int, height: int) -> list[Any]:
    """The frames at `indices` (ascending, in presentation order), resized; a stream that decodes to
    fewer frames than it has packets ends with its last frame repeated."""
    import av
    from PIL import Image

    frames: list[Any] = []
    wanted = iter(indices)
    target = next(wanted, None)
    with av.open(io.BytesIO(data), mode="r") as container:
        for index, frame in enumerate(container.decode(video=0)):
            if target is None:
                break
            if index != target:
                continue
            image = frame.to_image().convert("RGB").resize((width, height), Image.Resampling.BICUBIC)
            while target == index:
                frames.append(image)
                target = next(wanted, None)
    if frames:
        frames += [frames[-1]] * (len(indices) - len(frames))
    return frames
