"""Brute-force throttling of password logins (admin, console, anything using `authenticate`).

Failed logins are counted in Redis per (username, client IP) and per client IP over a
fixed window; past either limit, logins from there are refused until the window ends,
even with the right password. A successful login clears the (username, IP) counter.

Counting hangs on Django's `user_login_failed` / `user_logged_in` signals (connected in
apps.py), so it sees every login path. Refusal happens in `ThrottledModelBackend` (needs
AUTHENTICATION_BACKENDS in settings) and in the admin's login form (forms.py), which also
says why. If Redis is down, logins are not throttled (logged), rather than locking every
operator out.

The client IP is REMOTE_ADDR: behind a reverse proxy, have the proxy set it (e.g. uvicorn
--proxy-headers / daphne --proxy-headers); X-Forwarded-For is not trusted here.

Settings: ACCOUNTS_LOGIN_MAX_FAILURES (5), ACCOUNTS_LOGIN_MAX_FAILURES_PER_IP (50),
ACCOUNTS_LOGIN_WINDOW_S (900).
"""

from __future__ import annotations

import logging

import redis
from django.conf import settings

from control_plane.accounts import redis_names

logger = logging.getLogger(__name__)


def _setting(name: str, default: int) -> int:
    return int(getattr(settings, name, default))


def client_ip(request) -> str:
    return (request.META.get("REMOTE_ADDR") if request is not None else None) or "unknown"


def login_blocked_for(username: str, ip: str) -> float:
    """Seconds until a login of `username` from `ip` is allowed again; 0 if allowed now."""
    try:
        pipe = redis_names.client().pipeline(transaction=False)
        for key in (redis_names.login_failures(username, ip), redis_names.login_failures_from_ip(ip)):
            pipe.get(key)
            pipe.ttl(key)
        user_failures, user_ttl, ip_failures, ip_ttl = pipe.execute()
    except redis.RedisError as error:
        logger.warning("login throttle unavailable (%s); not throttling", error.__class__.__name__)
        return 0.0
    blocked = 0.0
    if int(user_failures or 0) >= _setting("ACCOUNTS_LOGIN_MAX_FAILURES", 5):
        blocked = max(blocked, float(max(user_ttl, 1)))
    if int(ip_failures or 0) >= _setting("ACCOUNTS_LOGIN_MAX_FAILURES_PER_IP", 50):
        blocked = max(blocked, float(max(ip_ttl, 1)))
    return blocked


def login_failure_record(username: str, ip: str) -> None:
    window = _setting("ACCOUNTS_LOGIN_WINDOW_S", 900)
    try:
        pipe = redis_names.client().pipeline(transaction=True)
        for key in (redis_names.login_failures(username, ip), redis_names.login_failures_from_ip(ip)):
            pipe.set(key, 0, ex=window, nx=True)  # starts the window (EXPIRE NX needs Redis 7)
            pipe.incr(key)
        pipe.execute()
    except redis.RedisError as error:
        logger.warning("login throttle unavailable (%s); failure not counted", error.__class__.__name__)
        return
    logger.info("failed login from %s", ip)


def login_success_record(username: str, ip: str) -> None:
    try:
        redis_names.client().delete(redis_names.login_failures(username, ip))
    except redis.RedisError as error:
        logger.warning("login throttle unavailable (%s)", error.__class__.__name__)


def on_login_failed(sender, credentials, request=None, **kwargs) -> None:
    username = str(credentials.get("username") or "")
    login_failure_record(username, client_ip(request))


def on_logged_in(sender, request=None, user=None, **kwargs) -> None:
    if user is not None:
        login_success_record(user.get_username(), client_ip(request))
