"""Rolling changes of a running deployment on the live platform, under a steady stream of chat
requests: a change of its default sampling rolls out replica by replica and no request fails or is
lost, and the answers after it reflect the new config; a rollout whose new replica cannot start
fails and the old replica serves on; a rollback rolls the earlier config out the same way."""

from __future__ import annotations

import threading

import pytest
from procs import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PROMPT = "one two three four five six seven eight"
SHORT = "one two three"
FAST = {"stages": {"echo": {"options": {"delay_s": 0.02}}}}
STREAMS = 3


class Traffic:
    """Clients asking the deployment one question after another until stopped: every answer and
    every failure is kept, and each request ends as one or the other."""

    def __init__(self, stack, model: str):
        self.client = stack.client(timeout=120)
        self.model = model
        self.answers: list[str] = []
        self.failures: list[str] = []
        self.sent = 0
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._run) for _ in range(STREAMS)]

    def ask(self) -> str:
        reply = self.client.chat.completions.create(model=self.model, messages=[{"role": "user", "content": PROMPT}])
        return reply.choices[0].message.content

    def _run(self) -> None:
        while not self.stopping.is_set():
            with self.lock:
                self.sent += 1
            try:
                answer = self.ask()
            except Exception as error:  # a failed request is what this test looks for
                with self.lock:
                    self.failures.append(repr(error))
            else:
                with self.lock:
                    self.answers.append(answer)

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=120)

    def count(self) -> int:
        with self.lock:
            return len(self.answers) + len(self.failures)


def revision_state(stack, number: int) -> str:
    revisions = stack.http("GET", "/api/deployments/roll/revisions/", secret=stack.operator_secret).json()
    return next(r for r in revisions if r["number"] == number)["state"]


def wait_revision(stack, number: int, state: str, timeout: float = 180) -> None:
    try:
        wait_for(lambda: revision_state(stack, number) == state, timeout=timeout, what=f"revision {number} {state}")
    except TimeoutError:
        print(stack.logs())
        raise


def replica_ids(stack) -> set[str]:
    body = stack.http("GET", "/api/deployments/roll/", secret=stack.operator_secret).json()
    return {replica["id"] for replica in body["replicas"]}


def change(stack, deploy_config: dict) -> None:
    response = stack.http("PATCH", "/api/deployments/roll/", secret=stack.operator_secret,
                          json={"deploy_config": deploy_config})  # fmt: skip
    assert response.status_code == 202, response.text
    assert response.json()["rollout"]["state"] == "ROLLING"


def rolled(stack, traffic: Traffic, number: int, state: str) -> None:
    """Wait for revision `number` to reach `state` while the traffic runs, then for more answers."""
    wait_revision(stack, number, state)
    answered = traffic.count()
    wait_for(lambda: traffic.count() >= answered + 2 * STREAMS, timeout=120, what="answers after the rollout")


def test_rolling_changes_under_a_steady_stream_lose_no_request(serving_stack):
    stack = serving_stack
    stack.deploy("roll", "echo", deploy_config=FAST)
    stack.wait_running("roll")
    first_replicas = replica_ids(stack)

    # 1. a new default max_tokens rolls out while requests keep coming
    with Traffic(stack, "roll") as traffic:
        wait_for(lambda: traffic.count() >= STREAMS, timeout=60, what="traffic flowing")
        change(stack, {"stages": {"echo": {"sampling": {"max_tokens": 3}}}})
        rolled(stack, traffic, 2, "ACTIVE")
    assert traffic.failures == []
    assert traffic.count() == traffic.sent  # every request ended with an answer: none lost
    assert set(traffic.answers) <= {PROMPT, SHORT}
    assert traffic.answers[0] == PROMPT
    assert traffic.ask() == SHORT  # after the rollout: the new config
    assert replica_ids(stack).isdisjoint(first_replicas)  # the replica was replaced, not restarted in place

    # 2. a rollout whose new replica cannot build its engine fails; the old replica serves on
    second_replicas = replica_ids(stack)
    with Traffic(stack, "roll") as traffic:
        wait_for(lambda: traffic.count() >= STREAMS, timeout=60, what="traffic flowing")
        change(stack, {"stages": {"echo": {"options": {"tokens_per_step": "not a number"}}}})
        rolled(stack, traffic, 3, "FAILED")
    assert traffic.failures == []
    assert traffic.count() == traffic.sent
    assert set(traffic.answers) == {SHORT}
    revisions = stack.http("GET", "/api/deployments/roll/revisions/", secret=stack.operator_secret).json()
    assert revisions[0]["number"] == 3 and "echo replica #0 failed" in revisions[0]["state_reason"]
    wait_for(lambda: replica_ids(stack) == second_replicas, timeout=60, what="the failed replica gone")
    body = stack.http("GET", "/api/deployments/roll/", secret=stack.operator_secret).json()
    assert body["revision"] == 2 and body["state"] == "RUNNING"

    # 3. a rollback to revision 1 rolls out the same way
    with Traffic(stack, "roll") as traffic:
        wait_for(lambda: traffic.count() >= STREAMS, timeout=60, what="traffic flowing")
        response = stack.http("POST", "/api/deployments/roll/rollback/", secret=stack.operator_secret,
                              json={"revision": 1})  # fmt: skip
        assert response.status_code == 202, response.text
        rolled(stack, traffic, 4, "ACTIVE")
    assert traffic.failures == []
    assert traffic.count() == traffic.sent
    assert set(traffic.answers) <= {PROMPT, SHORT}
    assert traffic.ask() == PROMPT
    states = [(r["number"], r["state"], r["rollback_of"]) for r in
              stack.http("GET", "/api/deployments/roll/revisions/", secret=stack.operator_secret).json()]  # fmt: skip
    assert states == [(4, "ACTIVE", 1), (3, "FAILED", None), (2, "SUPERSEDED", None), (1, "SUPERSEDED", None)]
