"""The request run: what every interface's request is billed, recorded and settled as.

Real Redis (quota scripts, the history log), the real database (history rows, usage records),
the real serving client (`serve()`); the orchestrator's side of the wire is a stand-in that
answers each Submit with the messages the test scripts, as tests/control_plane/openai_compat/
test_serving_replies.py does. History is written by the history writer's own catch-up.
"""

from __future__ import annotations

import asyncio
import uuid
from contextlib import aclosing

import numpy as np
import pytest
import redis.asyncio
from asgiref.sync import sync_to_async
from django.conf import settings

from control_plane.accounts.models import Metric, Quota, UsageRecord, Window
from control_plane.accounts.queries import quota_status
from control_plane.accounts.quota import QuotaExceeded
from control_plane.deployments.management.commands.sync_pipelines import discover_pipelines, pipeline_sync
from control_plane.deployments.models import Deployment, DeploymentState, Pipeline
from control_plane.deployments.services import deployment_create, pipeline_config_of
from control_plane.inference.errors import ApiError
from control_plane.inference.history_log import history_catch_up, pending_requests
from control_plane.inference.models import Artifact, InferenceRequest
from control_plane.inference.queries import request_get
from control_plane.inference.request_run import RequestRun
from control_plane.inference.targets import Caller, Served
from control_plane.orchestrator import wire
from control_plane.realtime.session_quota import ResponseCharge, SessionQuota
from stages import streams
from stages.orchestrator import Cancel, Complete, Emit, Fail, RequestSummary, Submit
from stages.protocol import StageError, StageOutput, StageRequest, Tensor

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def isolated_redis_names(settings, redis_service):
    """History and quota keys of this test only."""
    tag = uuid.uuid4().hex[:8]
    settings.HISTORY_REDIS_PREFIX = f"test-run-{tag}:history"
    settings.ACCOUNTS_REDIS_PREFIX = f"test-run-{tag}:accounts"


@pytest.fixture
def served(transactional_db) -> Served:
    pipeline_sync(discover_pipelines())
    pipeline = Pipeline.objects.get(name="echo-voice")
    deployment = deployment_create(name=f"run-{uuid.uuid4().hex[:6]}", pipeline=pipeline, model_dir="-",
                                   deploy_config={})  # fmt: skip
    Deployment.objects.filter(pk=deployment.pk).update(state=DeploymentState.RUNNING)
    deployment.refresh_from_db()
    return Served(deployment, pipeline_config_of(pipeline))


@pytest.fixture
def caller(django_user_model) -> Caller:
    return Caller(django_user_model.objects.create_user(f"u-{uuid.uuid4().hex[:6]}", password="x"))


class StandIn:
    """The orchestrator's side of the wire: answers each Submit with `script(submit)`, a list of
    actions (Emit/Complete/Fail) and float pauses; records the Cancels it receives."""

    def __init__(self, script):
        self.script = script
        self.client = redis.asyncio.Redis.from_url(settings.REDIS_URL)
        self.cancelled: list[str] = []
        self.task: asyncio.Task | None = None

    async def __aenter__(self):
        self.task = asyncio.create_task(self._run())
        await asyncio.sleep(0.05)  # its first XREAD is waiting
        return self

    async def __aexit__(self, *exc):
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        await self.client.aclose()

    async def _run(self) -> None:
        last = "$"
        answers = []
        try:
            while True:
                for _, entries in await self.client.xread({streams.orchestrator_inbox(): last}, block=200) or []:
                    for entry_id, fields in entries:
                        last = entry_id
                        event = wire.decode_event(fields[b"data"])
                        if isinstance(event, Submit):
                            answers.append(asyncio.create_task(self._answer(event)))
                        elif isinstance(event, Cancel):
                            self.cancelled.append(event.request_id)
        finally:
            for answer in answers:
                answer.cancel()

    async def _answer(self, submit: Submit) -> None:
        for step in self.script(submit):
            if isinstance(step, float):
                await asyncio.sleep(step)
                continue
            step.request_id, step.reply_to = submit.request.request_id, submit.reply_to
            if isinstance(step, Emit):
                step.output.request_id = submit.request.request_id
            await self.client.xadd(submit.reply_to, wire.reply_message(step))


