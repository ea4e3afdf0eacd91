"""Clients for the accounts tests: by API key, by session; calling a route; the scope it declares."""

from __future__ import annotations

from types import SimpleNamespace

from django.test import Client
from django.urls import resolve

# OpenAI routes all need the inference scope; they may declare it (scope_required) or check it inside
DEFAULT_SCOPES = {"/v1/": "inference"}


def bearer(secret: str) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {secret}")


def session(user, *, enforce_csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=enforce_csrf)
    client.force_login(user)
    return client


def call(client: Client, method: str, path: str):
    return getattr(client, method)(path, data={} if method == "get" else "{}", content_type="application/json")


def required_scope(path: str, method: str) -> str | None:
    """The scope a route declares for a method (None: it declares none)."""
    match = resolve(path)
    if hasattr(match.func, "required_scope"):
        return match.func.required_scope
    view_class = getattr(match.func, "cls", None)
    if view_class is None:
        return next((scope for prefix, scope in DEFAULT_SCOPES.items() if path.startswith(prefix)), None)
    view = view_class(**getattr(match.func, "initkwargs", {}))
    view.request = SimpleNamespace(method=method.upper())
    view.args, view.kwargs = (), match.kwargs
    view.action = (getattr(match.func, "actions", None) or {}).get(method)
    view.format_kwarg = None
    scopes = {getattr(permission, "scope", None) for permission in view.get_permissions()} - {None, ""}
    assert len(scopes) <= 1, f"{path} {method}: several scopes {scopes}"
    return next(iter(scopes), None)
