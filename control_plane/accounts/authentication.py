from __future__ import annotations

from rest_framework import authentication, exceptions

from control_plane.accounts.services import api_key_authenticate


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer omni-…` for /api and /v1."""

    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode(errors="replace")
        if not header:
            return None
        keyword, _, secret = header.partition(" ")
        if keyword.lower() != self.keyword.lower():
            return None  # not ours (e.g. Basic): let the next authenticator try
        key = api_key_authenticate(secret.strip())
        if key is None:
            raise exceptions.AuthenticationFailed("Invalid, expired or revoked API key.")
        return key.user, key

    def authenticate_header(self, request) -> str:
        return self.keyword
