"""A query parameter's date or moment: "YYYY-MM-DD" (a whole day) or an ISO 8601 datetime, as the
REST list filters take them."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from rest_framework import serializers


def query_moment(value: str, *, end_of_day: bool) -> datetime:
    try:  # a date first: parse_datetime would read "2026-11-03" as that day's midnight
        day = parse_date(value)
        moment = parse_datetime(value) if day is None else None
    except ValueError:
        moment = day = None
    if moment is None and day is None:
        raise serializers.ValidationError("Expected a date (YYYY-MM-DD) or an ISO 8601 datetime.")
    if moment is None:
        moment = datetime.combine(day + timedelta(days=1) if end_of_day else day, time.min)
    return timezone.make_aware(moment, UTC) if timezone.is_naive(moment) else moment
