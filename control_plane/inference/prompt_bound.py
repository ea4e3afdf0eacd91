"""A prompt that cannot fit a stage's context, found without tokenizing it.

A token of a BPE vocabulary stands for a few characters of text, rarely more than a dozen
and, over a whole prompt, never `chars_per_token` (16 by default) on average outside
contrived input. So a prompt of more than `max_length * chars_per_token` characters surely
has more than `max_length` tokens: it is refused before it reaches a replica, where
tokenizing megabytes would stall every request sharing that replica. Prompts under the
bound are measured exactly by the engine, as before.
"""

from __future__ import annotations

from typing import Any

from stages.protocol import StageRequest


def prompt_char_limit(max_length: int, chars_per_token: float) -> int:
    return int(max_length * chars_per_token)


def prompt_chars(request: StageRequest) -> int:
    """The characters of text a request carries: its prompt and its messages' text parts."""
    total = len(request.prompt or "")
    for message in request.messages or ():
        total += _content_chars(message.get("content") if isinstance(message, dict) else None)
    return total


def _content_chars(content: Any) -> int:
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        return sum(
            len(part.get("text") or "") for part in content if isinstance(part, dict) and part.get("type") == "text"
        )
    return 0


def prompt_overflow(request: StageRequest, max_length: int, chars_per_token: float) -> str | None:
    """Why the request's text surely exceeds `max_length` tokens, or None when it may fit."""
    chars = prompt_chars(request)
    limit = prompt_char_limit(max_length, chars_per_token)
    if chars <= limit:
        return None
    return (
        f"the prompt has {chars} characters, more than this model's context of {max_length} tokens can hold "
        f"(at most {limit} characters)"
    )
