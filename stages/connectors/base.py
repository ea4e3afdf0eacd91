"""What every connector does: hold a payload's bytes somewhere and hand back a handle."""

from __future__ import annotations

from abc import ABC, abstractmethod

from stages.protocol import Payload, Tensor

PAYLOAD_TTL_S = 300.0
"""How long a payload nobody collected lives (Redis keys expire; shared memory is swept):
as long as a request may run by default (`DeployConfig.request_timeout_s`)."""


class Connector(ABC):
    """Moves one payload between stages. Routing is not its business: only bytes."""

    name: str

    @abstractmethod
    def put(self, tensor: Tensor) -> Payload:
        """Store the tensor's bytes; return what travels in the message instead."""

    @abstractmethod
    def get(self, payload: Payload) -> Tensor:
        """The tensor behind a handle this kind of connector returned."""

    def delete(self, payload: Payload) -> None:  # noqa: B027 - inline payloads need no cleanup
        """Free what `put` stored (receivers call it once they hold the data)."""
