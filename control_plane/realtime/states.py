"""The session, turn and response state machines, in one table of allowed transitions.

    session:   connecting --open--> active --close--> closed
    turn:      listening --speech_start--> speaking --speech_stop--> listening
               (commit and clear end a turn from either state; append keeps the state)
    response:  idle --create--> in_progress --finish--> idle
               in_progress --cancel--> cancelling --finish--> idle

A client event that has no transition from the current state is refused with an `error`
event carrying the code below; the session goes on.
"""

from __future__ import annotations

from dataclasses import dataclass

# (machine, state, event) -> next state
TRANSITIONS: dict[tuple[str, str, str], str] = {
    ("session", "connecting", "open"): "active",
    ("session", "connecting", "close"): "closed",
    ("session", "active", "close"): "closed",
    ("turn", "listening", "append"): "listening",
    ("turn", "speaking", "append"): "speaking",
    ("turn", "listening", "speech_start"): "speaking",
    ("turn", "speaking", "speech_stop"): "listening",
    ("turn", "listening", "commit"): "listening",
    ("turn", "speaking", "commit"): "listening",
    ("turn", "listening", "clear"): "listening",
    ("turn", "speaking", "clear"): "listening",
    ("response", "idle", "create"): "in_progress",
    ("response", "in_progress", "cancel"): "cancelling",
    ("response", "in_progress", "finish"): "idle",
    ("response", "cancelling", "finish"): "idle",
    ("response", "cancelling", "cancel"): "cancelling",
}

INITIAL = {"session": "connecting", "turn": "listening", "response": "idle"}

# why an event is refused, by (machine, event): the error code and message the client sees
REFUSALS: dict[tuple[str, str], tuple[str, str]] = {
    ("session", "open"): ("session_already_open", "The session is already open."),
    ("session", "close"): ("session_closed", "The session is closed."),
    ("response", "create"): (
        "conversation_already_has_active_response",
        "Conversation already has an active response in progress; cancel it or wait for response.done.",
    ),
    ("response", "cancel"): ("response_cancel_not_active", "Cancellation failed: no active response found."),
    ("response", "finish"): ("response_not_active", "No response is in progress."),
}


class IllegalTransition(Exception):
    def __init__(self, machine: str, state: str, event: str):
        self.machine, self.state, self.event = machine, state, event
        self.code, message = REFUSALS.get(
            (machine, event), ("invalid_state", f"'{event}' is not allowed while the {machine} is {state}.")
        )
        super().__init__(message)
        self.message = message


@dataclass
class StateMachine:
    machine: str
    state: str = ""

    def __post_init__(self) -> None:
        if self.machine not in INITIAL:
            raise ValueError(f"unknown state machine {self.machine!r}")
        self.state = self.state or INITIAL[self.machine]

    def allows(self, event: str) -> bool:
        return (self.machine, self.state, event) in TRANSITIONS

    def fire(self, event: str) -> str:
        """Move along `event`; raises IllegalTransition (state unchanged) when the table has no such edge."""
        target = TRANSITIONS.get((self.machine, self.state, event))
        if target is None:
            raise IllegalTransition(self.machine, self.state, event)
        self.state = target
        return target
