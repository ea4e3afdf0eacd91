"""Read-only queries of the accounts app: HackSoft's "selectors" (a module named selectors
would shadow the standard library, which ruff's A005 forbids). They never write."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db.models import Count, Q, QuerySet, Sum
from django.db.models.functions import TruncDate

from control_plane.accounts import redis_names
from control_plane.accounts.models import WINDOW_SECONDS, ApiKey, Quota, UsageRecord, Window
from control_plane.inference.history_log import history_catch_up_for


@dataclass(frozen=True)
class QuotaLimit:
    """One applicable limit, resolved from a Quota rule for one subject (a user or a key)."""

    subject: str  # "u<id>" or "k<id>": the Redis counters are per subject
    subject_kind: str  # "user" or "key"
    metric: str
    window: str
    limit: int


def api_key_list(*, user) -> QuerySet[ApiKey]:
    return ApiKey.objects.filter(user=user).order_by("-created_at")


def api_key_get(*, user, key_id) -> ApiKey | None:
    return ApiKey.objects.filter(user=user, pk=key_id).first()


_limits_cache: dict[tuple[int, int | None], tuple[float, list[QuotaLimit]]] = {}
_LIMITS_CACHE_MAX = 10_000


def quota_limits_for(*, user, api_key=None) -> list[QuotaLimit]:
    """The active limits for a request by `user` (with `api_key`, if any).

    User rules override default rules of the same metric and window; key rules add to them.
    Cached per process for ACCOUNTS_QUOTA_RULES_TTL_S (default 5 s; 0 disables): a rule saved
    here applies at once (post_save clears the cache), elsewhere within the TTL.
    """
    ttl = float(getattr(settings, "ACCOUNTS_QUOTA_RULES_TTL_S", 5.0))
    cache_key = (user.pk, getattr(api_key, "pk", None))
    now = time.monotonic()
    cached = _limits_cache.get(cache_key)
    if cached is not None and now - cached[0] < ttl:
        return cached[1]
    limits = _load_quota_limits(user, api_key)
    if ttl > 0:
        if len(_limits_cache) >= _LIMITS_CACHE_MAX:
            _limits_cache.clear()
        _limits_cache[cache_key] = (now, limits)
    return limits


def quota_limits_cached(*, user, api_key=None) -> list[QuotaLimit] | None:
    """The limits `quota_limits_for` would return from its cache, or None when they must be read."""
    ttl = float(getattr(settings, "ACCOUNTS_QUOTA_RULES_TTL_S", 5.0))
    cached = _limits_cache.get((user.pk, getattr(api_key, "pk", None)))
    if cached is None or time.monotonic() - cached[0] >= ttl:
        return None
    return cached[1]


def quota_limits_forget(**kwargs) -> None:
    """Signal receiver (apps.py): a Quota row changed, cached limits are stale."""
    _limits_cache.clear()


def _load_quota_limits(user, api_key) -> list[QuotaLimit]:
    subjects = Q(user=user, api_key__isnull=True) | Q(user__isnull=True, api_key__isnull=True)
    if api_key is not None:
        subjects |= Q(api_key=api_key, user__isnull=True)
    rules = list(Quota.objects.filter(subjects, is_active=True).order_by("metric", "window"))
    own = {(rule.metric, rule.window) for rule in rules if rule.user_id is not None}
    limits = []
    for rule in rules:
        if rule.api_key_id is not None:
            limits.append(QuotaLimit(f"k{rule.api_key_id}", "key", rule.metric, rule.window, rule.limit))
        elif rule.user_id is not None or (rule.metric, rule.window) not in own:
            limits.append(QuotaLimit(f"u{user.pk}", "user", rule.metric, rule.window, rule.limit))
    return limits


@dataclass(frozen=True)
class QuotaStatus:
    limit: QuotaLimit
    used: float
    reset_s: float

    @property
    def remaining(self) -> float:
        return max(0.0, self.limit.limit - self.used)


def quota_status(*, user, api_key=None) -> list[QuotaStatus]:
    """Current use of every limit that applies to `user` / `api_key` (Redis counters, read only)."""
    limits = quota_limits_for(user=user, api_key=api_key)
    if not limits:
        return []
    client = redis_names.client()
    now = time.time()
    pipe = client.pipeline(transaction=False)
    resets = []
    for limit in limits:
        if limit.window == Window.NONE:
            pipe.zcount(redis_names.quota_slots(limit.subject), f"({now}", "+inf")
            resets.append(0.0)
        else:
            window = WINDOW_SECONDS[limit.window]
            index = math.floor(now / window)
            pipe.get(f"{redis_names.quota_counter(limit.subject, limit.metric, limit.window)}:{index}")
            resets.append((index + 1) * window - now)
    values = pipe.execute()
    return [
        QuotaStatus(limit, float(value or 0), reset) for limit, value, reset in zip(limits, values, resets, strict=True)
    ]


USAGE_AMOUNTS = (
    "text_tokens_in",
    "text_tokens_out",
    "audio_seconds_in",
    "audio_seconds_out",
    "images",
    "video_seconds",
    "realtime_minutes",
)

# group name -> the value columns it adds to each row
USAGE_GROUPS = {
    "user": ("user_id", "user__username"),
    "key": ("api_key_id", "api_key__prefix", "api_key__name"),
    "deployment": ("deployment",),
    "modality": ("modality",),
    "day": ("day",),
}

# how a value column is called in the API and the CSV
USAGE_COLUMN_NAMES = {
    "user_id": "user_id",
    "user__username": "username",
    "api_key_id": "key_id",
    "api_key__prefix": "key_prefix",
    "api_key__name": "key_name",
    "deployment": "deployment",
    "modality": "modality",
    "day": "day",
}


def usage_records(
    *,
    start: datetime,
    end: datetime,
    user=None,
    api_key_id: int | None = None,
    deployments: Iterable[str] | None = None,
    modality: str | None = None,
) -> QuerySet[UsageRecord]:
    """Usage in [start, end), narrowed to a user, a key, deployments, a modality when given; what
    the history writer has not written yet of those users' requests is written first."""
    history_catch_up_for(user_id=getattr(user, "pk", None), everyone=user is None)
    records = UsageRecord.objects.filter(created_at__gte=start, created_at__lt=end)
    if user is not None:
        records = records.filter(user=user)
    if api_key_id is not None:
        records = records.filter(api_key_id=api_key_id)
    if deployments is not None:
        records = records.filter(deployment__in=list(deployments))
    if modality:
        records = records.filter(modality=modality)
    return records


