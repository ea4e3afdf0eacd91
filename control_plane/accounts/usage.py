"""Usage accounting: one UsageRecord per request, with the amounts it consumed."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from django.db import IntegrityError, transaction

from control_plane.accounts.models import Metric, UsageRecord
from control_plane.accounts.quota import Admission, QuotaUnavailable, quota_settle

logger = logging.getLogger(__name__)


def usage_entry(
    modality: str,
    *,
    text_tokens_in: int = 0,
    text_tokens_out: int = 0,
    audio_seconds_in: float = 0.0,
    audio_seconds_out: float = 0.0,
    images: int = 0,
    video_seconds: float = 0.0,
    realtime_minutes: float = 0.0,
) -> dict[str, float]:
    """The amounts of one usage record, checked (ValueError for an unknown modality or a negative amount)."""
    if modality not in UsageRecord.Modality.values:
        raise ValueError(f"unknown modality {modality!r}: expected one of {UsageRecord.Modality.values}")
    amounts = {
        "text_tokens_in": text_tokens_in,
        "text_tokens_out": text_tokens_out,
        "audio_seconds_in": audio_seconds_in,
        "audio_seconds_out": audio_seconds_out,
        "images": images,
        "video_seconds": video_seconds,
        "realtime_minutes": realtime_minutes,
    }
    negative = [name for name, amount in amounts.items() if amount < 0]
    if negative:
        raise ValueError(f"usage amounts must be >= 0: {negative}")
    return amounts


def usage_record(
    *,
    request_id: str,
    user,
    api_key=None,
    deployment: str = "",
    modality: str,
    admission: Admission | str | None = None,
    **amounts: float,
) -> UsageRecord:
    """Record what request `request_id` used and, given its admission, settle its quota, at once.

    Idempotent by request id: a redelivered completion returns the existing record and does
    not debit twice (settling an admission twice is a no-op too). The serving path does not
    call this: its request runs append usage to the history log (control_plane.inference).
    """
    amounts = usage_entry(modality, **amounts)
    try:
        with transaction.atomic():
            record = UsageRecord.objects.create(
                request_id=request_id,
                user=user,
                api_key=api_key,
                deployment=getattr(deployment, "name", deployment) or "",
                modality=modality,
                **amounts,
            )
    except IntegrityError:
        record = UsageRecord.objects.get(request_id=request_id)
    if admission is not None:
        try:
            quota_settle(admission, usage_quota_amounts(amounts))
        except QuotaUnavailable:
            # the record is safe in the database; the counters keep the estimate until their window ends
            logger.warning("quota not settled for request %s: quota store unavailable", request_id)
    return record


def usage_quota_amounts(amounts: Mapping[str, float]) -> dict[str, float]:
    """What a usage record's amounts debit from each quota metric (text tokens count in and out)."""
    return {
        Metric.TEXT_TOKENS: amounts.get("text_tokens_in", 0) + amounts.get("text_tokens_out", 0),
        Metric.AUDIO_SECONDS_IN: amounts.get("audio_seconds_in", 0.0),
        Metric.AUDIO_SECONDS_OUT: amounts.get("audio_seconds_out", 0.0),
        Metric.IMAGES: amounts.get("images", 0),
        Metric.VIDEO_SECONDS: amounts.get("video_seconds", 0.0),
        Metric.REALTIME_MINUTES: amounts.get("realtime_minutes", 0.0),
    }
