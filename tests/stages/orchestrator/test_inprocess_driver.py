"""The in-process driver: engines on threads, the core on the loop, faults contained."""

from __future__ import annotations

import asyncio

import pytest

from stages.config import load_deploy_config
from stages.echo import family as echo_family
from stages.orchestrator.actions import Complete, Emit, Fail
from stages.orchestrator.inprocess import InProcessDriver
from stages.protocol import RequestOptions, StageRequest


def driver_for(variant="default", **deploy) -> InProcessDriver:
    return InProcessDriver.for_family(
        echo_family, None, echo_family.pipeline_named(variant), load_deploy_config(deploy)
    )


async def run(driver: InProcessDriver, request_id: str, prompt: str, **extra):
    events = []
    request = StageRequest(request_id=request_id, prompt=prompt, options=RequestOptions(extra=extra))
    async for event in driver.generate(request):
        events.append(event)
    return events


async def test_a_crashing_step_fails_the_replicas_requests_and_the_replica_keeps_serving():
    driver = driver_for(stages={"echo": {"options": {"delay_s": 0.01}}})
    await driver.start()
    try:
        crashed, bystander = await asyncio.gather(
            run(driver, "crash", "x y", echo_crash=True), run(driver, "other", "a b c d e f g h")
        )
        assert isinstance(crashed[-1], Fail) and "echo_crash" in crashed[-1].error.message
        if isinstance(bystander[-1], Fail):  # it shared the crashed step
            assert "echo_crash" in bystander[-1].error.message
        else:  # it had finished before the crash
            assert isinstance(bystander[-1], Complete)
            assert "".join(e.output.text for e in bystander if isinstance(e, Emit)) == "a b c d e f g h"
        after = await run(driver, "after", "still serving")
        assert isinstance(after[-1], Complete)
        assert "".join(e.output.text for e in after if isinstance(e, Emit)) == "still serving"
    finally:
        await driver.close()


async def test_a_deploy_config_with_stage_groups_runs_the_chain_in_process_as_without():
    driver = driver_for("voice", stages={"echo": {"group": "g"}, "voice": {"group": "g"}})
    await driver.start()
    try:
        events = await run(driver, "r", "one two")
        assert isinstance(events[-1], Complete)
        assert "".join(e.output.text for e in events if isinstance(e, Emit)) == "one two"
        assert any("audio" in e.output.payloads for e in events if isinstance(e, Emit))
    finally:
        await driver.close()


async def test_a_later_stage_reads_the_requests_options_and_no_option_from_params():
    """The warm-up mark reaches the chain's second stage in the request's options; the same key in
    `params` is data between stages, which no stage takes for an option."""
    driver = driver_for("chain", stages={"echo2": {"options": {"fail_warmups": 5}}})
    await driver.start()
    try:
        marked = await run(driver, "marked", "a b", warmup=True)
        assert isinstance(marked[-1], Fail)
        assert marked[-1].error.message.startswith("stage 'echo2': this stage fails its warm-up on purpose")
        request = StageRequest(request_id="in-params", prompt="c d", params={"warmup": True, "echo_fail": True})
        in_params = [event async for event in driver.generate(request)]
        assert isinstance(in_params[-1], Complete)
        assert "".join(e.output.text for e in in_params if isinstance(e, Emit)) == "c d"
    finally:
        await driver.close()


async def test_cancel_reaches_every_stage_of_a_chain():
    driver = driver_for(
        "chain", stages={"echo": {"options": {"delay_s": 0.01}}, "echo2": {"options": {"delay_s": 0.01}}}
    )
    await driver.start()
    try:
        stream = driver.generate(StageRequest(request_id="long", prompt=" ".join(["w"] * 500)))
        first = await stream.__anext__()
        assert isinstance(first, Emit)
        driver.cancel("long")
        rest = [event async for event in stream]
        assert isinstance(rest[-1], Fail) and rest[-1].error.type == "cancelled"
        for _ in range(200):
            if not any(replica.engine.has_unfinished() for replica in driver.replicas.values()):
                break
            await asyncio.sleep(0.01)
        assert not any(replica.engine.has_unfinished() for replica in driver.replicas.values())
    finally:
        await driver.close()


async def test_many_concurrent_requests_all_complete_in_order():
    stages = {"echo": {"replicas": 2, "max_waiting": 50}, "echo2": {"replicas": 2, "max_waiting": 50}}
    driver = driver_for("chain", stages=stages, max_queue=200)
    await driver.start()
    try:
        prompts = {f"r{i}": " ".join(f"t{i}_{j}" for j in range(i % 7 + 1)) for i in range(100)}
        results = await asyncio.gather(*(run(driver, rid, text) for rid, text in prompts.items()))
        for (rid, text), events in zip(prompts.items(), results, strict=True):
            assert isinstance(events[-1], Complete), rid
            assert "".join(e.output.text for e in events if isinstance(e, Emit)) == text
        assert driver.core.requests == {}
    finally:
        await driver.close()


async def test_closing_the_driver_ends_requests_in_flight():
    driver = driver_for(stages={"echo": {"options": {"delay_s": 0.01}}})
    await driver.start()
    running = asyncio.ensure_future(run(driver, "busy", " ".join(["w"] * 1000)))
    await asyncio.sleep(0.05)
    await driver.close()
    events = await asyncio.wait_for(running, timeout=10)
    assert isinstance(events[-1], Fail) and "shut down" in events[-1].error.message


async def test_each_engine_is_built_on_the_thread_that_steps_it_one_after_another():
    """On a GPU a replica thread builds its engine under its own CUDA stream, so the build must
    happen on that thread; builds must not overlap (graph captures would see each other's syncs)."""
    import threading

    from stages.models import load_stage_engine

    builds, building = [], threading.Lock()
    pipeline = echo_family.pipeline_named("chain")
    deploy = load_deploy_config({"stages": {"echo": {"replicas": 2}}})

    def build(stage_name):
        assert building.acquire(blocking=False), "two engines were built at once"
        try:
            builds.append((stage_name, threading.current_thread().name))
            return load_stage_engine(echo_family, stage_name, None, deploy.for_stage(pipeline.stage_named(stage_name)))
        finally:
            building.release()

    driver = InProcessDriver(pipeline, deploy, build)
    await driver.start()
    try:
        assert builds == [("echo", "replica-echo-0"), ("echo", "replica-echo-1"), ("echo2", "replica-echo2-0")]
        events = await run(driver, "r1", "a b")
        assert isinstance(events[-1], Complete)
    finally:
        await driver.close()


async def test_an_engine_that_fails_to_build_fails_start_with_its_error():
    def build(stage_name):
        raise RuntimeError(f"no weights for {stage_name}")

    driver = InProcessDriver(echo_family.pipeline, load_deploy_config({}), build)
    with pytest.raises(RuntimeError, match="^no weights for echo$"):
        await driver.start()
    await driver.close()
    assert driver.replicas == {}
