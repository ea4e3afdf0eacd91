"""Host B cut off the network for 20 s (its veth pair down) mid-request, its processes alive: the
promises of a lost host hold (requests with no output re-route to host A and complete, those
with output fail clearly, within seconds, nothing stays pending), and once the network heals,
host B's replicas, which kept running meanwhile, answer no request a second time; host B
rejoins and takes traffic."""

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
PARTITION_S = 20.0


def test_a_partitioned_host_loses_its_requests_cleanly_and_answers_none_twice_after_healing(hosts_stack, omni_dir):
    stack = hosts_stack
    running = deploy_on_both(stack, "split-brain", omni_dir)
    deployment_id = running["id"]
    on_b = {r["id"] for r in running["replicas"] if r["host"] == "host-b"}
    log = ReplyLog(stack.redis.url(), deployment_id)
    try:
        ids = burst(log)

        def b_holds_both_kinds() -> bool:
            held, answered = held_by(stack, deployment_id, on_b), log.answered()
            return bool(held & answered) and bool(held - answered)

        wait_for(b_holds_both_kinds, timeout=300, interval=0.05, what="host B holding answered and unanswered requests")
        stack.bed.partition("b")
        cut_at = time.monotonic()
        try:
            released_s = seconds_until_released(stack, deployment_id, on_b)
            log.wait_ended(ids, timeout=600)
            on_a = [r for r in running["replicas"] if r["host"] == "host-a"]
            wait_for(lambda: nothing_pending(stack, deployment_id, on_a), timeout=30, what="nothing left in flight")
            assert stack.bed.pids("b"), "host B's processes live on behind the partition"
            time.sleep(max(0.0, PARTITION_S - (time.monotonic() - cut_at)))
        finally:
            stack.bed.heal("b")

        replicas = stack.all_running("split-brain", per_host=3)
        before = took_work(stack, "split-brain", "host-b")
        again = burst(log)
        log.wait_ended(again, timeout=600)
        wait_for(lambda: took_work(stack, "split-brain", "host-b") > before, timeout=30,
                 what="host B's thinker at work")  # fmt: skip
        wait_for(lambda: nothing_pending(stack, deployment_id, replicas), timeout=60, what="nothing pending")

        outcomes = check_outcomes(log, ids)  # after the heal: no second answer came meanwhile
        print(f"host B's requests released {released_s:.1f} s after the cut; outcomes {outcomes}")
        assert released_s < RESOLVE_S
        assert outcomes["rerouted"] and outcomes["failed"]
        assert all(log.ended_at(rid) - cut_at < RESOLVE_S for rid in outcomes["failed"])
        assert not check_outcomes(log, again)["failed"]
        seen_once(log, ids + again)
    finally:
        log.close()
