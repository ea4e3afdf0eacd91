"""Compare-and-swap state transitions: a row moves only from the state its caller saw."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import models
from django.utils import timezone


def transition(model: type[models.Model], pk, from_states: Iterable[str], to_state: str, **fields) -> bool:
    """Move row `pk` to `to_state` if it is in one of `from_states`; True when it moved."""
    updated = model.objects.filter(pk=pk, state__in=list(from_states)).update(
        state=to_state, state_changed_at=timezone.now(), **fields
    )
    return updated == 1
