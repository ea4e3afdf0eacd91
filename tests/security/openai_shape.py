"""Assertions shared by the security tests: OpenAI's error shape, and no server error."""

from __future__ import annotations

import httpx


def assert_openai_error(response: httpx.Response, status: int | tuple[int, ...], what: str = "") -> dict:
    statuses = status if isinstance(status, tuple) else (status,)
    label = what or f"{response.request.method} {response.request.url.path}"
    assert response.status_code in statuses, f"{label}: {response.status_code} {response.text[:300]}"
    error = response.json()["error"]
    assert set(error) >= {"message", "type", "param", "code"}, f"{label}: {error}"
    assert isinstance(error["message"], str) and error["message"], f"{label}: {error}"
    assert "Traceback" not in error["message"] and " object at 0x" not in error["message"], f"{label}: {error}"
    return error
