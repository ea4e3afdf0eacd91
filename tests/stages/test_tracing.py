"""Trace context and spans (stages/tracing.py): traceparents, the derived orchestrator span, spans
recorded with their ids and parents (the SDK's InMemorySpanExporter), and nothing at all when
tracing is off."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from procs import REPO

from stages import tracing


@pytest.fixture
def exporter():
    memory = InMemorySpanExporter()
    tracing.use_processor(SimpleSpanProcessor(memory))
    yield memory
    tracing.use_processor(None)


def test_traceparents_and_derived_children():
    parent = tracing.new_traceparent()
    trace_id, span_id = tracing.parse(parent)
    assert parent == f"00-{trace_id}-{span_id}-01" and len(trace_id) == 32 and len(span_id) == 16
    assert tracing.new_traceparent() != parent
    child = tracing.child(parent, tracing.ORCHESTRATE)
    assert child == tracing.child(parent, tracing.ORCHESTRATE)  # any process derives the same id
    assert tracing.trace_id_of(child) == trace_id and tracing.parse(child)[1] != span_id
    assert tracing.child(parent, "other") != child
    fresh = tracing.new_child(parent)
    assert tracing.trace_id_of(fresh) == trace_id and fresh not in (parent, child, tracing.new_child(parent))
    for bad in ("", "00-abc-def-01", f"00-{'0' * 32}-{span_id}-01", f"00-{'g' * 32}-{span_id}-01"):
        assert tracing.parse(bad) is None and tracing.child(bad, "x") == "" == tracing.new_child(bad)


def test_spans_are_recorded_with_their_ids_parents_and_times(exporter):
    root = tracing.new_traceparent()
    orchestrate = tracing.child(root, tracing.ORCHESTRATE)
    tracing.record_span("request", service="web", traceparent=root, start=100.0, end=101.5, attributes={"a": 1},
                        server=True)  # fmt: skip
    tracing.record_span("orchestrate", service="orchestrator", traceparent=orchestrate, parent=root, start=100.1,
                        end=101.4, attributes={"b": None}, error="stage 'echo': boom")  # fmt: skip
    web, orchestrator = exporter.get_finished_spans()
    assert f"{web.context.trace_id:032x}-{web.context.span_id:016x}" == "-".join(tracing.parse(root))
    assert web.parent is None and web.kind == SpanKind.SERVER and web.attributes == {"a": 1}
    assert (web.start_time, web.end_time) == (100_000_000_000, 101_500_000_000)
    assert web.resource.attributes["service.name"] == "omnistage-web"
    assert orchestrator.context.trace_id == web.context.trace_id
    assert orchestrator.parent.span_id == web.context.span_id
    assert f"{orchestrator.context.span_id:016x}" == tracing.parse(orchestrate)[1]
    assert (
        orchestrator.status.status_code == StatusCode.ERROR and orchestrator.status.description == "stage 'echo': boom"
    )
    assert dict(orchestrator.attributes) == {}  # None values are left out


def test_nothing_is_recorded_or_imported_when_tracing_is_off():
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    script = (
        "import sys; from stages import tracing\n"
        "parent = tracing.new_traceparent()\n"
        "tracing.record_span('request', service='web', traceparent=parent, start=1.0, end=2.0)\n"
        "print(tracing.enabled(), any(name.startswith('opentelemetry') for name in sys.modules))\n"
    )
    ran = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    assert ran.stdout.split() == ["False", "False"]
