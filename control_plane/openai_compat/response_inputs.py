"""The body of POST /v1/responses and its `input` turned into chat messages for the stages.

`input` is a string (one user message) or a list of items: messages (`{"role", "content"}`, with
or without `"type": "message"`) whose content is a string or parts: `input_text` / `output_text`,
`input_image` (`image_url` as a data URL or an http(s) URL), `input_audio` (`{data, format}`).
Other item types (tool calls and their outputs, file parts, item references) are refused with a
400 naming the item. `instructions` go first as a system message, for this response only.
"""

from __future__ import annotations

from typing import Any

import msgspec

from control_plane.inference.errors import ApiError
from control_plane.openai_compat.chat import AudioOptions
from control_plane.openai_compat.chat_inputs import prepare_messages

ROLES = ("user", "assistant", "system", "developer")
MAX_OUTPUT_TOKENS_FLOOR = 16  # OpenAI's minimum for max_output_tokens


class TextFormat(msgspec.Struct, kw_only=True):
    type: str = "text"


class TextOptions(msgspec.Struct, kw_only=True):
    format: TextFormat | None = None


class ResponseRequest(msgspec.Struct, kw_only=True):
    model: str
    input: str | list[Any]
    instructions: str | None = None
    previous_response_id: str | None = None
    store: bool = True
    stream: bool | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = None
    seed: int | None = None
    metadata: dict[str, str] | None = None
    modalities: list[str] | None = None
    audio: AudioOptions | None = None
    text: TextOptions | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    background: bool | None = None
    user: str | None = None


def validate(body: ResponseRequest) -> None:
    if body.temperature is not None and not 0 <= body.temperature <= 2:
        raise ApiError.invalid("temperature", f"'temperature' must be between 0 and 2, got {body.temperature}.")
    if body.top_p is not None and not 0 < body.top_p <= 1:
        raise ApiError.invalid("top_p", f"'top_p' must be in (0, 1], got {body.top_p}.")
    if body.max_output_tokens is not None and body.max_output_tokens < MAX_OUTPUT_TOKENS_FLOOR:
        raise ApiError.invalid("max_output_tokens", f"'max_output_tokens' must be at least {MAX_OUTPUT_TOKENS_FLOOR}, "
                               f"got {body.max_output_tokens}.")  # fmt: skip
    if body.tools:
        raise ApiError(400, "Tools are not supported by this server; leave 'tools' out.", param="tools",
                       code="unsupported_parameter")  # fmt: skip
    if body.background:
        raise ApiError(400, "Background responses are not supported; leave 'background' out.", param="background",
                       code="unsupported_parameter")  # fmt: skip
    if body.text and body.text.format and body.text.format.type != "text":
        raise ApiError(400, f"Only the 'text' format is supported, not {body.text.format.type!r}.",
                       param="text.format.type", code="unsupported_value")  # fmt: skip
    if isinstance(body.input, str) and not body.input.strip() or isinstance(body.input, list) and not body.input:
        raise ApiError.invalid("input", "'input' cannot be empty.")


def input_messages(value: str | list[Any]) -> list[dict[str, Any]]:
    """The items of `input` as chat messages (before their media are checked)."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    return [_message(item, f"input[{index}]") for index, item in enumerate(value)]


def _message(item: Any, param: str) -> dict[str, Any]:
    if isinstance(item, str):
        return {"role": "user", "content": item}
    if not isinstance(item, dict):
        raise ApiError.invalid(param, f"'{param}' must be a message object or a string.", "invalid_type")
    kind = item.get("type", "message")
    if kind != "message":
        raise ApiError(400, f"Input items of type {kind!r} are not supported here (only messages).",
                       param=f"{param}.type", code="unsupported_value")  # fmt: skip
    role = item.get("role")
    if role not in ROLES:
        raise ApiError.invalid(f"{param}.role", f"Invalid value for '{param}.role': {role!r}; expected one of {ROLES}.")
    content = item.get("content")
    if isinstance(content, str):
        return {"role": role, "content": content}
    if not isinstance(content, list) or not content:
        raise ApiError.invalid(f"{param}.content", f"'{param}.content' must be a string or a non-empty array of "
                               "content parts.", "invalid_type")  # fmt: skip
    return {"role": role, "content": [_part(part, f"{param}.content[{index}]") for index, part in enumerate(content)]}


def _part(part: Any, param: str) -> dict[str, Any]:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind in ("input_text", "output_text", "text"):
        if not isinstance(part.get("text"), str):
            raise ApiError.invalid(f"{param}.text", f"'{param}.text' must be a string.", "invalid_type")
        return {"type": "text", "text": part["text"]}
    if kind == "input_image":
        url = part.get("image_url")
        if not isinstance(url, str) or not url:
            raise ApiError.invalid(f"{param}.image_url", f"'{param}.image_url' must be a data URL or an http(s) URL.")
        return {"type": "image_url", "image_url": {"url": url}}
    if kind == "input_audio":
        return {"type": "input_audio", "input_audio": part.get("input_audio")}
    raise ApiError(400, f"Unsupported content part type {kind!r} (input_text, input_image, input_audio).",
                   param=f"{param}.type", code="unsupported_value")  # fmt: skip


async def checked_messages(messages: list[dict[str, Any]], first_index: int) -> list[dict[str, Any]]:
    """The new input's messages with their media checked (remote ones fetched); errors name the
    `input` item (`first_index`: where the new items start among the messages checked)."""
    try:
        return await prepare_messages(messages)
    except ApiError as error:
        error.param = _input_param(error.param, first_index)
        error.message = error.message.replace("messages[", "input[")
        raise


def _input_param(param: str | None, first_index: int) -> str | None:
    if not param or not param.startswith("messages["):
        return param
    index, _, rest = param[len("messages[") :].partition("]")
    rest = rest.replace(".image_url.url", ".image_url")
    return f"input[{int(index) - first_index}]{rest}"


def text_only(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Earlier turns as they are kept with the history (media summarised): their text parts."""
    kept = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content if part.get("type") == "text")
        if content:
            kept.append({"role": message.get("role"), "content": content})
    return kept
