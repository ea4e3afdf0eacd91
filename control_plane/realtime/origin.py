"""The origin check in front of `/v1/realtime`.

Channels' AllowedHostsOriginValidator refuses a handshake without an `Origin` header, but
API clients (the OpenAI SDKs, LiveKit, Pipecat) send none: they are not browsers, and
cross-site WebSocket hijacking is a browser attack (browsers always send Origin). So a
handshake without Origin passes; one with an Origin must name one of ALLOWED_HOSTS, as
on every other route.
"""

from __future__ import annotations

from channels.security.websocket import AllowedHostsOriginValidator, OriginValidator


class ApiOriginValidator(OriginValidator):
    def valid_origin(self, parsed_origin) -> bool:
        return parsed_origin is None or self.validate_origin(parsed_origin)


def api_origin_validator(application) -> ApiOriginValidator:
    allowed = AllowedHostsOriginValidator(application).allowed_origins
    return ApiOriginValidator(application, allowed)
