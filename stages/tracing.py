"""Request traces: one trace per request, its context carried through the Redis messages as a
W3C `traceparent` string (`StageRequest.trace`), and spans exported with OpenTelemetry when
`OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set.

    web (serve)          span `request`        id W, a new trace T     Submit.request.trace = 00-T-W-01
    orchestrator         span `orchestrate`    id O = child(W)         stage requests carry 00-T-O-01
    replica host         span `stage <name>`   parent O

Every span is recorded once its work ended, from the times the process kept, with ids chosen
here (the orchestrator's is derived from its parent's, so that any orchestrator, in any order,
names it alike). Off (no endpoint): ids are still made and carried (a few bytes per message), and
nothing else happens: OpenTelemetry is not even imported.

`OTEL_EXPORTER_OTLP_PROTOCOL=grpc` exports over gRPC; anything else over HTTP/protobuf. The
standard `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES` and `OTEL_BSP_*` settings apply.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import threading
from typing import Any

log = logging.getLogger(__name__)

ORCHESTRATE = "orchestrate"
"""The orchestrator's span of a request (its id derives from the submitter's)."""
VERSION = "00"
SAMPLED = "01"
_lock = threading.Lock()
_processor: Any = None
"""None: not decided yet; False: tracing is off; else the span processor spans go to."""
_resources: dict[str, Any] = {}


# ------------------------------------------------------------------ trace context (no SDK)


def new_traceparent() -> str:
    """A new trace, and the id of its root span."""
    return f"{VERSION}-{os.urandom(16).hex()}-{os.urandom(8).hex()}-{SAMPLED}"


def parse(traceparent: str) -> tuple[str, str] | None:
    """(trace id, span id) of a traceparent, None when it is not one."""
    parts = traceparent.split("-")
    if len(parts) != 4 or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None
    try:
        if int(parts[1], 16) == 0 or int(parts[2], 16) == 0:
            return None
    except ValueError:
        return None
    return parts[1], parts[2]


def trace_id_of(traceparent: str) -> str:
    parsed = parse(traceparent)
    return parsed[0] if parsed else ""


def child(traceparent: str, name: str) -> str:
    """The traceparent of the span `name` under `traceparent`'s span, with an id derived from both
    (the same in every process), or "" when `traceparent` is not one."""
    parsed = parse(traceparent)
    if parsed is None:
        return ""
    trace_id, parent_id = parsed
    span_id = hashlib.blake2b(f"{parent_id}/{name}".encode(), digest_size=8).hexdigest()
    if int(span_id, 16) == 0:
        span_id = "0000000000000001"
    return f"{VERSION}-{trace_id}-{span_id}-{SAMPLED}"


# ------------------------------------------------------------------ recording spans


def enabled() -> bool:
    """Whether spans are exported (decided once per process, from the environment)."""
    global _processor
    if _processor is None:
        with _lock:
            if _processor is None:
                _processor = _processor_from_environment()
    return _processor is not False


def record_span(
    name: str,
    *,
    service: str,
    traceparent: str,
    parent: str = "",
    start: float,
    end: float,
    attributes: dict[str, Any] | None = None,
    error: str | None = None,
    server: bool = False,
) -> None:
    """Export a finished span whose own context is `traceparent`, under `parent`'s span (none:
    a root span). Times are UNIX seconds. `server`: the span of a request a client made (kind
    SERVER, else INTERNAL). Does nothing when tracing is off."""
    if not enabled():
        return
    own = parse(traceparent)
    if own is None:
        return
    try:
        _record(name, service, own, parse(parent), start, end, attributes or {}, error, server)
    except Exception:  # tracing never fails a request
        log.exception("could not record span %s", name)


def new_child(traceparent: str) -> str:
    """A traceparent for a new span under `traceparent`'s span, with a random id ("" when
    `traceparent` is not one)."""
    parsed = parse(traceparent)
    if parsed is None:
        return ""
    return f"{VERSION}-{parsed[0]}-{os.urandom(8).hex()}-{SAMPLED}"


def use_processor(processor) -> None:
    """Send spans to `processor` (an OpenTelemetry SpanProcessor), or turn tracing off with None."""
    global _processor
    with _lock:
        _processor = processor if processor is not None else False


def _record(name, service, own, parent, start, end, attributes, error, server) -> None:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, SpanKind, TraceFlags
    from opentelemetry.trace.status import Status, StatusCode

    flags = TraceFlags(TraceFlags.SAMPLED)
    context = SpanContext(trace_id=int(own[0], 16), span_id=int(own[1], 16), is_remote=False, trace_flags=flags)
    parent_context = None
    if parent is not None:
        parent_context = SpanContext(
            trace_id=int(parent[0], 16), span_id=int(parent[1], 16), is_remote=True, trace_flags=flags
        )
    status = Status(StatusCode.ERROR, error) if error else Status(StatusCode.OK)
    span = ReadableSpan(
        name=name,
        context=context,
        parent=parent_context,
        resource=_resource(service),
        attributes={key: value for key, value in attributes.items() if value is not None},
        kind=SpanKind.SERVER if server else SpanKind.INTERNAL,
        status=status,
        start_time=int(start * 1e9),
        end_time=int(max(end, start) * 1e9),
        instrumentation_scope=InstrumentationScope("omnistage"),
    )
    _processor.on_end(span)


def _resource(service: str):
    resource = _resources.get(service)
    if resource is None:
        from opentelemetry.sdk.resources import Resource

        resource = _resources[service] = Resource.create({"service.name": f"omnistage-{service}"})
    return resource


def _processor_from_environment():
    if not (os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")):
        return False
    try:
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        processor = BatchSpanProcessor(OTLPSpanExporter())
    except Exception:
        log.exception("tracing is off: the OTLP exporter could not be set up")
        return False
    atexit.register(processor.shutdown)  # export what is left when the process exits
    return processor
