"""OpenAI's voice names and what they mean on a deployment, for every interface that speaks.

OpenAI's voices (`alloy` ... `verse`) are not the models' (Qwen-Omni has Chelsie and Ethan). A request
naming one is refused at the API with the list of the model's voices (request_voice.py), unless the
deployment sets `map_openai_voices` (DeployConfig, docs/voices.md): then it speaks with the model's
default voice.
"""

from __future__ import annotations

from stages.config import DeployConfig

OPENAI_VOICES = ("alloy", "ash", "ballad", "cedar", "coral", "echo", "fable", "marin", "nova", "onyx", "sage",
                 "shimmer", "verse")  # fmt: skip


def resolve_voice(deploy: DeployConfig, voice: str | None) -> str | None:
    """The voice the stages get: None (their default) for an OpenAI name when the deployment maps them."""
    if voice and deploy.map_openai_voices and voice.lower() in OPENAI_VOICES:
        return None
    return voice
