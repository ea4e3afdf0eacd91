"""Access matrix over every route the URL resolver knows (new routes are covered as they appear).

For each route and method, principals that must get nothing: anonymous, a revoked key, an
expired key, a key without the route's scope, a key outside its deployment allow-list, and
another user (session and key) than the one whose objects the URL names. They get 401/403
(or, for another user's object, 404; for browser pages, a redirect to a login page), and the
victim's data never appears in any response.

- REST routes under /api/ and plain routes under /v1/ must declare their scope: DRF views
  through permission classes with a `scope` attribute (accounts.permissions.require_scope),
  plain views through `required_scope` (accounts.decorators.scope_required). A route that
  declares none fails here, unless listed in PUBLIC.
- The allow-list is tested where the URL names a deployment: a `deployment` kwarg, the view's
  `deployment_url_kwarg`, or `name` under a deployments/ path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from types import SimpleNamespace

import pytest
from accounts_helpers import bearer, session
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, resolve
from django.urls.exceptions import Resolver404
from django.utils import timezone

from control_plane.accounts.models import ApiKey, UsageRecord
from control_plane.accounts.permissions import ALL_SCOPES
from control_plane.accounts.services import api_key_create, api_key_revoke

# Routes anyone may call; they are still checked for the victim's data.
PUBLIC = {
    "/api/schema/",
    "/api/docs/",
    "/admin/login/",
    "/admin/logout/",
    "/login/",
    "/logout/",
    "/health",
    "/ready",
    "/metrics",
}
# /v1/files/<token>/content is a signed URL (the token is the credential); /v1/x is the OpenAI-shaped 404
PUBLIC_PREFIXES = ("/v1/files/", "/v1/x")
# OpenAI routes all need the inference scope; they may declare it (scope_required) or check it inside
DEFAULT_SCOPES = {"/v1/": "inference"}
# admin pages any staff user may open: they show nothing of anyone else
STAFF_PAGES = {"/admin/", "/admin/password_change/", "/admin/password_change/done/", "/admin/jsi18n/"}
API_METHODS = ("get", "post", "put", "patch", "delete")
PAGE_METHODS = ("get", "post")
VICTIM_DEPLOYMENT = "victim-deployment"
VICTIM_REQUEST = "victim-request-7f3a"


@dataclass(frozen=True)
class Route:
    path: str
    kind: str  # "api" (JSON, scoped), "admin", "page" (console)
    deployment_kwarg: str | None


def concrete(pattern: str) -> str:
    """A URL for a route pattern, with placeholders for its parameters."""
    pattern = re.sub(r"(?<!\?P)<(?:(\w+):)?(\w+)>", lambda m: placeholder(m.group(2), m.group(1)), pattern)
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("(?P<", i):
            name = pattern[i + 4 : pattern.index(">", i)]
            depth, j = 0, i
            while True:
                depth += {"(": 1, ")": -1}.get(pattern[j], 0) if pattern[j - 1 : j] != "\\" else 0
                j += 1
                if depth == 0:
                    break
            group = pattern[i:j]
            choices = re.fullmatch(r"\(\?P<\w+>([\w|]+)\)", group)
            out += choices.group(1).split("|")[0] if choices else placeholder(name, None)
            i = j
        elif pattern[i] in "^$":
            i += 1
        elif pattern[i] == "\\":
            out += pattern[i + 1]
            i += 2
        else:
            out += pattern[i]
            i += 1
    return "/" + out


def placeholder(name: str, converter: str | None) -> str:
    if name in ("pk", "id", "object_id", "key_id", "content_type_id") or converter == "int":
        return "{victim_id}"
    if name in ("deployment", "name"):
        return VICTIM_DEPLOYMENT
    if converter == "uuid":
        return "00000000-0000-0000-0000-000000000000"
    if name == "request_id":
        return VICTIM_REQUEST
    return "x"


def walk(patterns, prefix=""):
    for entry in patterns:
        if isinstance(entry, URLResolver):
            yield from walk(entry.url_patterns, prefix + str(entry.pattern))
        elif isinstance(entry, URLPattern):
            yield prefix + str(entry.pattern)


def kind_of(path: str) -> str:
    if path.startswith(("/api/", "/v1/")):
        return "api"
    return "admin" if path.startswith("/admin/") else "page"


def deployment_kwarg_of(path: str, match) -> str | None:
    view_class = getattr(match.func, "cls", None)
    declared = getattr(view_class, "deployment_url_kwarg", None) or getattr(match.func, "deployment_kwarg", None)
    if declared in match.kwargs:
        return declared
    if "deployment" in match.kwargs:
        return "deployment"
    if "name" in match.kwargs and "/deployments/" in path:
        return "name"
    return None


def all_routes() -> list[Route]:
    routes = {}
    for pattern in walk(get_resolver().url_patterns):
        path = concrete(pattern)
        if path.startswith("/static/"):
            continue
        try:
            match = resolve(path.format(victim_id=1))
        except Resolver404:
            continue
        routes[path] = Route(path, kind_of(path), deployment_kwarg_of(path, match))
    return sorted(routes.values(), key=lambda route: route.path)


ROUTES = all_routes()


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


@pytest.fixture
def world(make_user):
    """The victim and their objects; the principals that must not reach them."""
    victim = make_user("victim-owner", superuser=True)
    victim_key, victim_secret = api_key_create(user=victim, name="victim key", scopes=sorted(ALL_SCOPES))
    UsageRecord.objects.create(
        request_id=VICTIM_REQUEST, user=victim, api_key=victim_key, deployment=VICTIM_DEPLOYMENT, modality="text"
    )
    other = make_user("other-user")
    every = sorted(ALL_SCOPES - {"admin"})
    revoked, revoked_secret = api_key_create(user=other, name="revoked", scopes=every)
    api_key_revoke(key=revoked)
    expired, expired_secret = api_key_create(user=other, name="expired", scopes=every)
    ApiKey.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    _, other_secret = api_key_create(user=other, name="other", scopes=every)
    _, elsewhere_secret = api_key_create(user=other, name="elsewhere", scopes=every, allowed_deployments=["elsewhere"])
    return SimpleNamespace(
        victim=victim,
        victim_key=victim_key,
        victim_secret=victim_secret,
        other=other,
        every=every,
        markers=[victim_key.prefix, VICTIM_REQUEST, "victim-owner", victim_secret],
        clients={
            "anonymous": Client(),
            "revoked key": bearer(revoked_secret),
            "expired key": bearer(expired_secret),
            "other user's key": bearer(other_secret),
            "other user's session": session(other),
            "victim's key on a page": bearer(victim_secret),
        },
        elsewhere=bearer(elsewhere_secret),
        staff_without_permissions=session(make_user("staff-no-perms", staff=True)),
    )


def call(client: Client, method: str, path: str):
    return getattr(client, method)(path, data={} if method == "get" else "{}", content_type="application/json")


def is_public(path: str) -> bool:
    return path in PUBLIC or path.startswith(PUBLIC_PREFIXES)


def assert_no_victim_data(world, response, who: str, method: str, path: str) -> None:
    if not is_public(path):  # /ready answers 503 while the platform is not up
        assert response.status_code < 500, f"{who} {method.upper()} {path}: {response.status_code}"
    body = b"".join(response.streaming_content) if response.streaming else response.content
    text = body.decode(errors="replace")
    for marker in world.markers:
        if marker in path:
            continue  # echoing the URL back is no leak
        assert marker not in text, f"{who} {method.upper()} {path} leaked {marker!r}"


def to_login(response) -> bool:
    return response.status_code in (301, 302) and "login" in response.get("Location", "")


def test_the_matrix_sees_the_routes_of_every_area():
    kinds = {route.kind for route in ROUTES}
    assert {"api", "admin"} <= kinds
    paths = {route.path for route in ROUTES}
    assert {"/api/keys/", "/api/usage/", "/api/quota/", "/admin/accounts/apikey/"} <= paths


@pytest.mark.parametrize("route", [r for r in ROUTES if r.kind == "api"], ids=lambda r: r.path)
def test_api_routes_refuse_everyone_without_access(world, route, make_key):
    path = route.path.format(victim_id=world.victim_key.pk)
    for method in API_METHODS:
        if is_public(path):
            assert_no_victim_data(world, call(Client(), method, path), "anonymous", method, path)
            continue
        scope = required_scope(path, method)
        assert scope, f"{method.upper()} {path} declares no scope (use accounts.permissions.require_scope)"
        expected = {  # 405: a plain view may refuse an unsupported method before asking who calls
            "anonymous": {401, 405},
            "revoked key": {401, 405},
            "expired key": {401, 405},
            "victim's key on a page": None,  # the victim may see their own data: not checked here
        }
        for who, client in world.clients.items():
            if who == "victim's key on a page":
                continue
            response = call(client, method, path)
            if who in expected:
                assert response.status_code in expected[who], f"{who} {method.upper()} {path}: {response.status_code}"
            assert_no_victim_data(world, response, who, method, path)

        unscoped = [s for s in world.every if s != scope] if scope != "admin" else world.every
        _, unscoped_secret = make_key(world.other, name="unscoped", scopes=unscoped)
        response = call(bearer(unscoped_secret), method, path)
        assert response.status_code in (403, 405), (
            f"key without {scope!r} {method.upper()} {path}: {response.status_code}"
        )
        assert_no_victim_data(world, response, "unscoped key", method, path)

        if route.deployment_kwarg:
            response = call(world.elsewhere, method, path)
            assert response.status_code == 403, (
                f"key outside its allow-list {method.upper()} {path}: {response.status_code}"
            )
    assert world.victim_key.__class__.objects.get(pk=world.victim_key.pk).is_active, "another user revoked the key"


@pytest.mark.parametrize("route", [r for r in ROUTES if r.kind != "api"], ids=lambda r: r.path)
def test_admin_and_console_pages_refuse_everyone_without_access(world, route):
    """Pages are for sessions: API keys do not sign in, and a non-staff user gets no admin page."""
    path = route.path.format(victim_id=world.victim_key.pk)
    for method in PAGE_METHODS:
        for who, client in world.clients.items():
            response = call(client, method, path)
            assert_no_victim_data(world, response, who, method, path)
            if is_public(path):
                continue
            signed_in = who == "other user's session"
            if route.kind == "admin" or not signed_in:
                allowed = to_login(response) or response.status_code in (401, 403, 404, 405)
                assert allowed, f"{who} {method.upper()} {path}: {response.status_code}"
        if route.kind == "admin":  # staff, but no model permission: nothing of anyone's
            response = call(world.staff_without_permissions, method, path)
            assert_no_victim_data(world, response, "staff without permissions", method, path)
            if path not in PUBLIC and path not in STAFF_PAGES:
                assert response.status_code in (302, 403, 404, 405), f"staff without permissions {method} {path}"


def test_other_users_cannot_touch_a_key(world):
    client = session(world.other)
    key_id = world.victim_key.pk
    assert client.get(f"/api/keys/{key_id}/").status_code == 404
    assert client.post(f"/api/keys/{key_id}/revoke/").status_code == 404
    assert world.victim_key.prefix not in client.get("/api/keys/").content.decode()
    assert VICTIM_REQUEST not in client.get("/api/usage/", {"group_by": "key"}).content.decode()
