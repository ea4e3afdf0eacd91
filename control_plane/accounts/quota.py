"""Quota admission for the serving path: reserve before work, settle with actual usage after.

    admission = quota_admit(user=user, api_key=key, estimate={"text_tokens": prompt + max_tokens})
    try:
        ... run the request ...
        quota_settle(admission, {"text_tokens": used_tokens})   # debits actual usage, frees the slot
    except NothingWasDone:
        quota_refund(admission)                                   # returns every reservation but the request

- `quota_admit` raises `QuotaExceeded` (turn it into a 429 with
  `inference.errors.quota_exceeded_error`) or `QuotaUnavailable` (Redis is down: 503).
- Every admission counts one request; `estimate` reserves the other metrics (an upper
  bound: prompt tokens + max_tokens, requested audio seconds, n images...). Nothing is
  reserved for a metric the estimate leaves out, and such a metric is not checked.
- Settling moves each reservation to the actual amount, so a request may end above its
  estimate (the counter then passes the limit and later admissions wait for the window).
- `quota_settle`, `quota_refund` and `quota_release` are idempotent and take an Admission
  or its id, so another process (a Celery task, the orchestrator) may settle.
- Concurrency slots are leases (`ACCOUNTS_QUOTA_LEASE_S`, default 600 s): a crashed web node
  cannot hold a slot forever; long jobs call `quota_renew` before the lease ends.
- Windows are fixed and aligned to UTC (a minute, an hour, a day starting 00:00 UTC).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

import redis
from django.conf import settings

from control_plane.accounts import quota_scripts, redis_names
from control_plane.accounts.models import WINDOW_SECONDS, Metric, Window
from control_plane.accounts.queries import QuotaLimit, quota_limits_cached, quota_limits_for
from control_plane.orm_threads import orm_in_thread

ESTIMABLE_METRICS = frozenset(Metric.values) - {Metric.REQUESTS, Metric.CONCURRENT_REQUESTS}
ADMISSION_TTL_S = 86400 + 3600


def lease_seconds() -> float:
    return float(getattr(settings, "ACCOUNTS_QUOTA_LEASE_S", 600))


@dataclass(frozen=True)
class LimitState:
    """A limit as seen at admission time: how much is used and when its window resets."""

    limit: QuotaLimit
    used: float
    reset_s: float

    @property
    def remaining(self) -> float:
        return max(0.0, self.limit.limit - self.used)


@dataclass(frozen=True)
class Admission:
    id: str
    user_id: int
    api_key_id: int | None
    estimate: dict[str, float]
    states: tuple[LimitState, ...] = field(default=())

    @property
    def headers(self) -> dict[str, str]:
        """x-ratelimit-* headers for the successful response."""
        return ratelimit_headers(self.states)


class QuotaExceeded(Exception):
    """A limit would be passed. `headers` carry Retry-After and the x-ratelimit-* set."""

    def __init__(self, state: LimitState, requested: float, states: tuple[LimitState, ...]):
        self.state = state
        self.limit = state.limit
        self.requested = requested
        self.retry_after_s = max(1, math.ceil(state.reset_s))
        self.headers = {
            **ratelimit_headers(states),
            "Retry-After": str(self.retry_after_s),
            "retry-after-ms": str(max(1000, math.ceil(state.reset_s * 1000))),
        }
        super().__init__(self.message)

    @property
    def message(self) -> str:
        limit = self.limit
        if limit.metric == Metric.CONCURRENT_REQUESTS:
            return (
                f"Concurrency limit reached for this {limit.subject_kind}: {limit.limit} requests at a time. "
                "Retry when one of your requests has finished."
            )
        window = Window(limit.window).label
        if self.requested > limit.limit:
            return (
                f"Request too large for the {limit.subject_kind} quota on {limit.metric} {window}: "
                f"limit {_amount(limit.limit)}, requested {_amount(self.requested)}."
            )
        return (
            f"Rate limit reached for this {limit.subject_kind} on {limit.metric} {window}: "
            f"limit {_amount(limit.limit)}, used {_amount(self.state.used)}, requested {_amount(self.requested)}. "
            f"Please try again in {_duration(self.state.reset_s)}."
        )

    @property
    def error_type(self) -> str:
        """OpenAI's 429 `type`: "requests" or "tokens" for those limits, else the metric."""
        metric = self.limit.metric
        if metric in (Metric.REQUESTS, Metric.CONCURRENT_REQUESTS):
            return "requests"
        return "tokens" if metric == Metric.TEXT_TOKENS else metric


class QuotaUnavailable(Exception):
    """Redis did not answer: admission fails closed (503), it never admits unchecked."""


def quota_admit(*, user, api_key=None, estimate: Mapping[str, float] | None = None) -> Admission:
    amounts = _validated_estimate(estimate or {})
    limits = quota_limits_for(user=user, api_key=api_key)
    admission_id = uuid.uuid4().hex
    admission = Admission(admission_id, user.pk, getattr(api_key, "pk", None), amounts)
    if not limits:
        return admission
    windowed = [limit for limit in limits if limit.metric != Metric.CONCURRENT_REQUESTS]
    slots = [limit for limit in limits if limit.metric == Metric.CONCURRENT_REQUESTS]
    keys = [redis_names.admission(admission_id)]
    keys += [redis_names.quota_counter(limit.subject, limit.metric, limit.window) for limit in windowed]
    keys += [redis_names.quota_slots(limit.subject) for limit in slots]
    args: list = [admission_id, len(windowed), len(slots), lease_seconds(), ADMISSION_TTL_S]
    for limit in windowed:
        args += [limit.limit, _requested(limit, amounts), WINDOW_SECONDS[limit.window], limit.metric]
    args += [limit.limit for limit in slots]
    reply = _run(quota_scripts.ADMIT, keys, args)
    failed = int(reply[0])
    ordered = windowed + slots
    states = tuple(
        LimitState(limit, float(reply[1 + 2 * i]), float(reply[2 + 2 * i])) for i, limit in enumerate(ordered)
    )
    if failed:
        state = states[failed - 1]
        raise QuotaExceeded(state, _requested(state.limit, amounts), states)
    return Admission(admission_id, user.pk, admission.api_key_id, amounts, states)


