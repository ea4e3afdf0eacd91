"""A session's place in the user's quota: one concurrency slot for its whole life and its
minutes of `realtime_minutes`.

Admission reserves `RESERVED_MINUTES` and a slot (a user with `concurrent_requests` 2 may
hold two sessions, or one session and one other request). While the session runs,
`check()` renews the slot's lease and ends the session once its minutes beyond the
reservation would pass a `realtime_minutes` limit. Each response's request run charges the
session (`ResponseCharge`) instead of a quota of its own. At the end, `settle()` debits the
minutes and the session's total tokens and audio seconds, and frees the slot; `session_close`
does that and records the session's minutes as a usage record.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from asgiref.sync import sync_to_async

from control_plane.accounts.models import Metric
from control_plane.accounts.queries import quota_status, realtime_rate_limits
from control_plane.accounts.quota import Admission, quota_admit, quota_renew, quota_settle
from control_plane.accounts.usage import usage_entry
from control_plane.inference.history_events import UsageRecorded
from control_plane.inference.history_log import history_append
from control_plane.inference.outcome import Usage

log = logging.getLogger(__name__)

RESERVED_MINUTES = 1.0


@dataclass
class SessionQuota:
    user: object
    api_key: object | None
    admission: Admission | None = None
    started: float = field(default_factory=time.monotonic)
    text_tokens: int = 0
    audio_seconds_in: float = 0.0
    audio_seconds_out: float = 0.0
    settled: bool = False

    def admit(self) -> None:
        """Raises QuotaExceeded (no slot free, minutes used up) or QuotaUnavailable."""
        estimate = {Metric.REALTIME_MINUTES: RESERVED_MINUTES}
        self.admission = quota_admit(user=self.user, api_key=self.api_key, estimate=estimate)
        self.started = time.monotonic()

    @property
    def minutes(self) -> float:
        return (time.monotonic() - self.started) / 60.0

    @property
    def overrun_minutes(self) -> float:
        return max(0.0, self.minutes - RESERVED_MINUTES)

    def exhausted(self) -> bool:
        """Renew the slot; True when this session's minutes have used up a realtime_minutes limit."""
        if self.admission is not None:
            quota_renew(self.admission)
        overrun = self.overrun_minutes
        return any(
            status.used + overrun >= status.limit.limit
            for status in quota_status(user=self.user, api_key=self.api_key)
            if status.limit.metric == Metric.REALTIME_MINUTES
        )

    def rate_limits(self) -> list[dict]:
        """The `rate_limits.updated` list, the session's unsettled minutes counted."""
        limits = realtime_rate_limits(user=self.user, api_key=self.api_key)
        for entry in limits:
            if entry["name"] == Metric.REALTIME_MINUTES:
                entry["remaining"] = round(max(0.0, entry["remaining"] - self.overrun_minutes), 3)
        return limits

    def settle(self) -> dict[str, float]:
        """Debit what the session used and free its slot (idempotent); returns the amounts."""
        amounts = {
            Metric.REALTIME_MINUTES: round(self.minutes, 4),
            Metric.TEXT_TOKENS: self.text_tokens,
            Metric.AUDIO_SECONDS_IN: round(self.audio_seconds_in, 4),
            Metric.AUDIO_SECONDS_OUT: round(self.audio_seconds_out, 4),
        }
        if self.admission is not None and not self.settled:
            quota_settle(self.admission, amounts)
        self.settled = True
        return amounts


class ResponseCharge:
    """A response's charge (see request_run.RequestCharge): the session holds the admission, so a
    response adds what it used to the session's totals, settled when the session ends."""

    def __init__(self, quota: SessionQuota):
        self.quota = quota
        self.headers: dict[str, str] = {}

    async def admit(self, estimate: dict[str, float]) -> None:
        pass

    async def settle(self, usage: Usage) -> None:
        self.quota.text_tokens += usage.prompt_tokens + usage.completion_tokens
        self.quota.audio_seconds_out += usage.audio_seconds

    async def refund(self) -> None:
        pass


async def session_close(client, *, principal, session_id: str, deployment: str, quota: SessionQuota) -> None:
    """Settle the session's quota and record its minutes (a usage record of its own)."""
    try:
        amounts = await sync_to_async(quota.settle)()
        user = principal.user
        record = UsageRecorded(
            request_id=session_id, user_id=user.pk, api_key_id=getattr(principal.api_key, "pk", None),
            deployment=deployment, modality="realtime", created_at=time.time(),
            amounts=usage_entry("realtime", realtime_minutes=float(amounts[Metric.REALTIME_MINUTES])),
        )  # fmt: skip
        await history_append(client, session_id, user.pk, [record])
    except Exception:
        log.exception("could not settle realtime session %s", session_id)
