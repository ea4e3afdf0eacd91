"""A custom voice's conditioning as it travels with a request: request params `voice_conditioning`.

A family that takes a reference clip (Qwen2.5-Omni) derives from it what its audio stages are
conditioned on per speaker (stages/models/qwen2_5_voice_reference.py): the talker's speaker bos
token, and token2wav's speaker embedding `cond` and reference mel `ref_mel`. The control plane
stores that with the user's voice and sends it inline with each request that names the voice;
the talker and code2wav read it instead of a built-in speaker's entry. Torch-free: the control
plane builds it from the stored arrays.
"""

from __future__ import annotations

from typing import Any

import msgspec

from stages.errors import InvalidRequest
from stages.protocol import Tensor

PARAM = "voice_conditioning"


class VoiceConditioning(msgspec.Struct, frozen=True, kw_only=True):
    bos_token: int
    """The talker's speaker token (a row of the thinker's embedding the talker starts from)."""
    cond: Tensor
    """token2wav's speaker embedding, [1, enc_emb_dim] float32."""
    ref_mel: Tensor
    """token2wav's reference mel, [1, frames, mel_dim] float32."""
    nearest: str = ""
    """The built-in voice whose bos token and embedding it uses (the derivation's choice)."""


def conditioning_params(conditioning: VoiceConditioning) -> dict[str, Any]:
    """The conditioning as a request param value (plain types: it survives msgpack)."""
    return msgspec.to_builtins(conditioning, builtin_types=(bytes,))


def conditioning_of(params: dict[str, Any]) -> VoiceConditioning | None:
    """The request's custom-voice conditioning, or None when it names a built-in voice (or none)."""
    value = params.get(PARAM)
    if value is None or isinstance(value, VoiceConditioning):
        return value
    try:
        return msgspec.convert(value, VoiceConditioning)
    except msgspec.ValidationError as error:
        raise InvalidRequest(PARAM, f"malformed voice conditioning: {error}") from None
