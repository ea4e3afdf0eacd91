"""How much audio a request may make: a talker's codes bounded in proportion to the text it speaks.

`max_tokens` bounds the thinker only; a talker that does not stop (or a long answer) would
otherwise speak for minutes. By default a request's audio is capped at `BASE_S` plus
`PER_TEXT_TOKEN_S` per text token the thinker may write, never above `CEILING_S`. A deployment's
`max_audio_seconds` replaces that ceiling; a request's `max_audio_seconds` asks for a cap of its
own, within the deployment's ceiling. The cap becomes the talker's `max_tokens` through the
family's codec frame rate. Pure: no torch, no Django.
"""

from __future__ import annotations

import math

BASE_S = 3.0
PER_TEXT_TOKEN_S = 0.5
CEILING_S = 120.0
CODEC_FRAMES_PER_SECOND = {
    "qwen2_5_omni": 50.0,  # token2wav: two mel frames of 240 samples per code at 24 kHz
    "qwen3_omni": 12.5,  # code2wav: 1920 samples per frame at 24 kHz
}


def audio_seconds_cap(text_tokens: int, *, requested: float | None = None, ceiling: float | None = None) -> float:
    """Seconds of audio a request may make when its thinker writes at most `text_tokens`."""
    ceiling = CEILING_S if ceiling is None else ceiling
    if requested is not None:
        return min(requested, ceiling)
    return min(ceiling, BASE_S + PER_TEXT_TOKEN_S * max(0, text_tokens))


def talker_codes_cap(family: str, seconds: float) -> int | None:
    """The talker's `max_tokens` for `seconds` of audio; None for families without a known codec rate."""
    rate = CODEC_FRAMES_PER_SECOND.get(family)
    if rate is None:
        return None
    return max(1, math.ceil(seconds * rate))
