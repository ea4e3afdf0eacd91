"""An error answered by ASGI middleware in front of Django, in OpenAI's error shape."""

from __future__ import annotations

import json


async def send_error(send, status: int, message: str, code: str) -> None:
    body = json.dumps(
        {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}
    ).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"connection", b"close")]  # fmt: skip
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
