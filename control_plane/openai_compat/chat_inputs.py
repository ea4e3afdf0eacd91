"""Chat messages as OpenAI sends them, checked and made self-contained for the stages.

Content parts: `text`, `image_url` {url, detail}, `input_audio` {data, format},
`video_url` {url}, `video` {video: url} (vLLM's form). Media come as data URLs (or base64 for
`input_audio`) or as http(s) URLs, which are fetched here, bounded in size (`MAX_MEDIA_BYTES`),
only when `settings.FETCH_MEDIA_URLS` is on (optionally limited to `MEDIA_URL_HOSTS`; never
from private addresses: media_fetch.py), and turned into data URLs, so the stages never reach the network. Images and audio are decoded once here, so a corrupt one is a 400 naming its part
instead of an engine error. Videos are only checked for type, base64 and size: decoding them
needs PyAV and the thinker's sampling limits, so the thinker's host does it, and a bad video
fails there with an invalid-request error naming the same part (a 400).

`summarize` gives the history row a copy without the media bytes.
"""

from __future__ import annotations

import base64
import binascii
import io
import logging
import re
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from control_plane.inference.errors import ApiError
from control_plane.openai_compat.media_fetch import FetchRefused, MediaTooLarge, fetch_media

log = logging.getLogger(__name__)
ROLES = ("system", "developer", "user", "assistant", "tool")
_DATA_URL = re.compile(
    r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(;[\w-]+=[^;,]*)*)(?P<b64>;base64)?,(?P<data>.*)$", re.S
)
AUDIO_INPUT_FORMATS = ("wav", "mp3", "flac", "ogg", "opus", "pcm16", "webm", "m4a", "aac")


def max_media_bytes() -> int:
    return int(getattr(settings, "MAX_MEDIA_BYTES", 10 * 1024 * 1024))


def fetch_allowed(url: str) -> bool:
    """Whether this URL may be fetched at all; every hop's host and address are checked again
    as it is fetched (media_fetch.py)."""
    if not getattr(settings, "FETCH_MEDIA_URLS", False):
        return False
    hosts = list(getattr(settings, "MEDIA_URL_HOSTS", []) or [])
    return not hosts or (urlsplit(url).hostname or "") in hosts


def invalid(param: str, message: str, code: str = "invalid_value") -> ApiError:
    return ApiError(400, message, param=param, code=code)


async def prepare_messages(messages: Any) -> list[dict[str, Any]]:
    """The messages, validated, with remote media fetched and text-only lists flattened."""
    if not isinstance(messages, list) or not messages:
        raise invalid("messages", "'messages' must be a non-empty array of message objects.")
    prepared = []
    for index, message in enumerate(messages):
        param = f"messages[{index}]"
        if not isinstance(message, dict):
            raise invalid(param, f"'{param}' must be an object with 'role' and 'content'.", "invalid_type")
        role = message.get("role")
        if role not in ROLES:
            raise invalid(f"{param}.role", f"Invalid value for '{param}.role': {role!r}; expected one of {ROLES}.")
        content = message.get("content")
        if content is None and role == "assistant":
            content = ""
        prepared.append({**message, "content": await _content(content, f"{param}.content")})
    return prepared


async def _content(content: Any, param: str) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    if not isinstance(content, list) or not content:
        raise invalid(param, f"'{param}' must be a string or a non-empty array of content parts.", "invalid_type")
    parts = [await _part(part, f"{param}[{index}]") for index, part in enumerate(content)]
    if all(part["type"] == "text" for part in parts):
        return "".join(part["text"] for part in parts)
    return parts


async def _part(part: Any, param: str) -> dict[str, Any]:
    if not isinstance(part, dict) or not isinstance(part.get("type"), str):
        raise invalid(param, f"'{param}' must be an object with a 'type'.", "invalid_type")
    kind = part["type"]
    if kind == "text":
        if not isinstance(part.get("text"), str):
            raise invalid(f"{param}.text", f"'{param}.text' must be a string.", "invalid_type")
        return {"type": "text", "text": part["text"]}
    if kind == "image_url":
        url = _url_of(part, "image_url", param)
        data_url = await _media_data_url(url, f"{param}.image_url.url", "image")
        _check_image(data_url, f"{param}.image_url.url")
        return {"type": "image_url", "image_url": {"url": data_url}}
    if kind == "input_audio":
        audio = part.get("input_audio")
        if not isinstance(audio, dict) or not isinstance(audio.get("data"), str):
            raise invalid(f"{param}.input_audio", f"'{param}.input_audio' must be an object with base64 'data'.")
        fmt = audio.get("format", "wav")
        if fmt not in AUDIO_INPUT_FORMATS:
            raise invalid(
                f"{param}.input_audio.format",
                f"Unsupported input audio format {fmt!r}; use one of {AUDIO_INPUT_FORMATS}.",
            )
        raw = _b64(audio["data"], f"{param}.input_audio.data")
        _check_audio(raw, fmt, f"{param}.input_audio.data")
        return {
            "type": "input_audio",
            "input_audio": {"data": audio["data"].partition(",")[2] or audio["data"], "format": fmt},
        }
    if kind == "video_url":
        url = _url_of(part, "video_url", param)
        return {
            "type": "video_url",
            "video_url": {"url": await _media_data_url(url, f"{param}.video_url.url", "video")},
        }
    if kind == "video":
        url = part.get("video")
        if not isinstance(url, str) or not url:
            raise invalid(f"{param}.video", f"'{param}.video' must be a data URL or an http(s) URL.")
        return {"type": "video", "video": await _media_data_url(url, f"{param}.video", "video")}
    raise invalid(
        f"{param}.type", f"Unsupported content part type {kind!r} (text, image_url, input_audio, video_url, video)."
    )