def usage_summary(records: QuerySet[UsageRecord], group_by: list[str]) -> tuple[list[dict], dict]:
    """(rows, totals): per group, the request count and the sum of every amount."""
    sums = {name: Sum(name) for name in USAGE_AMOUNTS}
    totals = records.aggregate(requests=Count("id"), **sums)
    columns = [column for group in group_by for column in USAGE_GROUPS[group]]
    grouped = records.annotate(day=TruncDate("created_at")) if "day" in group_by else records
    rows = grouped.values(*columns).annotate(requests=Count("id"), **sums).order_by(*columns) if columns else []
    return [_usage_row(row, columns) for row in rows], _amounts(totals)


def _usage_row(row: dict, columns: list[str]) -> dict:
    named = {USAGE_COLUMN_NAMES[column]: row[column] for column in columns}
    return {**named, **_amounts(row)}


def _amounts(values: dict) -> dict:
    amounts = {"requests": values["requests"] or 0}
    for name in USAGE_AMOUNTS:
        amounts[name] = values[name] or 0
    return amounts


def realtime_rate_limits(*, user, api_key=None) -> list[dict]:
    """The `rate_limits` list of a Realtime `rate_limits.updated` event: one entry per limit
    (name "requests", "tokens" for text tokens, else the metric), tightest first."""
    names = {"requests": "requests", "text_tokens": "tokens"}
    states = sorted(quota_status(user=user, api_key=api_key), key=lambda state: state.remaining)
    return [
        {
            "name": names.get(state.limit.metric, state.limit.metric),
            "limit": state.limit.limit,
            "remaining": state.remaining,
            "reset_seconds": round(state.reset_s, 3),
        }
        for state in states
        if state.limit.metric != "concurrent_requests"
    ]
