"""Small payloads stay in the message itself."""

from __future__ import annotations

from stages.connectors.base import Connector
from stages.errors import StageFailure
from stages.protocol import Payload, Tensor


class InlineConnector(Connector):
    name = "inline"

    def put(self, tensor: Tensor) -> Payload:
        return tensor

    def get(self, payload: Payload) -> Tensor:
        if not isinstance(payload, Tensor):
            raise StageFailure(f"the inline connector cannot read a {payload.connector} handle")
        return payload
