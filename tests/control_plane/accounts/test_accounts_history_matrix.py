"""The victim's history, route by route: their request, its artifacts, their video job, usage
and keys reach the victim and no one else.

Every route that names or lists those objects answers anonymous callers, revoked and expired
keys 401 (pages: a redirect to the login page), a key without the route's scope 403, and
another user, or the victim's own key limited to another deployment, 404 for the object
(200 with only their own rows for a list) — never with the victim's data in the body. The
victim's own key and session do get the data, so each refusal is about who asks, not a
broken URL. Signed artifact URLs open without a key, and not once tampered with or expired.
"""

from __future__ import annotations

import time

import pytest
from accounts_helpers import bearer, call, required_scope
from django.core import signing
from django.test import Client
from victim_world import VICTIM_AUDIO, VICTIM_MP4, VICTIM_PROMPT, VICTIM_REPLY, VICTIM_REQUEST, VICTIM_VIDEO

from control_plane.accounts.models import ApiKey
from control_plane.inference.models import InferenceRequest
from control_plane.inference.signing import SALT, artifact_token, url_ttl_s

# (method, URL) of routes naming one of the victim's objects, and what the victim sees there
OWNED = [
    ("get", "/api/requests/{request_id}/", VICTIM_REPLY),
    ("get", "/api/requests/{video_id}/", VICTIM_PROMPT),
    ("get", "/api/artifacts/{artifact_id}/content/", VICTIM_AUDIO.decode()),
    ("get", "/api/artifacts/{video_artifact_id}/content/", VICTIM_MP4.decode()),
    ("get", "/v1/videos/{video_id}", VICTIM_PROMPT),
    ("get", "/v1/videos/{video_id}/content", VICTIM_MP4.decode()),
    ("delete", "/v1/videos/{video_id}", None),
    ("get", "/api/keys/{key_id}/", "victim key"),
    ("post", "/api/keys/{key_id}/revoke/", None),
    ("get", "/history/{request_id}/", VICTIM_REPLY),
    ("get", "/history/{request_id}/artifacts/{artifact_id}/", VICTIM_AUDIO.decode()),
    ("post", "/keys/{key_id}/revoke/", None),
]
# lists that would show them, and what the victim sees there
LISTS = [
    ("/api/requests/", VICTIM_REQUEST),
    ("/api/requests/?deployment=victim-deployment", VICTIM_REQUEST),
    ("/api/usage/?group_by=user,key,deployment", "victim key"),
    ("/api/usage/export.csv?group_by=key,deployment", "victim key"),
    ("/api/keys/", "victim key"),
    ("/v1/videos", VICTIM_VIDEO),
    ("/history/", VICTIM_REQUEST),
    ("/usage/", None),
    ("/keys/", "victim key"),
]
KEY_ROUTES = ("/api/keys/", "/keys/")  # keys belong to a user, not to a deployment


def is_page(url: str) -> bool:
    return not url.startswith(("/api/", "/v1/"))


def body_of(response) -> str:
    body = b"".join(response.streaming_content) if response.streaming else response.content
    return body.decode(errors="replace")


def to_login(response) -> bool:
    return response.status_code == 302 and "login" in response["Location"]


def assert_nothing_leaked(response, markers, who: str, method: str, url: str) -> None:
    text = body_of(response)
    for marker in markers:
        if marker not in url:  # echoing the URL back is no leak
            assert marker not in text, f"{who} {method.upper()} {url} leaked {marker!r}"


def assert_refused(response, expected: set[int], who: str, method: str, url: str) -> None:
    if is_page(url) and expected & {401, 403}:
        assert to_login(response) or response.status_code == 405, f"{who} {method.upper()} {url}: {response}"
        return
    assert response.status_code in expected, f"{who} {method.upper()} {url}: {response.status_code}"


def strangers(world) -> dict[str, tuple[Client, set[int], set[int]]]:
    """who -> (client, statuses for an owned object, statuses for a list)."""
    return {
        "anonymous": (Client(), {401}, {401}),
        "victim's revoked key": (world.own_keys["revoked"], {401}, {401}),
        "victim's expired key": (world.own_keys["expired"], {401}, {401}),
        "other user's revoked key": (world.clients["revoked key"], {401}, {401}),
        "other user's key": (world.clients["other user's key"], {404}, {200}),
        "other user's session": (world.clients["other user's session"], {404}, {200}),
    }


def expected(statuses: set[int], who: str, url: str) -> set[int]:
    """API keys do not sign in to the console: on a page, a key is anonymous (401: the login page)."""
    return {401} if is_page(url) and "key" in who else statuses


def unscoped_key_of(world, make_key, url: str, method: str) -> Client:
    """The victim's own key, with every scope but the one this route needs."""
    path = url.split("?")[0]
    scope = "inference" if is_page(path) else required_scope(path, method)
    scopes = [s for s in world.every if s != scope]
    return bearer(make_key(world.victim, name=f"without {scope}", scopes=scopes)[1])


