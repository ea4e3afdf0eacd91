"""Synthetic video clips for the tests, encoded with PyAV."""

from __future__ import annotations

import base64
import io

import numpy as np


def video_bytes(
    seed: int = 0, *, seconds: float = 2.0, rate: int = 10, size: int = 56, fmt: str = "mp4", codec: str = "libx264"
) -> bytes:
    """A clip whose colour (drawn from `seed`) shifts every frame while a white bar moves across."""
    import av

    rng = np.random.default_rng(seed)
    colour = rng.integers(0, 255, size=3)
    buffer = io.BytesIO()
    with av.open(buffer, "w", format=fmt) as container:
        stream = container.add_stream(codec, rate=rate)
        stream.width = stream.height = size
        stream.pix_fmt = "yuv420p"
        for index in range(round(seconds * rate)):
            frame = np.empty((size, size, 3), dtype=np.uint8)
            frame[...] = (colour + 20 * index) % 255
            start = 4 * index % size
            frame[:, start : start + 8] = 255
            container.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        container.mux(stream.encode())
    return buffer.getvalue()


def video_b64(seed: int = 0, **kwargs) -> str:
    return base64.b64encode(video_bytes(seed, **kwargs)).decode()


def video_data_url(seed: int = 0, **kwargs) -> str:
    return f"data:video/mp4;base64,{video_b64(seed, **kwargs)}"


def empty_video_bytes() -> bytes:
    """A Matroska file with a video stream and no frames."""
    import av

    buffer = io.BytesIO()
    container = av.open(buffer, "w", format="matroska")
    stream = container.add_stream("mpeg4", rate=10)
    stream.width = stream.height = 56
    stream.pix_fmt = "yuv420p"
    container.start_encoding()
    container.close()
    return buffer.getvalue()
