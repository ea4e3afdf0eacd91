"""A session's configuration: applied from `session.update` (GA nested or beta flat fields)
and rendered in GA shape for `session.created` / `session.updated`.

What is rendered is what is in effect: settings we cannot honour (input transcription,
noise reduction: no such model in the pipeline) are accepted and shown as null.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from control_plane.realtime.audio_formats import PCM, AudioFormat, FormatError, parse_format
from control_plane.realtime.events import ProtocolError

MODEL_INPUT_RATE = 16000  # the omni thinkers' audio feature extractors take 16 kHz
SERVER_VAD_DEFAULTS = {
    "type": "server_vad",
    "threshold": 0.5,
    "prefix_padding_ms": 300,
    "silence_duration_ms": 500,
    "create_response": True,
    "interrupt_response": True,
    "idle_timeout_ms": None,
}
BETA_FIELDS = ("modalities", "voice", "input_audio_format", "output_audio_format", "turn_detection",
               "input_audio_transcription", "temperature", "max_response_output_tokens")  # fmt: skip


@dataclass
class SessionConfig:
    id: str
    model: str
    expires_at: int
    instructions: str = ""
    output_modalities: list[str] = field(default_factory=lambda: ["audio"])
    input_format: AudioFormat = PCM
    output_format: AudioFormat = PCM
    turn_detection: dict[str, Any] | None = field(default_factory=lambda: dict(SERVER_VAD_DEFAULTS))
    voice: str | None = None
    speed: float = 1.0
    temperature: float | None = None
    max_output_tokens: int | str = "inf"
    truncation: str | dict[str, Any] = "auto"
    model_output_rate: int | None = None

    # ------------------------------------------------------------------ update

    def update(self, session: Any) -> None:
        """Apply a `session.update`'s `session` object; ProtocolError (nothing applied) if invalid."""
        if not isinstance(session, dict):
            raise ProtocolError("'session' must be an object.", param="session")
        staged = SessionConfig(**{name: getattr(self, name) for name in self.__dataclass_fields__})
        staged._apply(session)
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(staged, name))

    def _apply(self, session: dict) -> None:
        kind = session.get("type", "realtime")
        if kind != "realtime":
            raise ProtocolError(
                f"Invalid 'session.type': {kind!r}; only 'realtime' sessions are served here.", param="session.type"
            )
        if "instructions" in session:
            self.instructions = _string(session["instructions"], "session.instructions")
        if "output_modalities" in session:
            self.output_modalities = _modalities(session["output_modalities"], "session.output_modalities")
        if "modalities" in session:
            self.output_modalities = _modalities(session["modalities"], "session.modalities")
        if session.get("tools"):
            raise ProtocolError("Tools are not supported by this server.", param="session.tools")
        if "max_output_tokens" in session:
            self.max_output_tokens = _max_tokens(session["max_output_tokens"], "session.max_output_tokens")
        if "max_response_output_tokens" in session:
            self.max_output_tokens = _max_tokens(
                session["max_response_output_tokens"], "session.max_response_output_tokens"
            )
        if "temperature" in session:
            self.temperature = _number(session["temperature"], "session.temperature", 0.0, 2.0)
        if "truncation" in session:
            self.truncation = _truncation(session["truncation"], "session.truncation")
        self._apply_audio(session)

    def _apply_audio(self, session: dict) -> None:
        audio = session.get("audio") or {}
        if not isinstance(audio, dict):
            raise ProtocolError("'session.audio' must be an object.", param="session.audio")
        audio_in, audio_out = audio.get("input") or {}, audio.get("output") or {}
        if "format" in audio_in:
            self.input_format = _format(audio_in["format"], "session.audio.input.format")
        if "input_audio_format" in session:
            self.input_format = _format(session["input_audio_format"], "session.input_audio_format")
        if "format" in audio_out:
            self.output_format = _format(audio_out["format"], "session.audio.output.format")
        if "output_audio_format" in session:
            self.output_format = _format(session["output_audio_format"], "session.output_audio_format")
        if "turn_detection" in audio_in:
            self.turn_detection = _turn_detection(audio_in["turn_detection"], "session.audio.input.turn_detection")
        if "turn_detection" in session:
            self.turn_detection = _turn_detection(session["turn_detection"], "session.turn_detection")
        for holder, name in ((audio_out, "session.audio.output.voice"), (session, "session.voice")):
            if "voice" in holder:
                self.voice = _string(holder["voice"], name) or None
        if "speed" in audio_out:
            self.speed = _number(audio_out["speed"], "session.audio.output.speed", 0.25, 1.5)

    # ------------------------------------------------------------------ render

    def ga(self) -> dict:
        return {
            "type": "realtime",
            "object": "realtime.session",
            "id": self.id,
            "model": self.model,
            "output_modalities": list(self.output_modalities),
            "instructions": self.instructions,
            "audio": {
                "input": {
                    "format": self.input_format.ga(),
                    "transcription": None,
                    "noise_reduction": None,
                    "turn_detection": dict(self.turn_detection) if self.turn_detection else None,
                },
                "output": {"format": self.output_format.ga(), "voice": self.voice, "speed": self.speed},
            },
            "tools": [],
            "tool_choice": "auto",
            "max_output_tokens": self.max_output_tokens,
            "tracing": None,
            "truncation": dict(self.truncation) if isinstance(self.truncation, dict) else self.truncation,
            "prompt": None,
            "include": None,
            "expires_at": self.expires_at,
            # how audio is converted at the edge (an extension: the model's own rates)
            "omnistage": {
                "model_input_rate": MODEL_INPUT_RATE,
                "model_output_rate": self.model_output_rate,
                "input_rate": self.input_format.rate,
                "output_rate": self.output_format.rate,
            },
        }

    @property
    def server_vad(self) -> bool:
        return bool(self.turn_detection) and self.turn_detection["type"] == "server_vad"