def text(seq: int, words: str, *, metrics: dict | None = None, finished: bool = False) -> Emit:
    output = StageOutput(request_id="", seq=seq, text=words, token_ids=list(range(len(words.split()))),
                         modality="text", finished=finished, metrics=metrics or {})  # fmt: skip
    return Emit(request_id="", output=output)


def audio(seq: int, samples: int, rate: int = 16000) -> Emit:
    tone = np.full(samples, 0.25, np.float32)
    output = StageOutput(request_id="", stage_id=1, seq=seq, modality="audio", params={"sample_rate": rate},
                         payloads={"audio": Tensor(dtype="float32", shape=[samples], data=tone.tobytes())})  # fmt: skip
    return Emit(request_id="", output=output)


def done(prompt_tokens: int | None, completion_tokens: int, **usage) -> Complete:
    counts = {"completion_tokens": completion_tokens, **usage}
    if prompt_tokens is not None:
        counts["prompt_tokens"] = prompt_tokens
    return Complete(request_id="", summary=RequestSummary(finish_reason="stop", usage=counts,
                                                          metrics={"e2el_s": 0.5, "ttft_s": 0.1}))  # fmt: skip


def stage_request(run: RequestRun, prompt: str = "hello") -> StageRequest:
    return StageRequest(request_id=run.request_id, prompt=prompt)


def written(request_id: str) -> InferenceRequest:
    history_catch_up([request_id])
    return InferenceRequest.objects.get(request_id=request_id)


def used(caller: Caller, metric: str) -> float:
    return next((s.used for s in quota_status(user=caller.user) if s.limit.metric == metric), 0.0)


def limit(caller: Caller, metric: str, amount: int) -> None:
    window = Window.NONE if metric == Metric.CONCURRENT_REQUESTS else Window.DAY
    Quota.objects.create(user=caller.user, metric=metric, window=window, limit=amount)


def new_run(caller: Caller, route: str = "chat.completions", **kwargs) -> RequestRun:
    return RequestRun(route=route, request_id=f"run-{uuid.uuid4().hex[:12]}", caller=caller, **kwargs)


async def open_run(run: RequestRun, served: Served, **kwargs) -> None:
    await run.open(served, inputs={"prompt": "hello"}, parameters={}, modalities=["text", "audio"], **kwargs)


# ------------------------------------------------------------------ endings


async def test_a_completed_request_is_recorded_billed_and_settled(served, caller):
    await sync_to_async(limit)(caller, Metric.TEXT_TOKENS, 10_000)
    script = lambda submit: [text(0, "one two ", metrics={"num_prompt_tokens": 9}), 0.01, audio(0, 800),  # noqa: E731
                             text(1, "three", finished=True), audio(1, 800),
                             done(9, 3, **{"stage.voice.output_tokens": 4})]  # fmt: skip
    async with StandIn(script):
        run = new_run(caller)
        await open_run(run, served, estimate={"text_tokens": 100})
        assert await sync_to_async(used)(caller, Metric.TEXT_TOKENS) == 100  # reserved
        deltas = await run.submit(stage_request(run))
        seen = [delta async for delta in deltas]
        artifacts = await run.complete()
    assert "".join(delta.text for delta in seen) == "one two three"
    assert sum(delta.audio.size for delta in seen if delta.audio is not None) == 1600

    row = await sync_to_async(written)(run.request_id)
    assert (row.status, row.http_status, row.finish_reason, row.output_text) == ("completed", 200, "stop",
                                                                                 "one two three")  # fmt: skip
    assert row.usage["text"] == {"prompt_tokens": 9, "completion_tokens": 3}
    assert row.usage["audio"] == {"seconds": 0.1, "tokens": 4, "sample_rate": 16000}
    assert row.ttft_s == 0.1 and row.e2el_s == 0.5 and row.started_at is not None and row.finished_at is not None
    (artifact,) = await sync_to_async(list)(row.artifacts.all())
    assert str(artifact.id) == artifacts[0].id and artifact.meta["direction"] == "out"
    assert (await sync_to_async(artifact.file.read)())[:4] == b"RIFF"

    record = await sync_to_async(UsageRecord.objects.get)(request_id=run.request_id)
    assert (record.modality, record.text_tokens_in, record.text_tokens_out) == ("audio", 9, 3)
    assert record.audio_seconds_out == pytest.approx(0.1) and record.user_id == caller.user.pk
    assert await sync_to_async(used)(caller, Metric.TEXT_TOKENS) == 12  # settled to what it used


