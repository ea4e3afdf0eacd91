"""`POST /v1/realtime/client_secrets`: a short-lived secret a browser opens a session with.

    {"expires_after": {"anchor": "created_at", "seconds": 600},
     "session": {"type": "realtime", "model": "<deployment>", ...session fields...}}
    -> {"value": "ek_...", "expires_at": <unix seconds>, "session": {...the session in effect...}}

The caller needs the inference scope and access to the deployment; the secret carries
both (a key's allow-list included) and the session configuration it starts with.
"""

from __future__ import annotations

import time

from django.http import JsonResponse

from control_plane.inference.errors import ApiError, openai_endpoint
from control_plane.inference.targets import served_deployment
from control_plane.openai_compat.access import authenticate
from control_plane.openai_compat.bodies import read_json
from control_plane.realtime.client_secrets import DEFAULT_TTL_S, MAX_TTL_S, MIN_TTL_S, client_secret_mint
from control_plane.realtime.events import ProtocolError, new_id
from control_plane.realtime.session_config import SessionConfig
from control_plane.redis_client import get_async_redis


@openai_endpoint("POST")
async def client_secrets(request):
    caller = await authenticate(request)
    body = read_json(request)
    ttl = _ttl(body.get("expires_after"))
    session = body.get("session") or {}
    if not isinstance(session, dict):
        raise ApiError.invalid("session", "'session' must be an object.")
    model = session.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError.invalid("session.model", "'session.model' (the deployment's name) is required.")
    served = await served_deployment(caller, model)
    fields = {key: value for key, value in session.items() if key != "model"}
    config = SessionConfig(id=new_id("sess"), model=served.name, expires_at=int(time.time()) + ttl)
    try:
        config.update(fields)
    except ProtocolError as error:
        raise ApiError.invalid(error.param, error.message) from None
    client = get_async_redis()
    try:
        secret = await client_secret_mint(
            client,
            user_id=caller.user.pk,
            api_key_id=getattr(caller.api_key, "pk", None),
            deployment=served.name,
            session=fields,
            ttl_s=ttl,
        )
    finally:
        await client.aclose()
    return JsonResponse({"value": secret.value, "expires_at": secret.grant.expires_at, "session": config.ga()})


def _ttl(expires_after) -> int:
    if expires_after is None:
        return DEFAULT_TTL_S
    if not isinstance(expires_after, dict):
        raise ApiError.invalid("expires_after", "'expires_after' must be an object.")
    if expires_after.get("anchor", "created_at") != "created_at":
        raise ApiError.invalid("expires_after.anchor", "'expires_after.anchor' must be 'created_at'.")
    seconds = expires_after.get("seconds", DEFAULT_TTL_S)
    if isinstance(seconds, bool) or not isinstance(seconds, int) or not MIN_TTL_S <= seconds <= MAX_TTL_S:
        raise ApiError.invalid("expires_after.seconds", f"'expires_after.seconds' must be an integer in "
                               f"[{MIN_TTL_S}, {MAX_TTL_S}].")  # fmt: skip
    return seconds
