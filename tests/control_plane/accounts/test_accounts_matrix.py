"""Access matrix over every route the URL resolver knows (new routes are covered as they appear).

For each route and method, principals that must get nothing: anonymous, a revoked key, an
expired key, a key without the route's scope, a key outside its deployment allow-list, and
another user (session and key) than the one whose objects the URL names. They get 401/403
(or, for another user's object, 404; for browser pages, a redirect to a login page), and the
victim's data never appears in any response. The URLs name the victim's real objects
(victim_world.py): their API key, request, artifacts, video job and deployment.

- REST routes under /api/ and plain routes under /v1/ must declare their scope: DRF views
  through permission classes with a `scope` attribute (accounts.permissions.require_scope),
  plain views through `required_scope` (accounts.decorators.scope_required). A route that
  declares none fails here, unless it is public (PUBLIC_STATUSES, which also fixes what
  each public route answers).
- The allow-list is tested where the URL names a deployment: a `deployment` kwarg, the view's
  `deployment_url_kwarg`, or `name` under a deployments/ path.

test_accounts_history_matrix.py goes through the victim's history route by route.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from accounts_helpers import bearer, call, required_scope, session
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, resolve
from django.urls.exceptions import Resolver404
from victim_world import VICTIM_DEPLOYMENT, VICTIM_TOKENS_OUT


def only_get(status: int | tuple[int, ...]) -> dict[str, int | tuple[int, ...]]:
    return {"get": status, "post": 405, "put": 405, "patch": 405, "delete": 405}


# Routes anyone may call, and what they answer an anonymous caller; still checked for leaks.
PUBLIC_STATUSES = {
    "/api/schema/": only_get(200),
    "/api/docs/": only_get(200),
    "/v1/openapi.json": only_get(200),  # the /v1 routes' schema, public like /api/schema/
    "/health": only_get(200),
    "/metrics": only_get(401),  # a scraper's token or a staff session (tests/security/test_metrics_access.py)
    "/ready": only_get((200, 503)),  # 503 unless an orchestrator and a worker pool are up (a `make run`)
    "/v1/files/x/content": only_get(403),  # a signed URL: the token is the credential, "x" is forged
    "/v1/x": dict.fromkeys(("get", "post", "put", "patch", "delete"), 404),  # the OpenAI-shaped 404
    "/login/": {"get": 200, "post": 200},  # POST without credentials: the form again, with its errors
    "/logout/": {"get": 405, "post": 302},
    "/admin/login/": {"get": 200, "post": 200},
    "/admin/logout/": {"get": 302, "post": 302},
}
# admin pages any staff user may open: they show nothing of anyone else
STAFF_PAGES = {"/admin/", "/admin/password_change/", "/admin/password_change/done/", "/admin/jsi18n/"}
API_METHODS = ("get", "post", "put", "patch", "delete")
PAGE_METHODS = ("get", "post")
# what each URL parameter is filled with; formatted with the world's ids
PLACEHOLDERS = {
    "request_id": "{request_id}",
    "video_id": "{video_id}",
    "artifact_id": "{artifact_id}",
    "deployment": VICTIM_DEPLOYMENT,
    "name": VICTIM_DEPLOYMENT,
    "model": VICTIM_DEPLOYMENT,
}
SAMPLE_IDS = {"victim_id": 1, "request_id": "r", "video_id": "v", "artifact_id": "00000000-0000-0000-0000-000000000000"}


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
    if name in PLACEHOLDERS:
        return PLACEHOLDERS[name]
    if name in ("pk", "id", "object_id", "key_id", "content_type_id") or converter == "int":
        return "{victim_id}"
    if converter == "uuid":
        return "00000000-0000-0000-0000-000000000000"
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
            match = resolve(path.format(**SAMPLE_IDS))
        except Resolver404:
            continue
        routes[path] = Route(path, kind_of(path), deployment_kwarg_of(path, match))
    return sorted(routes.values(), key=lambda route: route.path)


ROUTES = all_routes()


def is_public(path: str) -> bool:
    return path in PUBLIC_STATUSES


def assert_public_status(response, method: str, path: str) -> None:
    expected = PUBLIC_STATUSES[path][method]
    expected = expected if isinstance(expected, tuple) else (expected,)
    assert response.status_code in expected, f"anonymous {method.upper()} {path}: {response.status_code}"


def is_not_running_answer(response) -> bool:
    """/v1's 503 for a deployment that exists but is not RUNNING (the victim's never starts here)."""
    return response.status_code == 503 and b'"model_not_ready"' in response.content and "Retry-After" in response


def assert_no_victim_data(world, response, who: str, method: str, path: str) -> None:
    if not is_public(path) and not is_not_running_answer(response):
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
    assert {"/api/requests/{request_id}/", "/api/artifacts/{artifact_id}/content/", "/v1/videos/{video_id}"} <= paths
    assert {"/api/audit/", "/audit/"} <= paths
    assert set(PUBLIC_STATUSES) <= paths, f"public routes that no longer exist: {set(PUBLIC_STATUSES) - paths}"


def test_public_routes_answer_what_they_document(world):
    anonymous = Client()
    for path, statuses in PUBLIC_STATUSES.items():
        for method in statuses:
            response = call(anonymous, method, path)
            assert_public_status(response, method, path)
            assert_no_victim_data(world, response, "anonymous", method, path)
    assert b"openapi:" in anonymous.get("/api/schema/").content
    assert b"swagger-ui" in anonymous.get("/api/docs/").content
    assert anonymous.get("/health").json() == {"status": "ok"}
    ready = anonymous.get("/ready")
    body = ready.json()
    assert set(body["components"]) >= {"database", "redis", "orchestrator", "workers"}
    assert (ready.status_code == 503) == bool(body["failing"]) and body["components"]["database"]["ok"]
    assert anonymous.get("/metrics")["WWW-Authenticate"].startswith("Bearer")
    assert anonymous.post("/logout/")["Location"] == "/login/"


@pytest.mark.parametrize("route", [r for r in ROUTES if r.kind == "api"], ids=lambda r: r.path)
def test_api_routes_refuse_everyone_without_access(world, route, make_key):
    path = route.path.format(**world.ids)
    for method in API_METHODS:
        if is_public(path):
            response = call(Client(), method, path)
            assert_public_status(response, method, path)
            assert_no_victim_data(world, response, "anonymous", method, path)
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
    path = route.path.format(**world.ids)
    for method in PAGE_METHODS:
        for who, client in world.clients.items():
            response = call(client, method, path)
            assert_no_victim_data(world, response, who, method, path)
            if is_public(path):
                if who == "anonymous":
                    assert_public_status(response, method, path)
                continue
            signed_in = who == "other user's session"
            if route.kind == "admin" or not signed_in:
                allowed = to_login(response) or response.status_code in (401, 403, 404, 405)
                assert allowed, f"{who} {method.upper()} {path}: {response.status_code}"
        if route.kind == "admin":  # staff, but no model permission: nothing of anyone's
            response = call(world.staff_without_permissions, method, path)
            assert_no_victim_data(world, response, "staff without permissions", method, path)
            if not is_public(path) and path not in STAFF_PAGES:
                assert response.status_code in (302, 403, 404, 405), f"staff without permissions {method} {path}"


def test_other_users_cannot_touch_a_key(world):
    client = session(world.other)
    key_id = world.victim_key.pk
    assert client.get(f"/api/keys/{key_id}/").status_code == 404
    assert client.post(f"/api/keys/{key_id}/revoke/").status_code == 404
    assert world.victim_key.prefix not in client.get("/api/keys/").content.decode()
    assert str(VICTIM_TOKENS_OUT) not in client.get("/api/usage/", {"group_by": "key"}).content.decode()
