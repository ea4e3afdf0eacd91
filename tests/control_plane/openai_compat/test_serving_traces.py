"""A request's spans share one trace: the web side's (`serve()`, in this test's process, kept by
the SDK's InMemorySpanExporter), the orchestrator's and each replica host's (live processes,
exported over OTLP/HTTP to a small collector this test runs), each under the one before. A /v1
client's `traceparent` is continued: the live web process's span is its child."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
import redis.asyncio
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otlp_collector import OtlpCollector
from procs import wait_for

from control_plane.deployments.models import Deployment
from control_plane.orchestrator.serving import serve
from stages import tracing
from stages.protocol import RequestOptions, StageRequest

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
STAGES = ("echo", "voice")


@pytest.fixture
def collector():
    receiver = OtlpCollector()
    yield receiver
    receiver.stop()


@pytest.fixture
def platform_env(platform_env, collector):
    """Every live process of the stack exports its spans to the collector, in small batches."""
    return {**platform_env, "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "200"}


@pytest.fixture
def memory_spans():
    exporter = InMemorySpanExporter()
    tracing.use_processor(SimpleSpanProcessor(exporter))
    yield exporter
    tracing.use_processor(None)


async def _serve(redis_url: str, deployment_id: str, request: StageRequest) -> list:
    client = redis.asyncio.Redis.from_url(redis_url)
    try:
        async with asyncio.timeout(60):
            return [message async for message in serve(deployment_id, request, client=client)]
    finally:
        await client.aclose()


def test_a_requests_spans_share_one_trace(echo_stack, collector, memory_spans):
    deployment_id = str(Deployment.objects.get(name="echo-voice").id)
    request = StageRequest(request_id=f"req-{uuid.uuid4().hex[:10]}", prompt="a few words about the sea",
                           options=RequestOptions(modalities=["text", "audio"]), arrival_time=time.time())  # fmt: skip
    messages = asyncio.run(_serve(echo_stack.redis.url, deployment_id, request))
    assert messages[-1].kind == "complete"

    (web,) = memory_spans.get_finished_spans()
    trace_id, web_id = f"{web.context.trace_id:032x}", f"{web.context.span_id:016x}"
    assert web.name == "request" and web.parent is None
    assert request.trace == f"00-{trace_id}-{web_id}-01"  # what the Submit carried
    assert web.attributes["omnistage.request_id"] == request.request_id
    assert web.attributes["omnistage.outcome"] == "complete"

    wanted = {"orchestrate", *(f"stage {stage}" for stage in STAGES)}
    spans = wait_for(
        lambda: (got := collector.received()) and wanted <= {span.name for span in got} and got,
        timeout=30, what="the orchestrator's and the replica hosts' spans",
    )  # fmt: skip
    assert {span.trace_id for span in spans} == {trace_id}  # nothing else traced (the warm-ups carry no trace)
    (orchestrate,) = [span for span in spans if span.name == "orchestrate"]
    assert orchestrate.service == "omnistage-orchestrator" and orchestrate.parent_id == web_id
    assert orchestrate.attributes["omnistage.request_id"] == request.request_id
    assert orchestrate.attributes["omnistage.e2el_s"] > 0
    for stage in STAGES:
        (span,) = [span for span in spans if span.name == f"stage {stage}"]
        assert span.service == "omnistage-replica" and span.parent_id == orchestrate.span_id
        assert span.attributes["omnistage.request_id"] == request.request_id
        assert span.attributes["omnistage.stage"] == stage and span.attributes["omnistage.outputs"] >= 1

    # through /v1 with the client's own trace: the live web process's span continues it
    client_trace = tracing.new_traceparent()
    client_trace_id, client_span_id = tracing.parse(client_trace)
    reply = echo_stack.http("POST", "/v1/chat/completions", headers={"traceparent": client_trace}, json={
        "model": "echo-voice", "modalities": ["text", "audio"], "audio": {"voice": "a", "format": "wav"},
        "messages": [{"role": "user", "content": "traced from outside"}],
    })  # fmt: skip
    assert reply.status_code == 200, reply.text
    spans = wait_for(
        lambda: (got := [s for s in collector.received() if s.trace_id == client_trace_id])
        and {"request", *wanted} <= {span.name for span in got} and got,
        timeout=30, what="the spans of the request made through /v1",
    )  # fmt: skip
    (web_span,) = [span for span in spans if span.name == "request"]
    assert web_span.service == "omnistage-web" and web_span.parent_id == client_span_id
    assert web_span.attributes["omnistage.request_id"] == reply.json()["id"]
    (orchestrate,) = [span for span in spans if span.name == "orchestrate"]
    assert orchestrate.parent_id == web_span.span_id
    assert {span.parent_id for span in spans if span.name.startswith("stage ")} == {orchestrate.span_id}
