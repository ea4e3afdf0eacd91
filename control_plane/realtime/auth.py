"""Who opens a realtime session, from the WebSocket handshake.

In order: `Authorization: Bearer <API key or client secret>`; the browser form, a
`Sec-WebSocket-Protocol` entry `openai-insecure-api-key.<secret>` (browsers cannot set
headers on a WebSocket); else the console's login session (cookie; the origin check in
front of the route keeps other sites out). A client secret fixes the deployment and
the session's starting configuration.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis.asyncio
from channels.db import database_sync_to_async

from control_plane.accounts.models import ApiKey
from control_plane.accounts.permissions import AccessDenied, check_access
from control_plane.accounts.services import aapi_key_authenticate
from control_plane.realtime.client_secrets import Grant, client_secret_resolve, is_client_secret

SUBPROTOCOL_KEY_PREFIX = "openai-insecure-api-key."


@dataclass(frozen=True)
class Principal:
    user: object
    api_key: ApiKey | None
    grant: Grant | None = None


def credential_of(scope) -> str | None:
    headers = dict(scope.get("headers") or [])
    header = headers.get(b"authorization", b"").decode("latin1").strip()
    if header:
        keyword, _, secret = header.partition(" ")
        if keyword.lower() != "bearer" or not secret.strip():
            raise AccessDenied.unauthenticated("Malformed Authorization header: expected 'Bearer <API key>'.")
        return secret.strip()
    for protocol in scope.get("subprotocols") or []:
        if protocol.startswith(SUBPROTOCOL_KEY_PREFIX):
            return protocol.removeprefix(SUBPROTOCOL_KEY_PREFIX)
    return None


async def authenticate(scope, client: redis.asyncio.Redis) -> Principal:
    """The principal holding the inference scope; AccessDenied otherwise."""
    secret = credential_of(scope)
    if secret is None:
        user = scope.get("user")
        check_access(user, None, "inference")
        return Principal(user, None)
    if is_client_secret(secret):
        grant = await client_secret_resolve(client, secret)
        if grant is None:
            raise AccessDenied.unauthenticated("Invalid or expired client secret.")
        user, api_key = await database_sync_to_async(_principal_of_grant)(grant)
        check_access(user, api_key, "inference", grant.deployment)
        return Principal(user, api_key, grant)
    api_key = await aapi_key_authenticate(secret)
    if api_key is None:
        raise AccessDenied.unauthenticated("Invalid, expired or revoked API key.")
    check_access(api_key.user, api_key, "inference")
    return Principal(api_key.user, api_key)


def _principal_of_grant(grant: Grant):
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.filter(pk=grant.user_id).first()
    api_key = ApiKey.objects.filter(pk=grant.api_key_id).first() if grant.api_key_id else None
    if user is None or (grant.api_key_id and api_key is None):
        raise AccessDenied.unauthenticated("The client secret's owner no longer exists.")
    return user, api_key
