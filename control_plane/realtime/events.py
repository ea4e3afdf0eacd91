"""Event names and envelopes: beta and GA names accepted on input, GA emitted on output.

Every server event carries a fresh `event_id`; an `error` event also names the client
event that caused it (`error.event_id`).
"""

from __future__ import annotations

import uuid

CLIENT_EVENTS = frozenset(
    {
        "session.update",
        "input_audio_buffer.append",
        "input_audio_buffer.commit",
        "input_audio_buffer.clear",
        "conversation.item.create",
        "conversation.item.retrieve",
        "conversation.item.truncate",
        "conversation.item.delete",
        "response.create",
        "response.cancel",
        "output_audio_buffer.clear",
    }
)

# beta spellings a client may send, and what they mean
BETA_CLIENT_ALIASES = {
    "transcription_session.update": "session.update",
}


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:20]}"


def canonical_client_type(event_type: str) -> str | None:
    """The GA name of a client event, or None when it is no client event of the protocol."""
    if event_type in CLIENT_EVENTS:
        return event_type
    return BETA_CLIENT_ALIASES.get(event_type)


def server_event(event_type: str, **fields) -> dict:
    return {"type": event_type, "event_id": new_id("event"), **fields}


def error_event(
    message: str,
    *,
    code: str | None = None,
    param: str | None = None,
    event_id: str | None = None,
    type: str = "invalid_request_error",
) -> dict:
    error = {"type": type, "code": code, "message": message, "param": param, "event_id": event_id}
    return server_event("error", error=error)


class ProtocolError(Exception):
    """A client event that cannot be applied; answered with an `error` event, the session goes on."""

    def __init__(self, message: str, *, code: str = "invalid_value", param: str | None = None):
        super().__init__(message)
        self.message, self.code, self.param = message, code, param
