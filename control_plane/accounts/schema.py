"""OpenAPI description of the API key authentication (drf-spectacular extension, loaded in apps.py)."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "control_plane.accounts.authentication.ApiKeyAuthentication"
    name = "ApiKeyAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An Omnistage API key: `Authorization: Bearer omni-<prefix>-<secret>`.",
        }
