"""Strict readers for environment settings.

Every reader names the variable and the expected form when a value is malformed, and
`settings.py` turns those errors into one clear line at start-up instead of a stack trace.
"""

from __future__ import annotations

import os
from urllib.parse import urlparse


class EnvError(ValueError):
    def __init__(self, name: str, expected: str, value: str):
        super().__init__(f"environment variable {name}={value!r} is invalid: expected {expected}")
        self.name = name


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise EnvError(name, "a boolean (true/false, 1/0, yes/no, on/off)", value)


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise EnvError(name, "an integer", value) from None
    if minimum is not None and number < minimum:
        raise EnvError(name, f"an integer >= {minimum}", value)
    return number


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        number = float(value)
    except ValueError:
        raise EnvError(name, "a number", value) from None
    if minimum is not None and number < minimum:
        raise EnvError(name, f"a number >= {minimum}", value)
    return number


def env_list(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def env_choice(name: str, choices: tuple[str, ...], default: str) -> str:
    """One of `choices`, matched case-insensitively, returned as spelled in `choices`."""
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    by_lower = {choice.lower(): choice for choice in choices}
    if value.strip().lower() not in by_lower:
        raise EnvError(name, f"one of {', '.join(choices)}", value)
    return by_lower[value.strip().lower()]


def env_colon_tuples(name: str, default: list[str], fields: tuple[str, ...]) -> list[tuple[str, ...]]:
    """A comma list of `a:b:c` items, each with exactly the named non-empty fields."""
    items = env_list(name, default)
    expected = f"a comma list of {':'.join(fields)} items (empty for none)"
    parsed = []
    for item in items:
        parts = tuple(part.strip() for part in item.split(":"))
        if len(parts) != len(fields) or not all(parts):
            raise EnvError(name, expected, os.environ.get(name, ",".join(default)))
        parsed.append(parts)
    return parsed


DATABASE_SCHEMES = ("postgres", "postgresql", "sqlite")
REDIS_SCHEMES = ("redis", "rediss", "unix")


def env_url(name: str, schemes: tuple[str, ...], example: str) -> str | None:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return None
    parsed = urlparse(value)
    if parsed.scheme not in schemes or not (parsed.netloc or parsed.path):
        raise EnvError(name, f"a URL with scheme {'/'.join(schemes)}, e.g. {example}", value)
    if parsed.scheme in ("postgres", "postgresql", "redis", "rediss") and not parsed.hostname:
        raise EnvError(name, f"a URL with a host, e.g. {example}", value)
    try:
        parsed.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        raise EnvError(name, f"a URL with a numeric port, e.g. {example}", value) from None
    return value
