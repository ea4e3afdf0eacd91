"""Shared-memory payloads the core will never deliver are handed back (`Discard`): those held
for a non-streaming edge, waiting for a replica or arriving after their request ended."""

from __future__ import annotations

from test_orchestrator_core import make_core, of_type, output, submit

from stages.orchestrator import Cancel, Discard, ReplicaDown, SendToReplica
from stages.protocol import PayloadRef, Tensor


def shm(key: str) -> PayloadRef:
    return PayloadRef(connector="shm", key=key, nbytes=1 << 20, host="host-a", owner="echo-0")


def discarded(actions) -> list[str]:
    return [payload.key for action in of_type(actions, Discard) for payload in action.payloads]


def test_a_cancel_discards_what_a_non_streaming_edge_held_back():
    core = make_core("chain-batch")
    submit(core)
    output(core, text="a", payloads={"hidden": shm("k0")})
    output(core, seq=1, text=" b", payloads={"hidden": shm("k1"), "tiny": Tensor(dtype="uint8", shape=[1], data=b"x")})

    actions = core.handle(Cancel(request_id="r1", reason="client left", at=2.0))

    assert sorted(discarded(actions)) == ["k0", "k1"]


def test_inputs_waiting_for_a_replica_are_discarded_when_the_request_fails():
    core = make_core("chain", replicas={"echo": ["echo-0"], "echo2": []})
    submit(core)
    forwarded = output(core, text="a", payloads={"hidden": shm("waiting")})
    assert not of_type(forwarded, SendToReplica)  # echo2 has no replica yet: the input waits

    actions = core.handle(Cancel(request_id="r1", reason="client left", at=2.0))

    assert discarded(actions) == ["waiting"]


def test_an_output_arriving_after_its_request_ended_is_discarded():
    core = make_core("chain")
    submit(core)
    core.handle(Cancel(request_id="r1", reason="client left", at=2.0))

    late = output(core, seq=0, text="a", payloads={"hidden": shm("late")}, at=3.0)
    redis_only = output(
        core, seq=1, payloads={"hidden": PayloadRef(connector="redis", key="omni:payload:x", nbytes=9)}, at=3.0
    )

    assert discarded(late) == ["late"]
    assert redis_only == []  # Redis payloads expire on their own


def test_an_abandoned_attempt_discards_what_it_held_and_what_it_sends_late():
    core = make_core("chain-batch", replicas={"echo": ["echo-0", "echo-1"], "echo2": ["echo2-0"]})
    sent = submit(core)
    first = sent[0].replica_id
    output(core, text="a", payloads={"hidden": shm("held")}, replica_id=first)

    rerouted = core.handle(ReplicaDown(replica_id=first, reason="killed", at=2.0))
    late = output(core, seq=1, payloads={"hidden": shm("from-the-dead")}, replica_id=first, at=3.0)

    assert discarded(rerouted) == ["held"] and of_type(rerouted, SendToReplica)
    assert discarded(late) == ["from-the-dead"]


def test_delivered_payloads_are_not_discarded():
    core = make_core("chain")
    submit(core)
    forwarded = output(core, text="a", payloads={"hidden": shm("delivered")})
    finished = output(core, stage_id=1, seq=0, text="a", finished=True, at=2.0)
    assert of_type(forwarded, SendToReplica)
    assert discarded(forwarded + finished) == []