def quota_settle(admission: Admission | str, actual: Mapping[str, float]) -> bool:
    """Debit what the request actually used and free its concurrency slot. False if already settled."""
    amounts = _validated_estimate(actual)
    amounts[Metric.REQUESTS] = 1
    args = [_id(admission)]
    for metric, amount in amounts.items():
        args += [metric, amount]
    return bool(_run(quota_scripts.SETTLE, [redis_names.admission(_id(admission))], args))


def quota_refund(admission: Admission | str) -> bool:
    """Return every reservation of work that was never done. The request itself still counts."""
    return quota_settle(admission, {})


def quota_release(admission: Admission | str) -> int:
    """Free the concurrency slot now (e.g. the client went away) and settle later."""
    return int(_run(quota_scripts.RELEASE, [redis_names.admission(_id(admission))], [_id(admission)]))


def quota_renew(admission: Admission | str) -> int:
    """Extend the concurrency lease of a long request. Returns the number of slots still held."""
    args = [_id(admission), lease_seconds(), ADMISSION_TTL_S]
    return int(_run(quota_scripts.RENEW, [redis_names.admission(_id(admission))], args))


# From async code: on a pooled thread, not the caller's thread-sensitive one (orm_threads.py).
# A caller with no limits (known from the rules' cache) is admitted without a thread or a Redis
# call, and its admission has nothing to settle.
_admit_in_thread = orm_in_thread(quota_admit)
_settle_in_thread = orm_in_thread(quota_settle)
_refund_in_thread = orm_in_thread(quota_refund)
aquota_release = orm_in_thread(quota_release)


async def aquota_admit(*, user, api_key=None, estimate: Mapping[str, float] | None = None) -> Admission:
    if quota_limits_cached(user=user, api_key=api_key) == []:
        amounts = _validated_estimate(estimate or {})
        return Admission(uuid.uuid4().hex, user.pk, getattr(api_key, "pk", None), amounts)
    return await _admit_in_thread(user=user, api_key=api_key, estimate=estimate)


async def aquota_settle(admission: Admission, actual: Mapping[str, float]) -> bool:
    if not admission.states:  # admitted under no limit: no reservation, no slot, no counter
        return False
    return await _settle_in_thread(admission, actual)


async def aquota_refund(admission: Admission) -> bool:
    if not admission.states:
        return False
    return await _refund_in_thread(admission)


aquota_renew = orm_in_thread(quota_renew)


def ratelimit_headers(states: tuple[LimitState, ...]) -> dict[str, str]:
    """OpenAI's x-ratelimit-{limit,remaining,reset}-{requests,tokens}, from the tightest limit of each."""
    headers = {}
    for metric, suffix in ((Metric.REQUESTS, "requests"), (Metric.TEXT_TOKENS, "tokens")):
        candidates = [state for state in states if state.limit.metric == metric]
        if not candidates:
            continue
        tightest = min(candidates, key=lambda state: (state.remaining, -state.reset_s))
        headers[f"x-ratelimit-limit-{suffix}"] = str(tightest.limit.limit)
        headers[f"x-ratelimit-remaining-{suffix}"] = str(math.floor(tightest.remaining))
        headers[f"x-ratelimit-reset-{suffix}"] = _duration(tightest.reset_s)
    return headers


def _validated_estimate(estimate: Mapping[str, float]) -> dict[str, float]:
    amounts = {}
    for metric, amount in estimate.items():
        if metric not in ESTIMABLE_METRICS:
            raise ValueError(f"unknown quota metric {metric!r}: expected one of {sorted(ESTIMABLE_METRICS)}")
        if amount is None or not math.isfinite(amount) or amount < 0:
            raise ValueError(f"quota amount for {metric!r} must be a finite number >= 0, got {amount!r}")
        if amount:
            amounts[str(metric)] = float(amount)
    return amounts


def _requested(limit: QuotaLimit, amounts: dict[str, float]) -> float:
    if limit.metric in (Metric.REQUESTS, Metric.CONCURRENT_REQUESTS):
        return 1.0
    return amounts.get(limit.metric, 0.0)


def _id(admission: Admission | str) -> str:
    return admission if isinstance(admission, str) else admission.id


def _run(script: str, keys: list[str], args: list):
    try:
        return redis_names.client().register_script(script)(keys=keys, args=args)
    except redis.RedisError as error:
        raise QuotaUnavailable(f"quota store unavailable: {error.__class__.__name__}") from error


def _amount(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.2f}"


def _duration(seconds: float) -> str:
    """Go-style durations as OpenAI sends them: "20ms", "1s", "6m0s", "1h2m3s"."""
    if seconds < 1:
        return f"{max(0, math.ceil(seconds * 1000))}ms"
    total = math.ceil(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"
