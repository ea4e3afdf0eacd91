"""Compare-and-swap state transitions: a row moves only from the state its caller saw."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db import models
from django.dispatch import Signal
from django.utils import timezone

state_changed = Signal()
"""Sent (sender: the model, pk) after a row moved: queryset updates send no post_save."""

CAS_ATTEMPTS = 5
"""How often `transition_from_current` re-reads a row that another writer moved meanwhile."""


def transition(
    model: type[models.Model], pk, from_states: Iterable[str], to_state: str, *, at: datetime | None = None, **fields
) -> bool:
    """Move row `pk` to `to_state` if it is in one of `from_states`; True when it moved."""
    updated = model.objects.filter(pk=pk, state__in=list(from_states)).update(
        state=to_state, state_changed_at=at or timezone.now(), **fields
    )
    if updated == 1:
        state_changed.send(sender=model, pk=pk)
    return updated == 1


def transition_from_current(
    model: type[models.Model], pk, to_state: str, *, unless: Iterable[str] = (), **fields
) -> bool:
    """Move row `pk` to `to_state` from whatever state it is in now, except from `unless`.

    A compare-and-swap loop: read the state, swap from exactly that state, and read again
    when a concurrent writer moved the row in between. True when this call moved it."""
    skip = {to_state, *unless}
    for _ in range(CAS_ATTEMPTS):
        current = model.objects.filter(pk=pk).values_list("state", flat=True).first()
        if current is None or current in skip:
            return False
        if transition(model, pk, [current], to_state, **fields):
            return True
    return False
