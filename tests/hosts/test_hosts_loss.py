"""Host B killed whole mid-request (every process in its namespaces, SIGKILL): its requests that
had no output yet re-route to host A's replicas and complete, those with output fail with a
clear error, all decided within seconds; nothing stays pending; host B, started again, rejoins
(its replicas restart) and takes traffic."""

from __future__ import annotations

import time

import pytest
from host_failures import (
    RESOLVE_S,
    burst,
    check_outcomes,
    deploy_on_both,
    held_by,
    nothing_pending,
    seconds_until_released,
    seen_once,
    took_work,
)
from hosts_stack import ReplyLog
from procs import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True), pytest.mark.timeout(1800)]


def test_a_host_killed_mid_request_reroutes_or_fails_its_requests_and_rejoins(hosts_stack, omni_dir):
    stack = hosts_stack
    running = deploy_on_both(stack, "loss", omni_dir)
    deployment_id = running["id"]
    on_b = {r["id"] for r in running["replicas"] if r["host"] == "host-b"}
    log = ReplyLog(stack.redis.url(), deployment_id)
    try:
        ids = burst(log)

        def b_holds_both_kinds() -> bool:
            held, answered = held_by(stack, deployment_id, on_b), log.answered()
            return bool(held & answered) and bool(held - answered)

        wait_for(b_holds_both_kinds, timeout=300, interval=0.05, what="host B holding answered and unanswered requests")
        stack.kill_host("b")
        killed_at = time.monotonic()
        released_s = seconds_until_released(stack, deployment_id, on_b)
        log.wait_ended(ids, timeout=600)

        outcomes = check_outcomes(log, ids)
        print(f"host B's requests released {released_s:.1f} s after the kill; outcomes {outcomes}")
        assert released_s < RESOLVE_S
        assert outcomes["rerouted"] and outcomes["failed"]
        assert all(log.ended_at(rid) - killed_at < RESOLVE_S for rid in outcomes["failed"])
        on_a = [r for r in running["replicas"] if r["host"] == "host-a"]
        wait_for(lambda: nothing_pending(stack, deployment_id, on_a), timeout=30, what="nothing left in flight")

        stack.start_host("b")
        replicas = stack.all_running("loss", per_host=3)
        assert all(r["restarts"] >= 1 for r in replicas if r["host"] == "host-b")
        before = took_work(stack, "loss", "host-b")  # its new process's count
        again = burst(log)
        log.wait_ended(again, timeout=600)
        assert not check_outcomes(log, again)["failed"]
        wait_for(lambda: took_work(stack, "loss", "host-b") > before, timeout=30, what="host B's thinker at work")
        wait_for(lambda: nothing_pending(stack, deployment_id, replicas), timeout=60, what="nothing pending")
        seen_once(log, ids + again)
    finally:
        log.close()
