"""The console's key form: a name, scopes, an optional expiry day and an optional allow-list of
deployments (the fields the keys REST API takes). The accounts service validates; this only
reads the browser's fields."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta

from django.core.exceptions import ValidationError
from django.utils import timezone

from control_plane.accounts.services import DEFAULT_SCOPES


@dataclass
class KeyForm:
    name: str = ""
    scopes: list[str] = field(default_factory=lambda: list(DEFAULT_SCOPES))
    expires_on: str = ""
    """A day (YYYY-MM-DD): the key works through the end of it. Empty: it never expires."""
    deployments: str = ""
    """Deployment names, separated by commas or spaces. Empty: every deployment."""

    @classmethod
    def blank(cls) -> KeyForm:
        return cls()

    @classmethod
    def from_post(cls, data) -> KeyForm:
        return cls(
            name=data.get("name", "").strip(),
            scopes=data.getlist("scopes"),
            expires_on=data.get("expires_on", "").strip(),
            deployments=data.get("allowed_deployments", "").strip(),
        )

    def expires_at(self) -> datetime | None:
        if not self.expires_on:
            return None
        try:
            day = date.fromisoformat(self.expires_on)
        except ValueError:
            raise ValidationError({"expires_at": "Enter a day as YYYY-MM-DD."}) from None
        return timezone.make_aware(datetime.combine(day + timedelta(days=1), time.min))

    def allowed_deployments(self) -> list[str]:
        return [name for name in re.split(r"[\s,]+", self.deployments) if name]

    def create_arguments(self) -> dict:
        return {
            "name": self.name,
            "scopes": self.scopes,
            "expires_at": self.expires_at(),
            "allowed_deployments": self.allowed_deployments(),
        }
