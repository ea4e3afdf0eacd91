"""The interface every stage engine (AR, generation, diffusion, echo) implements."""

from __future__ import annotations

from abc import ABC, abstractmethod

from stages.protocol import StageOutput, StageRequest


class StageEngine(ABC):
    """Runs one stage on one device.

    The driver (in-process orchestrator or a replica host) calls `add_request` for a
    request's first input, `add_chunk` for further input chunks of a request added with
    `finished=False`, and `step()` while `has_unfinished()`. `add_request` raises
    `stages.errors.InvalidRequest` for bad input; `step()` never raises for one bad
    request: it returns an error `StageOutput` for that request and keeps serving others.
    """

    @abstractmethod
    def add_request(self, request: StageRequest) -> None:
        """Admit a new request (validated here; raises InvalidRequest)."""

    def add_chunk(self, request: StageRequest) -> None:
        """Append an input chunk to a request that waits for more input."""
        raise NotImplementedError(f"{type(self).__name__} takes no streamed input")

    @abstractmethod
    def step(self) -> list[StageOutput]:
        """Do one unit of work for the scheduled requests and return their outputs."""

    @abstractmethod
    def abort(self, request_id: str) -> None:
        """Drop a request and free its resources at once. Unknown ids are ignored."""

    @abstractmethod
    def has_unfinished(self) -> bool:
        """Whether any request still needs `step()` (requests waiting for chunks count)."""

    def shutdown(self) -> None:  # noqa: B027 - optional hook
        """Release devices and background resources."""
