"""The access matrices' world: a victim with data worth leaking, and the principals that
must not reach it.

The victim owns a deployment, a chat request with an audio artifact, a video job with its
video, a usage record and API keys. Each object carries a marker (a string no other
response would contain) so that a leak shows in any response body.
"""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

from accounts_helpers import bearer, session
from django.test import Client
from django.utils import timezone

from control_plane.accounts.models import ApiKey, UsageRecord
from control_plane.accounts.permissions import ALL_SCOPES
from control_plane.accounts.services import api_key_create, api_key_revoke
from control_plane.deployments.management.commands.sync_pipelines import pipeline_sync
from control_plane.deployments.models import Pipeline
from control_plane.deployments.services import deployment_create
from control_plane.inference.models import Route, Status
from control_plane.inference.services import artifact_add, request_close, request_open

VICTIM = "victim-owner"
VICTIM_DEPLOYMENT = "victim-deployment"
VICTIM_REQUEST = "chatcmpl-victim7f3a"
VICTIM_VIDEO = "video_victim7f3a"
VICTIM_PROMPT = "the victim asks about zanzibar quokkas"
VICTIM_REPLY = "the victim hears about marmalade turbines"
VICTIM_AUDIO = b"RIFF victim audio bytes 4c1d"
VICTIM_MP4 = b"victim video bytes 9e2b"
VICTIM_TOKENS_IN, VICTIM_TOKENS_OUT = 4242421, 7777731  # usage amounts no one else has
EVERY_SCOPE_BUT_ADMIN = sorted(ALL_SCOPES - {ApiKey.Scope.ADMIN})


def victim_history(victim, victim_key, deployment) -> SimpleNamespace:
    chat = request_open(
        request_id=VICTIM_REQUEST, route=Route.CHAT, user=victim, api_key=victim_key, deployment=deployment,
        inputs={"messages": [{"role": "user", "content": VICTIM_PROMPT}]}, modalities=["text", "audio"],
        status=Status.RUNNING,
    )  # fmt: skip
    audio = artifact_add(chat, kind="audio", data=VICTIM_AUDIO, mime_type="audio/wav", extension="wav")
    request_close(chat, status=Status.COMPLETED, http_status=200, output_text=VICTIM_REPLY)
    video = request_open(
        request_id=VICTIM_VIDEO, route=Route.VIDEOS, user=victim, api_key=victim_key, deployment=deployment,
        inputs={"prompt": VICTIM_PROMPT}, modalities=["video"], status=Status.RUNNING,
    )  # fmt: skip
    clip = artifact_add(video, kind="video", data=VICTIM_MP4, mime_type="video/mp4", extension="mp4")
    request_close(video, status=Status.COMPLETED, http_status=200)
    UsageRecord.objects.create(
        request_id=VICTIM_REQUEST, user=victim, api_key=victim_key, deployment=VICTIM_DEPLOYMENT, modality="text",
        text_tokens_in=VICTIM_TOKENS_IN, text_tokens_out=VICTIM_TOKENS_OUT,
    )  # fmt: skip
    return SimpleNamespace(chat=chat, audio=audio, video=video, clip=clip)


def victim_keys(victim) -> dict[str, str]:
    """The victim's own keys that must get nothing: revoked, expired, and limited to another deployment."""
    revoked, revoked_secret = api_key_create(user=victim, name="revoked", scopes=EVERY_SCOPE_BUT_ADMIN)
    api_key_revoke(key=revoked)
    expired, expired_secret = api_key_create(user=victim, name="expired", scopes=EVERY_SCOPE_BUT_ADMIN)
    ApiKey.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    _, elsewhere_secret = api_key_create(
        user=victim, name="elsewhere", scopes=EVERY_SCOPE_BUT_ADMIN, allowed_deployments=["elsewhere"]
    )
    return {"revoked": revoked_secret, "expired": expired_secret, "elsewhere": elsewhere_secret}


def build_world(make_user, pipeline_definitions) -> SimpleNamespace:
    pipeline_sync(pipeline_definitions)
    victim = make_user(VICTIM, superuser=True)
    victim_key, victim_secret = api_key_create(user=victim, name="victim key", scopes=sorted(ALL_SCOPES))
    deployment = deployment_create(
        name=VICTIM_DEPLOYMENT, pipeline=Pipeline.objects.get(name="echo"), model_dir="-", deploy_config={}, user=victim
    )
    history = victim_history(victim, victim_key, deployment)
    own_keys = victim_keys(victim)

    other = make_user("other-user")
    revoked, revoked_secret = api_key_create(user=other, name="revoked", scopes=EVERY_SCOPE_BUT_ADMIN)
    api_key_revoke(key=revoked)
    expired, expired_secret = api_key_create(user=other, name="expired", scopes=EVERY_SCOPE_BUT_ADMIN)
    ApiKey.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    _, other_secret = api_key_create(user=other, name="other", scopes=EVERY_SCOPE_BUT_ADMIN)
    _, elsewhere_secret = api_key_create(
        user=other, name="elsewhere", scopes=EVERY_SCOPE_BUT_ADMIN, allowed_deployments=["elsewhere"]
    )
    history_markers = [VICTIM_REQUEST, VICTIM_VIDEO, VICTIM_PROMPT, VICTIM_REPLY, str(history.audio.id),
                       str(history.clip.id), VICTIM_AUDIO.decode(), VICTIM_MP4.decode(), str(VICTIM_TOKENS_OUT)]  # fmt: skip
    return SimpleNamespace(
        victim=victim,
        victim_key=victim_key,
        victim_secret=victim_secret,
        deployment=deployment,
        history=history,
        other=other,
        every=EVERY_SCOPE_BUT_ADMIN,
        ids={
            "victim_id": victim_key.pk,
            "key_id": victim_key.pk,
            "request_id": VICTIM_REQUEST,
            "video_id": VICTIM_VIDEO,
            "artifact_id": history.audio.id,
            "video_artifact_id": history.clip.id,
        },
        history_markers=history_markers,
        markers=[victim_key.prefix, VICTIM, victim_secret, *history_markers],
        clients={
            "anonymous": Client(),
            "revoked key": bearer(revoked_secret),
            "expired key": bearer(expired_secret),
            "other user's key": bearer(other_secret),
            "other user's session": session(other),
            "victim's key on a page": bearer(victim_secret),
        },
        own_keys={name: bearer(secret) for name, secret in own_keys.items()},
        elsewhere=bearer(elsewhere_secret),
        victim_session=session(victim),
        staff_without_permissions=session(make_user("staff-no-perms", staff=True)),
    )
