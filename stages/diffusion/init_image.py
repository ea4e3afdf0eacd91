"""The input image of an edit (image-to-image) request, as the diffusion stage receives it.

It travels in `StageRequest.payloads["image"]` as an encoded file (PNG, JPEG, WebP...,
`Tensor(dtype="uint8", shape=[nbytes])`, the media payload convention of media.py) and is
decoded here, so a corrupt one fails its request alone with an error naming `image`.
Alpha is dropped: the image is the starting point of denoising, not a mask.
"""

from __future__ import annotations

import io

from stages.errors import InvalidRequest
from stages.protocol import StageRequest, Tensor

PAYLOAD_KEY = "image"


def read_init_image(request: StageRequest):
    """The request's input image as an RGB PIL image, or None for a text-to-image request."""
    payload = request.payloads.get(PAYLOAD_KEY)
    if payload is None:
        return None
    if not isinstance(payload, Tensor) or payload.dtype != "uint8" or len(payload.shape) != 1:
        raise InvalidRequest(PAYLOAD_KEY, "must be an encoded image file (uint8 bytes)")
    from PIL import Image, UnidentifiedImageError

    try:
        image = Image.open(io.BytesIO(payload.data))
        image.load()
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as error:
        raise InvalidRequest(PAYLOAD_KEY, f"could not be decoded as an image: {error}") from None
    return image.convert("RGB")


def size_from_image(image, multiple: int, max_height: int, max_width: int) -> tuple[int, int]:
    """(height, width) of an edit that asks for no size: the image's own, rounded down to `multiple`."""
    height, width = (max(multiple, side // multiple * multiple) for side in (image.height, image.width))
    if height > max_height or width > max_width:
        raise InvalidRequest(
            PAYLOAD_KEY,
            f"is {image.width}x{image.height}, larger than this deployment renders ({max_width}x{max_height} at most); "
            "send a smaller image or ask for a size",
        )
    return height, width