def test_the_victims_objects_reach_only_the_victim(world, make_key):
    for method, template, shown in OWNED:
        url = template.format(**world.ids)
        for who, (client, owned, _) in strangers(world).items():
            response = call(client, method, url)
            assert_refused(response, expected(owned, who, url), who, method, url)
            assert_nothing_leaked(response, world.markers, who, method, url)
        if not is_page(url):
            response = call(unscoped_key_of(world, make_key, url, method), method, url)
            assert_refused(response, {403}, "victim's key without the scope", method, url)
            assert_nothing_leaked(response, world.markers, "victim's key without the scope", method, url)
        if not url.startswith(KEY_ROUTES) and not is_page(url):
            response = call(world.own_keys["elsewhere"], method, url)
            assert_refused(response, {404}, "victim's key for another deployment", method, url)
            assert_nothing_leaked(response, world.history_markers, "victim's key for another deployment", method, url)
        if shown is not None:  # the owner does see it (GETs only: the others would destroy it)
            owner = world.victim_session if is_page(url) else bearer(world.victim_secret)
            response = call(owner, method, url)
            assert response.status_code == 200 and shown in body_of(response), f"the victim {url}: {response}"

    assert ApiKey.objects.get(pk=world.victim_key.pk).is_active, "someone else revoked the victim's key"
    video = InferenceRequest.objects.get(request_id=VICTIM_VIDEO)
    assert video.deleted_at is None and video.artifacts.count() == 1, "someone else deleted the victim's video"


def test_lists_show_the_victims_rows_to_the_victim_only(world, make_key):
    for url, shown in LISTS:
        for who, (client, _, listed) in strangers(world).items():
            response = call(client, "get", url)
            assert_refused(response, expected(listed, who, url), who, "get", url)
            assert_nothing_leaked(response, world.markers, who, "get", url)
        if not is_page(url):
            response = call(unscoped_key_of(world, make_key, url, "get"), "get", url)
            assert_refused(response, {403}, "victim's key without the scope", "get", url)
            assert_nothing_leaked(response, world.markers, "victim's key without the scope", "get", url)
        if not url.startswith(KEY_ROUTES) and not is_page(url):
            response = call(world.own_keys["elsewhere"], "get", url)
            assert response.status_code == 200, f"victim's key for another deployment {url}: {response.status_code}"
            assert_nothing_leaked(response, world.history_markers, "victim's key for another deployment", "get", url)
        owner = world.victim_session if is_page(url) else bearer(world.victim_secret)
        response = call(owner, "get", url)
        assert response.status_code == 200, f"the victim {url}: {response.status_code}"
        assert shown is None or shown in body_of(response), f"the victim does not see {shown!r} in {url}"


class SignedEarlier(signing.TimestampSigner):
    """Signs as if `seconds_ago` had passed: a token that has been valid and expired since."""

    def __init__(self, seconds_ago: int, **kwargs):
        super().__init__(**kwargs)
        self.seconds_ago = seconds_ago

    def timestamp(self) -> str:
        return signing.b62_encode(int(time.time()) - self.seconds_ago)


def test_signed_artifact_urls_open_only_untampered_and_in_time(world):
    artifact_id = str(world.ids["artifact_id"])
    token = artifact_token(artifact_id)
    anonymous = Client()
    opened = anonymous.get(f"/v1/files/{token}/content")
    assert opened.status_code == 200 and body_of(opened) == VICTIM_AUDIO.decode()

    value, signature = token.rsplit(":", 1)
    flipped = ("A" if signature[0] != "A" else "B") + signature[1:]
    other_payload = artifact_token(str(world.ids["video_artifact_id"])).rsplit(":", 1)[0]
    forged = {
        "tampered signature": f"{value}:{flipped}",
        "another artifact under this signature": f"{other_payload}:{signature}",
        "expired": SignedEarlier(url_ttl_s() + 60, salt=SALT).sign_object(artifact_id, compress=True),
        "signed for another purpose": signing.dumps(artifact_id, compress=True),
        "truncated": token[:-4],
    }
    for name, bad in forged.items():
        response = anonymous.get(f"/v1/files/{bad}/content")
        assert response.status_code == 403, f"{name}: {response.status_code}"
        assert response.json()["error"]["code"] == "invalid_signature", name
        assert_nothing_leaked(response, world.history_markers, name, "get", "/v1/files/…/content")

    detail = bearer(world.victim_secret).get(f"/api/requests/{VICTIM_REQUEST}/").json()
    signed_url = detail["artifacts"][0]["signed_url"]
    assert anonymous.get(signed_url.removeprefix("http://testserver")).status_code == 200


@pytest.mark.parametrize("who", ["anonymous", "other user's session"])
def test_the_signed_url_is_only_in_the_owners_detail(world, who):
    detail = world.clients[who].get(f"/api/requests/{VICTIM_REQUEST}/")
    assert detail.status_code in (401, 404) and "/v1/files/" not in body_of(detail)