def _string(value: Any, param: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ProtocolError(f"Invalid '{param}': expected a string.", param=param)
    return value


def _number(value: Any, param: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ProtocolError(f"Invalid '{param}': expected a number in [{low}, {high}].", param=param)
    return float(value)


def _modalities(value: Any, param: str) -> list[str]:
    if not isinstance(value, list) or not value or any(m not in ("text", "audio") for m in value):
        raise ProtocolError(f"Invalid '{param}': expected ['audio'] or ['text'].", param=param)
    return ["audio"] if "audio" in value else ["text"]


def _max_tokens(value: Any, param: str) -> int | str:
    if value == "inf":
        return "inf"
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 4096:
        raise ProtocolError(f"Invalid '{param}': expected an integer in [1, 4096] or 'inf'.", param=param)
    return value


def _truncation(value: Any, param: str) -> str | dict[str, Any]:
    """ "auto", "disabled" or `{"type": "retention_ratio", "retention_ratio": r, "token_limits":
    {"post_instructions": n}}` (OpenAI's shapes)."""
    if value in ("auto", "disabled"):
        return value
    if not isinstance(value, dict) or value.get("type") != "retention_ratio":
        raise ProtocolError(f"Invalid '{param}': expected 'auto', 'disabled' or a retention_ratio object.",
                            param=param)  # fmt: skip
    ratio = _number(value.get("retention_ratio"), f"{param}.retention_ratio", 0.0, 1.0)
    truncation: dict[str, Any] = {"type": "retention_ratio", "retention_ratio": ratio}
    limits = value.get("token_limits")
    if limits is not None:
        limit = limits.get("post_instructions") if isinstance(limits, dict) else None
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ProtocolError(f"Invalid '{param}.token_limits.post_instructions': expected a positive integer.",
                                param=f"{param}.token_limits.post_instructions")  # fmt: skip
        truncation["token_limits"] = {"post_instructions": limit}
    return truncation


def _format(value: Any, param: str) -> AudioFormat:
    try:
        return parse_format(value, param)
    except FormatError as error:
        raise ProtocolError(str(error), param=param, code="invalid_audio_format") from None


def _turn_detection(value: Any, param: str) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ProtocolError(f"Invalid '{param}': expected an object or null.", param=param)
    kind = value.get("type", "server_vad")
    if kind != "server_vad":
        raise ProtocolError(
            f"Invalid '{param}.type': {kind!r} is not supported; use 'server_vad' or null (manual turns).",
            param=f"{param}.type",
        )
    merged = {**SERVER_VAD_DEFAULTS, **{k: v for k, v in value.items() if k in SERVER_VAD_DEFAULTS}}
    merged["type"] = "server_vad"
    _number(merged["threshold"], f"{param}.threshold", 0.0, 1.0)
    for name, high in (("prefix_padding_ms", 5000), ("silence_duration_ms", 10000)):
        if isinstance(merged[name], bool) or not isinstance(merged[name], int) or not 0 <= merged[name] <= high:
            raise ProtocolError(f"Invalid '{param}.{name}': expected an integer in [0, {high}].", param=param)
    for name in ("create_response", "interrupt_response"):
        if not isinstance(merged[name], bool):
            raise ProtocolError(f"Invalid '{param}.{name}': expected a boolean.", param=f"{param}.{name}")
    return merged