async def test_a_failure_is_recorded_with_its_error_and_refunded(served, caller):
    await sync_to_async(limit)(caller, Metric.TEXT_TOKENS, 10_000)
    error = StageError(message="no such voice", type="invalid_request_error", param="voice", code="bad_voice")
    script = lambda submit: [Fail(request_id="", error=error, summary=RequestSummary())]  # noqa: E731
    async with StandIn(script):
        run = new_run(caller)
        await open_run(run, served, estimate={"text_tokens": 100})
        with pytest.raises(ApiError) as refused:
            await run.submit(stage_request(run))  # before any byte streams
        assert refused.value.status == 400 and refused.value.param == "voice"
        await run.fail(refused.value)
    row = await sync_to_async(written)(run.request_id)
    assert (row.status, row.http_status, row.finish_reason) == ("failed", 400, "error")
    assert row.error == {"message": "no such voice", "type": "invalid_request_error", "param": "voice",
                         "code": "bad_voice"}  # fmt: skip
    assert not await sync_to_async(UsageRecord.objects.filter(request_id=run.request_id).exists)()
    assert await sync_to_async(used)(caller, Metric.TEXT_TOKENS) == 0  # the reservation came back


async def test_a_refusal_by_the_quota_is_a_recorded_429(served, caller):
    await sync_to_async(limit)(caller, Metric.REQUESTS, 1)
    async with StandIn(lambda submit: [text(0, "ok", finished=True), done(2, 1)]):
        first = new_run(caller)
        await open_run(first, served)
        await (await first.submit(stage_request(first))).drain()
        await first.complete()
        second = new_run(caller)
        with pytest.raises(QuotaExceeded) as exceeded:
            await open_run(second, served)
        answered = await second.fail(exceeded.value)
    assert answered.status == 429 and answered.headers["Retry-After"]
    row = await sync_to_async(written)(second.request_id)
    assert (row.status, row.http_status, row.error["code"]) == ("failed", 429, "rate_limit_exceeded")


async def test_a_request_refused_before_it_opened_is_recorded_under_the_model_asked_for(caller):
    run = new_run(caller)
    run.inputs = {"model": "no-such-model"}
    await run.fail(ApiError(404, "The model 'no-such-model' does not exist.", param="model", code="model_not_found"))
    row = await sync_to_async(written)(run.request_id)
    assert (row.status, row.http_status, row.deployment_name) == ("failed", 404, "no-such-model")


async def test_a_client_that_goes_away_cancels_the_request_and_pays_for_what_it_got(served, caller):
    await sync_to_async(limit)(caller, Metric.TEXT_TOKENS, 10_000)
    words = [text(seq, f"w{seq} ", metrics={"num_prompt_tokens": 6} if seq == 0 else None) for seq in range(50)]
    script = lambda submit: [step for word in words for step in (word, 0.02)]  # noqa: E731
    async with StandIn(script) as orchestrator:
        run = new_run(caller)
        await open_run(run, served, estimate={"text_tokens": 100})
        deltas = await run.submit(stage_request(run))
        events = run.events(deltas, on_delta=lambda delta: [delta.text], on_complete=None, on_error=None)
        received = [await anext(events) for _ in range(3)]
        await events.aclose()  # what a disconnect does to the stream
        for _ in range(50):
            if run.request_id in orchestrator.cancelled:
                break
            await asyncio.sleep(0.05)
    assert received == ["w0 ", "w1 ", "w2 "]
    assert run.request_id in orchestrator.cancelled  # every stage is told
    row = await sync_to_async(written)(run.request_id)
    assert (row.status, row.http_status, row.finish_reason) == ("cancelled", 499, "cancelled")
    assert row.error["code"] == "client_disconnected" and row.output_text.startswith("w0 w1 w2")
    record = await sync_to_async(UsageRecord.objects.get)(request_id=run.request_id)
    assert record.text_tokens_in == 6 and record.text_tokens_out >= 3  # the prompt it read, the words it wrote
    assert await sync_to_async(used)(caller, Metric.TEXT_TOKENS) == 6 + record.text_tokens_out