def _url_of(part: dict[str, Any], key: str, param: str) -> str:
    value = part.get(key)
    url = value.get("url") if isinstance(value, dict) else value if isinstance(value, str) else None
    if not isinstance(url, str) or not url:
        raise invalid(f"{param}.{key}.url", f"'{param}.{key}.url' must be a data URL or an http(s) URL.")
    return url


async def _media_data_url(url: str, param: str, kind: str) -> str:
    if url.startswith("data:"):
        match = _DATA_URL.match(url)
        if not match or not match.group("b64"):
            raise invalid(param, f"'{param}' is not a base64 data URL (data:<mime>;base64,<data>).", "invalid_data_url")
        mime = match.group("mime") or ""
        if not mime.startswith(f"{kind}/"):
            raise invalid(param, f"'{param}' must be a data URL of a {kind} ({kind}/...), got {mime or 'no type'}.")
        raw = _b64(match.group("data"), param)
        if not raw:
            raise invalid(param, f"'{param}' holds no data.", "invalid_data_url")
        return url
    scheme = urlsplit(url).scheme
    if scheme not in ("http", "https"):
        raise invalid(param, f"'{param}' must be a data URL or an http(s) URL, got scheme {scheme or 'none'!r}.")
    if not fetch_allowed(url):
        raise invalid(
            param,
            f"Fetching media from URLs is not enabled on this server for {urlsplit(url).hostname}; "
            f"send the {kind} inline as a base64 data URL.",
            "url_fetch_disabled",
        )
    data, mime = await _fetch(url, param)
    if not mime.startswith(f"{kind}/"):
        raise invalid(param, f"'{param}' returned {mime or 'no content type'}, not a {kind}.")
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


async def _fetch(url: str, param: str) -> tuple[bytes, str]:
    limit = max_media_bytes()
    try:
        return await fetch_media(url, limit)
    except MediaTooLarge:
        raise ApiError(413, f"'{param}' is larger than {limit} bytes.", param=param, code="media_too_large") from None
    except FetchRefused as why:
        log.info("media URL of %s not fetched: %s", param, why)
        raise invalid(param, f"Could not fetch '{param}'.", "url_fetch_failed") from None


def _b64(value: str, param: str) -> bytes:
    if value.startswith("data:"):
        value = value.partition(",")[2]
    if len(value) * 3 // 4 > max_media_bytes():
        raise ApiError(413, f"'{param}' is larger than {max_media_bytes()} bytes.", param=param, code="media_too_large")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise invalid(param, f"'{param}' is not valid base64.", "invalid_base64") from None


def decode_image_bytes(raw: bytes, param: str):
    from PIL import Image, UnidentifiedImageError

    try:
        image = Image.open(io.BytesIO(raw))
        image.load()
    except Image.DecompressionBombError as error:
        raise ApiError(413, f"'{param}' has too many pixels: {error}", param=param, code="media_too_large") from None
    except (UnidentifiedImageError, OSError, ValueError):
        # PIL's text names its in-memory file object (`<_io.BytesIO object at 0x...>`): not for clients
        raise invalid(param, f"'{param}' could not be decoded as an image.", "invalid_image") from None
    return image


def _check_image(data_url: str, param: str) -> None:
    decode_image_bytes(_b64(data_url, param), param)


def _check_audio(raw: bytes, fmt: str, param: str) -> None:
    if fmt == "pcm16":
        if len(raw) % 2:
            raise invalid(param, f"'{param}' is not 16-bit PCM (odd byte count).", "invalid_audio")
        return
    import soundfile

    try:
        soundfile.info(io.BytesIO(raw))
    except Exception:  # libsndfile raises its own error types, whose text names the in-memory file
        raise invalid(param, f"'{param}' could not be decoded as {fmt} audio.", "invalid_audio") from None


def summarize(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages for the history row: media replaced by their type and size."""
    summary = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = [_part_summary(part) for part in content]
        summary.append({"role": message.get("role"), "content": content})
    return summary


def _part_summary(part: dict[str, Any]) -> dict[str, Any]:
    kind = part.get("type")
    if kind == "text":
        return part
    if kind in ("image_url", "video_url"):
        return {"type": kind, kind: {"url": _data_url_summary(part[kind]["url"])}}
    if kind == "video":
        return {"type": kind, kind: _data_url_summary(part[kind])}
    if kind == "input_audio":
        return {
            "type": kind,
            "format": part["input_audio"].get("format"),
            "bytes": len(part["input_audio"]["data"]) * 3 // 4,
        }
    return {"type": kind}


def _data_url_summary(url: str) -> str:
    return f"<{url[5:].split(';')[0]} data, {len(url) * 3 // 4} bytes>"
