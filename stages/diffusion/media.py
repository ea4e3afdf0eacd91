"""Decoded pixels to wire payloads: PNG / JPEG / WebP images, H.264 MP4 videos, or raw arrays.

Payload convention (what `StageOutput.payloads["image"]` / `["video"]` hold):

- an encoded file travels as `Tensor(dtype="uint8", shape=[nbytes], data=<file bytes>)`, and the
  output's `params` say `format` ("png", "jpeg", "webp", "mp4") and `mime_type`;
- `format == "np"` sends the decoded float32 pixels in [0, 1] as they are: shape [H, W, 3] for an
  image, [F, H, W, 3] for a video (for tests and for stages that consume pixels).

MP4 encoding uses PyAV (`av` on PyPI), whose wheels bundle FFmpeg with libx264.
"""

from __future__ import annotations

import io

import numpy as np

from stages.protocol import Tensor

MIME_TYPES = {"png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp", "mp4": "video/mp4", "np": ""}
_PIL_FORMATS = {"png": "PNG", "jpeg": "JPEG", "webp": "WEBP"}


def to_uint8(pixels: np.ndarray) -> np.ndarray:
    return (np.clip(pixels, 0.0, 1.0) * 255).round().astype(np.uint8)


def encode_image(pixels: np.ndarray, output_format: str) -> Tensor:
    """One [H, W, 3] float image in [0, 1] as a payload in `output_format`."""
    if output_format == "np":
        return raw_payload(pixels)
    from PIL import Image

    buffer = io.BytesIO()
    options = {"quality": 95} if output_format in ("jpeg", "webp") else {}
    Image.fromarray(to_uint8(pixels)).save(buffer, format=_PIL_FORMATS[output_format], **options)
    return bytes_payload(buffer.getvalue())


def encode_video(frames: np.ndarray, output_format: str, fps: int) -> Tensor:
    """[F, H, W, 3] float frames in [0, 1] as an H.264 MP4 (yuv420p) or raw payload."""
    if output_format == "np":
        return raw_payload(frames)
    import av

    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.height, stream.width = frames.shape[1], frames.shape[2]
        stream.pix_fmt = "yuv420p"
        for frame in to_uint8(frames):
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return bytes_payload(buffer.getvalue())


def bytes_payload(data: bytes) -> Tensor:
    return Tensor(dtype="uint8", shape=[len(data)], data=data)


def raw_payload(array: np.ndarray) -> Tensor:
    array = np.ascontiguousarray(array, dtype="<f4")
    return Tensor(dtype="float32", shape=list(array.shape), data=array.tobytes())


def payload_array(tensor: Tensor) -> np.ndarray:
    """A raw ("np") payload back as a numpy array."""
    return np.frombuffer(tensor.data, dtype=np.dtype(tensor.dtype).newbyteorder("<")).reshape(tensor.shape)