async def test_a_stop_asked_for_records_its_reason(served, caller):
    script = lambda submit: [text(seq, "w ") for seq in range(200)]  # noqa: E731
    async with StandIn(script):
        run = new_run(caller)
        await open_run(run, served)
        deltas = await run.submit(stage_request(run))

        async def consume():  # as the console's consumer does: a cancelled task closes the stream
            async with aclosing(run.events(deltas, on_delta=lambda d: [d], on_complete=None, on_error=None)) as events:
                async for _ in events:
                    await asyncio.sleep(0.01)

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.2)
        run.stopping("stopped in the console", "cancelled")
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    row = await sync_to_async(written)(run.request_id)
    assert row.status == "cancelled" and row.error["message"] == "stopped in the console"


async def test_a_stage_failure_mid_stream_is_rendered_and_recorded(served, caller):
    error = StageError(message="the engine broke", code="engine_error")
    script = lambda submit: [text(0, "half "), Fail(request_id="", error=error, summary=RequestSummary())]  # noqa: E731
    async with StandIn(script):
        run = new_run(caller)
        await open_run(run, served)
        deltas = await run.submit(stage_request(run))
        rendered = [item async for item in run.events(deltas, on_delta=lambda delta: [delta.text],
                                                       on_complete=None, on_error=lambda e: [e.status])]  # fmt: skip
    assert rendered == ["half ", 500]
    row = await sync_to_async(written)(run.request_id)
    assert (row.status, row.http_status, row.output_text) == ("failed", 500, "half ")


# ------------------------------------------------------------------ usage


async def test_prompt_tokens_come_from_what_the_entry_stage_read(served, caller):
    """The orchestrator's summary counts the entry stage's prompt; without one (a summary of an
    older orchestrator), the first output's `num_prompt_tokens` is what the thinker read."""
    async with StandIn(lambda submit: [text(0, "a b", metrics={"num_prompt_tokens": 31}, finished=True),
                                       done(None, 2)]):  # fmt: skip
        run = new_run(caller)
        await open_run(run, served)
        await (await run.submit(stage_request(run))).drain()
        await run.complete()
    assert run.usage().prompt_tokens == 31
    row = await sync_to_async(written)(run.request_id)
    assert row.usage["text"] == {"prompt_tokens": 31, "completion_tokens": 2}
    record = await sync_to_async(UsageRecord.objects.get)(request_id=run.request_id)
    assert (record.text_tokens_in, record.text_tokens_out) == (31, 2)


async def test_several_submissions_of_one_request_are_one_row_in_submission_order(served, caller):
    def script(submit):
        index = int(submit.request.request_id.rsplit("-", 1)[1])
        image = Tensor(dtype="uint8", shape=[4], data=bytes([index]) * 4)
        output = StageOutput(request_id="", seq=0, modality="image", finished=True, payloads={"image": image},
                             params={"width": 2, "height": 2, "format": "png", "mime_type": "image/png"})  # fmt: skip
        return [(3 - index) * 0.05, Emit(request_id="", output=output), done(None, 0)]

    async with StandIn(script):
        run = new_run(caller, route="images.generations")
        await run.open(served, inputs={"prompt": "x"}, parameters={}, modalities=["image"], estimate={"images": 3})

        async def one(index: int):
            await (await run.submit(StageRequest(request_id=f"{run.request_id}-{index}", prompt="x"))).drain()

        await asyncio.gather(*(one(index) for index in range(3)))
        artifacts = await run.complete()
    assert [a.index for a in artifacts] == [0, 1, 2]
    assert [m.data[0] for m in run.outcome.media] == [0, 1, 2]  # the order asked for, not the order finished
    row = await sync_to_async(written)(run.request_id)
    assert row.usage["image"] == {"count": 3} and await sync_to_async(row.artifacts.count)() == 3


