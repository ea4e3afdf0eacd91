"""OpenAI fields this server does not implement: refused by name instead of silently ignored,
so a client relying on them (JSON mode, tool calls, token biasing) learns it at once."""

from __future__ import annotations

from typing import Any

from control_plane.inference.errors import ApiError

NOT_IMPLEMENTED = ("logit_bias", "tools", "tool_choice", "functions", "function_call", "top_logprobs")
PLAIN_RESPONSE_FORMATS = ("text",)


def refuse_unsupported(raw: dict[str, Any]) -> None:
    """A 400 naming the first unsupported field given with a value that would change the output."""
    for name in NOT_IMPLEMENTED:
        if raw.get(name) not in (None, [], {}, "none"):
            raise ApiError.invalid(name, f"'{name}' is not supported by this server.", "unsupported_parameter")
    if raw.get("logprobs") not in (None, False):
        raise ApiError.invalid("logprobs", "'logprobs' is not supported by this server.", "unsupported_parameter")
    response_format = raw.get("response_format")
    if response_format is None:
        return
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind not in PLAIN_RESPONSE_FORMATS:
        raise ApiError.invalid(
            "response_format",
            f"'response_format' of type {kind!r} is not supported by this server; only 'text' is.",
            "unsupported_parameter",
        )
