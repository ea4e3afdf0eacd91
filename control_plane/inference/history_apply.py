"""History events into the database: many requests' events in one transaction, idempotently.

Applying the same events twice (a redelivery after a writer crash, a reader catching up at
the same time as the writer) leaves the database as applying them once: opens insert with
ON CONFLICT DO NOTHING on the row's id, closes update only a row that is not final yet (the
first ending wins), artifacts and usage records insert with their own unique keys. A row
whose open, start and close are in one batch (most short requests) is inserted final, as one
statement. A closing that wins also feeds the Prometheus counters (metrics.py), so each request
counts once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import UTC, datetime

from django.contrib.auth import get_user_model
from django.db import transaction

from control_plane.accounts.models import ApiKey, UsageRecord
from control_plane.deployments.models import Deployment
from control_plane.inference import metrics
from control_plane.inference.history_events import (
    ORDER,
    ArtifactStored,
    HistoryEvent,
    ParametersAdded,
    RowClosed,
    RowOpened,
    RowStarted,
    UsageRecorded,
)
from control_plane.inference.history_statements import (
    close_unless_final,
    insert_all_unless_present,
    insert_unless_present,
)
from control_plane.inference.models import FINAL_STATUSES, Artifact, InferenceRequest, Status

log = logging.getLogger(__name__)


def moment(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, tz=UTC)


def history_apply(events: Iterable[HistoryEvent]) -> int:
    """Write `events` (of any number of requests) in one transaction; returns how many rows closed.

    Kinds in lifecycle order, rows in one order within a kind: two writers (a writer and a
    reader catching up) that overlap lock rows in the same order and cannot deadlock."""
    ordered = sorted(events, key=lambda event: (ORDER[type(event)], _subject(event)))
    starts: dict[str, RowStarted] = {}
    closes: dict[str, RowClosed] = {}
    for event in ordered:
        if isinstance(event, RowStarted):
            starts.setdefault(event.row_id, event)
        elif isinstance(event, RowClosed):
            closes.setdefault(event.row_id, event)
    with transaction.atomic():
        existing = _existing_references(ordered)
        inserted = _open([event for event in ordered if isinstance(event, RowOpened)], existing, starts, closes)
        for event in ordered:
            if isinstance(event, RowStarted) and event.row_id not in inserted:
                _start(event)
            elif isinstance(event, ParametersAdded):
                _add_parameters(event)
        _store_artifacts(event for event in ordered if isinstance(event, ArtifactStored))
        closed = [row_id for row_id in inserted if row_id in closes]
        closed += [row_id for row_id, event in closes.items() if row_id not in inserted and _close(event)]
        _record_usage((event for event in ordered if isinstance(event, UsageRecorded)), existing)
    _observe(closed)
    return len(closed)


def _subject(event: HistoryEvent) -> str:
    if isinstance(event, RowOpened):
        return event.id
    return getattr(event, "row_id", None) or event.request_id


def _existing_references(events: list[HistoryEvent]) -> dict[str, set]:
    """Which users, keys and deployments still exist: a row written after its deployment (or
    user, or key) was deleted keeps its names and loses the link, as deleting it would have done."""
    users, keys, deployments = set(), set(), set()
    for event in events:
        if isinstance(event, RowOpened | UsageRecorded):
            users.add(event.user_id)
            keys.add(event.api_key_id)
        if isinstance(event, RowOpened):
            deployments.add(event.deployment_id)
    return {
        "user": _present(get_user_model(), users),
        "key": _present(ApiKey, keys),
        "deployment": {str(pk) for pk in _present(Deployment, deployments)},
    }


def _present(model, keys: set) -> set:
    keys = keys - {None}
    return set(model.objects.filter(pk__in=keys).values_list("pk", flat=True)) if keys else set()


def _open(
    events: Iterable[RowOpened], existing: dict[str, set], starts: dict[str, RowStarted], closes: dict[str, RowClosed]
) -> set[str]:
    """Insert the rows that are new, each with its start and close when they are in the same
    batch (a short request is then one INSERT); returns the ids of the rows inserted."""
    inserted = set()
    for event in events:
        values = {
            "id": event.id,
            "request_id": event.request_id,
            "route": event.route,
            "user_id": event.user_id if event.user_id in existing["user"] else None,
            "api_key_id": event.api_key_id if event.api_key_id in existing["key"] else None,
            "deployment_id": event.deployment_id if event.deployment_id in existing["deployment"] else None,
            "deployment_name": event.deployment_name,
            "stream": event.stream,
            "inputs": event.inputs,
            "parameters": event.parameters,
            "modalities": event.modalities,
            "status": event.status,
            "created_at": moment(event.created_at),
            "started_at": moment(event.started_at),
            "attempts": event.attempts,
            "lease_expires_at": moment(event.lease_expires_at),
        }
        if event.id in starts:
            values.update(_started_values(starts[event.id]))
        if event.id in closes:
            values.update(_closed_values(closes[event.id]))
        if insert_unless_present(InferenceRequest, values):
            inserted.add(event.id)
    return inserted


def _start(event: RowStarted) -> None:
    InferenceRequest.objects.filter(pk=event.row_id).exclude(status__in=FINAL_STATUSES).update(**_started_values(event))


def _started_values(event: RowStarted) -> dict:
    return {"status": Status.RUNNING, "started_at": moment(event.started_at), "attempts": event.attempts}


def _add_parameters(event: ParametersAdded) -> None:
    row = InferenceRequest.objects.filter(request_id=event.request_id).only("parameters").first()
    if row is not None:
        InferenceRequest.objects.filter(pk=row.pk).update(parameters={**row.parameters, **event.parameters})


def _store_artifacts(events: Iterable[ArtifactStored]) -> None:
    artifacts = [
        Artifact(
            id=event.id,
            request_id=event.row_id,
            kind=event.kind,
            index=event.index,
            file=event.name,
            mime_type=event.mime_type,
            size_bytes=event.size_bytes,
            meta=event.meta,
            created_at=moment(event.created_at),
        )
        for event in events
    ]
    if not artifacts:
        return
    rows = {str(pk) for pk in _present(InferenceRequest, {artifact.request_id for artifact in artifacts})}
    kept = [artifact for artifact in artifacts if str(artifact.request_id) in rows]
    if len(kept) < len(artifacts):
        log.warning("%d artifacts of rows that do not exist were not recorded", len(artifacts) - len(kept))
    Artifact.objects.bulk_create(kept, ignore_conflicts=True)


def _close(event: RowClosed) -> bool:
    """Close the row unless it is final already (the first ending wins): True when this did."""
    return close_unless_final(event.row_id, _closed_values(event))


def _closed_values(event: RowClosed) -> dict:
    values = {
        "status": event.status,
        "http_status": event.http_status,
        "finish_reason": event.finish_reason,
        "error": event.error,
        "output_text": event.output_text,
        "usage": event.usage,
        "finished_at": moment(event.finished_at),
        "lease_expires_at": None,
        "queue_s": event.queue_s,
        "ttft_s": event.ttft_s,
        "tpot_s": event.tpot_s,
        "ttfp_s": event.ttfp_s,
        "e2el_s": event.e2el_s,
        "rtf": event.rtf,
    }
    if event.progress is not None:
        values["progress"] = event.progress
    if event.stage_metrics:
        values["stage_metrics"] = event.stage_metrics
    return values


def _record_usage(events: Iterable[UsageRecorded], existing: dict[str, set]) -> None:
    rows = [
        {
            "request_id": event.request_id,
            "user_id": event.user_id if event.user_id in existing["user"] else None,
            "api_key_id": event.api_key_id if event.api_key_id in existing["key"] else None,
            "deployment": event.deployment,
            "modality": event.modality,
            "created_at": moment(event.created_at),
            **event.amounts,
        }
        for event in events
    ]
    insert_all_unless_present(UsageRecord, rows)


def _observe(row_ids: list[str]) -> None:
    if not row_ids:
        return
    try:
        metrics.observe(InferenceRequest.objects.filter(pk__in=row_ids).only(*metrics.ROW_FIELDS))
    except Exception:  # metrics never lose history
        log.exception("could not record the metrics of %d requests", len(row_ids))
