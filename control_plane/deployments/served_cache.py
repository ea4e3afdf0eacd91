"""RUNNING deployments by name, kept per process for the serving path (`/v1` resolves its
`model` from here with no query).

Only a RUNNING deployment is kept (any other answer is read again at the next request, so a
deployment that starts serves at once). Whatever moves a deployment or changes it or its
pipeline publishes the "deployment" topic (`control_plane.invalidation`) and every process
drops its entries; entries also expire after DEPLOYMENT_CACHE_TTL_S (default 30 s).
"""

from __future__ import annotations

from django.conf import settings

from control_plane import invalidation

TOPIC = "deployment"


def ttl_s() -> float:
    return float(getattr(settings, "DEPLOYMENT_CACHE_TTL_S", 30.0))


served_cache = invalidation.InvalidatedCache(TOPIC, ttl_s)


def deployments_changed(**kwargs) -> None:
    """Signal receiver: a deployment or pipeline row changed."""
    invalidation.publish(TOPIC)