async def test_a_realtime_response_charges_its_session(served, caller):
    quota = SessionQuota(caller.user, None)
    async with StandIn(lambda submit: [text(0, "hi there", finished=True), audio(0, 1600), done(12, 2)]):
        run = new_run(caller, route="realtime", charge=ResponseCharge(quota))
        run.audio_in = (np.zeros(8000, np.float32), 16000)
        await open_run(run, served)
        await (await run.submit(stage_request(run))).drain()
        await run.complete()
    assert quota.text_tokens == 14 and quota.audio_seconds_out == pytest.approx(0.1)
    row = await sync_to_async(written)(run.request_id)
    assert row.usage["audio_in"] == {"seconds": 0.5}
    directions = await sync_to_async(lambda: sorted(a.meta["direction"] for a in row.artifacts.all()))()
    assert directions == ["in", "out"]
    record = await sync_to_async(UsageRecord.objects.get)(request_id=run.request_id)
    assert (record.modality, record.text_tokens_in, record.audio_seconds_in) == ("realtime", 12, 0.5)


# ------------------------------------------------------------------ history


async def test_a_read_shows_a_finished_request_before_the_writer_wrote_it(served, caller):
    async with StandIn(lambda submit: [text(0, "fresh", finished=True), done(1, 1)]):
        run = new_run(caller)
        await open_run(run, served)
        await (await run.submit(stage_request(run))).drain()
        await run.complete()
    assert await sync_to_async(pending_requests)(user_id=caller.user.pk) == [run.request_id]
    assert not await sync_to_async(InferenceRequest.objects.filter(request_id=run.request_id).exists)()
    row = await sync_to_async(request_get)(viewer=caller.user, see_all=False, request_id=run.request_id)
    assert row is not None and row.status == "completed" and row.output_text == "fresh"
    assert await sync_to_async(pending_requests)(user_id=caller.user.pk) == []


async def recorded_events(run) -> list:
    """The history events `run` appended, in order, as the writer reads them."""
    from control_plane.inference.history_events import decode
    from control_plane.inference.redis_names import row_key

    client = redis.asyncio.Redis.from_url(settings.REDIS_URL)
    fields = await client.hgetall(row_key(run.request_id))
    await client.aclose()
    return [decode(value) for key, value in sorted(fields.items()) if key != b"user"]


async def test_applying_the_same_history_twice_writes_it_once(served, caller):
    from control_plane.inference.history_apply import history_apply

    async with StandIn(lambda submit: [text(0, "once", finished=True), audio(0, 160), done(1, 1)]):
        run = new_run(caller)
        await open_run(run, served)
        await (await run.submit(stage_request(run))).drain()
        await run.complete()
    events = await recorded_events(run)
    assert [type(event).__name__ for event in events] == ["RowOpened", "ArtifactStored", "RowClosed", "UsageRecorded"]
    closed = [await sync_to_async(history_apply)(events) for _ in range(3)]  # a writer and two readers, say
    assert closed == [1, 0, 0]  # the first closing wins; metrics count it once
    assert await sync_to_async(InferenceRequest.objects.filter(request_id=run.request_id).count)() == 1
    assert await sync_to_async(UsageRecord.objects.filter(request_id=run.request_id).count)() == 1
    assert await sync_to_async(Artifact.objects.filter(request__request_id=run.request_id).count)() == 1


async def test_a_row_opened_in_one_batch_is_closed_by_a_later_one_once(served, caller):
    from control_plane.inference.history_apply import history_apply

    async with StandIn(lambda submit: [text(0, "later", finished=True), done(1, 1)]):
        run = new_run(caller)
        await open_run(run, served)
        await (await run.submit(stage_request(run))).drain()
        await run.complete()
    events = await recorded_events(run)
    opened = [event for event in events if type(event).__name__ == "RowOpened"]
    assert await sync_to_async(history_apply)(opened) == 0
    row = await sync_to_async(InferenceRequest.objects.get)(request_id=run.request_id)
    assert row.status != "completed" and row.output_text == ""
    assert [await sync_to_async(history_apply)(events) for _ in range(2)] == [
        1,
        0,
    ]  # the open conflicts, the close updates
    row = await sync_to_async(InferenceRequest.objects.get)(request_id=run.request_id)
    assert row.status == "completed" and row.output_text == "later" and row.finished_at is not None
    assert row.lease_expires_at is None and row.usage
