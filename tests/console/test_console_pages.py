"""Every console page through Django's test client: sign-in, permissions, forms, escaping."""

from __future__ import annotations

import re

import pytest
from console_data import SCRIPT, history_row
from django.test import Client
from django.urls import reverse

from control_plane.accounts.models import ApiKey
from control_plane.deployments.models import Deployment, Pipeline
from control_plane.deployments.services import deployment_create
from control_plane.inference import services as inference

pytestmark = pytest.mark.django_db

PAGES = [
    ("console:dashboard", []),
    ("console:dashboard-panel", []),
    ("console:catalog", []),
    ("console:playground", ["chat"]),
    ("console:playground", ["image"]),
    ("console:playground", ["speech"]),
    ("console:playground", ["video"]),
    ("console:history", []),
    ("console:keys", []),
    ("console:usage", []),
    ("console:deployments", []),
    ("console:deployments-panel", []),
    ("console:voice-code", []),
    ("console:video-api-jobs", []),
]


@pytest.mark.parametrize(("name", "args"), PAGES)
def test_every_page_needs_a_signed_in_user(client, name, args):
    response = client.get(reverse(name, args=args))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("console:login"))


@pytest.mark.parametrize(("name", "args"), PAGES)
def test_every_page_renders_for_a_user(alice_client, pipelines, name, args):
    response = alice_client.get(reverse(name, args=args))
    assert response.status_code == 200


def test_sign_in_with_a_password_and_out_again(client, alice):
    page = client.get(reverse("console:login"))
    assert b"csrfmiddlewaretoken" in page.content
    wrong = client.post(reverse("console:login"), {"username": "alice", "password": "nope"})
    assert wrong.status_code == 200 and b"errorlist" in wrong.content
    signed_in = client.post(reverse("console:login"), {"username": "alice", "password": "correct horse battery"})
    assert signed_in.status_code == 302 and signed_in["Location"] == reverse("console:dashboard")
    assert client.get(reverse("console:dashboard")).status_code == 200
    client.post(reverse("console:logout"))
    assert client.get(reverse("console:dashboard")).status_code == 302


def test_navigation_shows_only_what_the_user_may_use(alice_client, root, pipelines):
    page = alice_client.get(reverse("console:catalog")).content.decode()
    assert 'data-nav="admin"' not in page
    assert "/catalog/qwen2_5_omni/deploy/" in page  # plain users deploy (test_console_deploy_access.py)
    root_client = Client()
    root_client.force_login(root)
    page = root_client.get(reverse("console:catalog")).content.decode()
    assert 'data-nav="admin"' in page and "/catalog/qwen2_5_omni/deploy/" in page


def test_a_plain_user_never_reaches_admin_pages(alice_client):
    response = alice_client.get("/admin/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    assert alice_client.get(reverse("console:audit")).status_code == 403


def test_the_catalog_draws_each_stage_graph(alice_client, pipelines):
    page = alice_client.get(reverse("console:catalog")).content.decode()
    omni = page[page.index('data-pipeline="qwen2_5_omni"') :]
    omni = omni[: omni.index("</svg>")]
    assert [name for name in ("thinker", "talker", "code2wav") if f">{name}</text>" in omni] == [
        "thinker",
        "talker",
        "code2wav",
    ]
    assert omni.count('class="edge streaming"') == 2


def test_deploying_from_the_form(root_client, pipelines):
    url = reverse("console:deploy", args=["echo-voice"])
    form = root_client.get(url)
    assert form.status_code == 200
    assert 'name="stages.voice.replicas"' in form.content.decode()
    response = root_client.post(url, _deploy_post("my-voice"))
    assert response.status_code == 302 and response["Location"] == reverse("console:deployment", args=["my-voice"])
    deployment = Deployment.objects.get(name="my-voice")
    assert deployment.deploy_config["stages"]["echo"]["options"] == {"delay_s": 0.01}
    assert deployment.replicas.count() == 2


def test_deploy_errors_are_shown_on_their_field(root_client, pipelines):
    url = reverse("console:deploy", args=["echo-voice"])
    page = root_client.post(url, _deploy_post("bad", **{"stages.voice.replicas": "0"})).content.decode()
    assert _field_error(page, "stages.voice.replicas") == "must be at least 1"
    page = root_client.post(url, _deploy_post("bad", **{"stages.echo.device": "cuda:3"})).content.decode()
    assert "no live worker has device" in _field_error(page, "stages.echo.device")
    page = root_client.post(url, _deploy_post("bad", **{"stages.echo.options": "[1"})).content.decode()
    assert "Not valid JSON" in _field_error(page, "stages.echo.options")
    deployment_create(name="taken", pipeline=Pipeline.objects.get(name="echo"), model_dir="-", deploy_config={})
    page = root_client.post(url, _deploy_post("taken")).content.decode()
    assert "exists" in _field_error(page, "name")
    assert not Deployment.objects.filter(name="bad").exists()


def test_the_deployment_page_scales_stops_and_deletes(root_client, alice, pipelines):
    deployment_create(name="dep", pipeline=Pipeline.objects.get(name="echo-voice"), model_dir="-", deploy_config={})
    page = root_client.get(reverse("console:deployment", args=["dep"])).content.decode()
    assert 'data-replica="voice-0"' in page and 'hx-trigger="every 1s"' in page
    assert root_client.get(reverse("console:deployment-panel", args=["dep"])).status_code == 200
    root_client.post(reverse("console:deployment-scale", args=["dep"]), {"stage": "voice", "replicas": "2"})
    assert Deployment.objects.get(name="dep").replicas.filter(stage="voice").count() == 2
    bad = root_client.post(
        reverse("console:deployment-scale", args=["dep"]), {"stage": "nope", "replicas": "2"}, follow=True
    )
    assert "no stage &#x27;nope&#x27;" in bad.content.decode() or "no stage 'nope'" in bad.content.decode()
    root_client.post(reverse("console:deployment-stop", args=["dep"]))
    assert Deployment.objects.get(name="dep").desired_state == "STOPPED"
    alice_client = Client()
    alice_client.force_login(alice)
    assert alice_client.post(reverse("console:deployment-delete", args=["dep"])).status_code == 403
    assert alice_client.get(reverse("console:deployment", args=["dep"])).status_code == 200  # may look
    root_client.post(reverse("console:deployment-delete", args=["dep"]))
    assert not Deployment.objects.filter(name="dep").exists()


def test_history_shows_only_the_users_own_requests(alice_client, alice, bob, root):
    mine = history_row(alice, "req-alice", prompt="hello from alice")
    theirs = history_row(bob, "req-bob", prompt="bob's secret plans")
    page = alice_client.get(reverse("console:history")).content.decode()
    assert "req-alice" in page and "req-bob" not in page and "secret plans" not in page
    assert alice_client.get(reverse("console:history-detail", args=["req-bob"])).status_code == 404
    artifact = theirs.artifacts.get()
    assert alice_client.get(reverse("console:artifact", args=["req-bob", artifact.id])).status_code == 404
    own = alice_client.get(reverse("console:artifact", args=["req-alice", mine.artifacts.get().id]))
    assert own.status_code == 200 and own["Content-Type"] == "audio/wav"
    admin = Client()
    admin.force_login(root)
    page = admin.get(reverse("console:history")).content.decode()
    assert "req-alice" in page and "req-bob" in page
    assert admin.get(reverse("console:history-detail", args=["req-bob"])).status_code == 200


def test_history_search_and_filters(alice_client, alice):
    history_row(alice, "req-one", prompt="a red fox")
    history_row(alice, "req-two", prompt="a blue whale", status="failed")
    page = alice_client.get(reverse("console:history"), {"q": "fox"}).content.decode()
    assert "req-one" in page and "req-two" not in page
    page = alice_client.get(reverse("console:history"), {"status": "failed"}).content.decode()
    assert "req-two" in page and "req-one" not in page


def test_prompts_with_html_are_shown_as_text_everywhere(alice_client, alice):
    row = history_row(alice, "req-xss", prompt=SCRIPT, output=SCRIPT)
    inference.request_close(row, status="failed", error={"message": SCRIPT, "type": "invalid_request_error"})
    for url in (reverse("console:history"), reverse("console:history-detail", args=["req-xss"])):
        page = alice_client.get(url).content.decode()
        assert SCRIPT not in page
        assert "&lt;script&gt;" in page


def test_keys_are_created_once_and_revoked(alice_client, alice, bob):
    response = alice_client.post(reverse("console:keys"), {"name": "laptop", "scopes": ["inference"]})
    assert response.status_code == 200 and response["Cache-Control"] == "no-store"
    secret = re.search(r"data-secret>([^<]+)<", response.content.decode()).group(1)
    key = ApiKey.objects.get(user=alice, name="laptop")
    assert key.prefix in secret
    assert secret not in alice_client.get(reverse("console:keys")).content.decode()  # shown once
    alice_client.post(reverse("console:key-revoke", args=[key.id]))
    key.refresh_from_db()
    assert key.revoked_at is not None
    bobs = ApiKey.objects.create(user=bob, name="bobs", prefix="omni-bob", hashed_secret="x", scopes=["inference"])
    assert alice_client.post(reverse("console:key-revoke", args=[bobs.id])).status_code == 404


def test_key_form_errors_are_shown_on_the_field(alice_client):
    page = alice_client.post(reverse("console:keys"), {"name": "", "scopes": ["inference"]})
    assert page.status_code == 400
    assert "A key needs a name." in page.content.decode()
    page = alice_client.post(reverse("console:keys"), {"name": "x", "scopes": ["admin"]}).content.decode()
    assert "Unknown scopes" in page or "Only staff" in page


def test_forms_need_the_csrf_token(alice):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    assert client.post(reverse("console:keys"), {"name": "k", "scopes": ["inference"]}).status_code == 403
    assert client.post(reverse("console:logout")).status_code == 403
    assert not ApiKey.objects.filter(name="k").exists()


def test_usage_shows_totals_and_remaining_quota(alice_client, alice):
    from control_plane.accounts.models import Quota
    from control_plane.accounts.usage import usage_record

    Quota.objects.create(user=alice, metric="requests", window="day", limit=100)
    usage_record(request_id="u1", user=alice, deployment="dep", modality="text", text_tokens_out=7)
    page = alice_client.get(reverse("console:usage")).content.decode()
    assert "requests" in page and "/ 100" in page
    assert ">7<" in page.replace(" ", "")


def test_static_files_are_served_with_the_vendored_htmx(alice_client):
    response = alice_client.get("/static/console/vendor/htmx.min.js")
    assert response.status_code == 200
    assert alice_client.get("/static/console/vendor/htmx.LICENSE").status_code == 200


def _deploy_post(name: str, **overrides) -> dict:
    data = {"name": name, "model_dir": "-", "max_queue": "64", "request_timeout_s": "300"}
    for stage in ("echo", "voice"):
        data.update({
            f"stages.{stage}.pool": "cpu", f"stages.{stage}.replicas": "1", f"stages.{stage}.device": "cpu",
            f"stages.{stage}.backend": "echo", f"stages.{stage}.max_batch": "16", f"stages.{stage}.max_length": "2048",
            f"stages.{stage}.dtype": "float32", f"stages.{stage}.async_chunk_size": "25",
            f"stages.{stage}.options": "{}",
        })  # fmt: skip
    data["stages.echo.options"] = '{"delay_s": 0.01}'
    data.update(overrides)
    return data


def _field_error(page: str, field: str) -> str:
    block = page[page.index(f'data-field="{field}"') :]
    block = block[: block.index("</div>\n</div>") if "</div>\n</div>" in block else 2000]
    match = re.search(r'<ul class="errorlist"[^>]*><li>(.*?)</li>', block, re.S)
    assert match, f"no error on {field}"
    return match.group(1)


def test_the_deployment_panel_shows_loading_progress_and_errors(alice_client, pipelines):
    deployment_create(name="dep", pipeline=Pipeline.objects.get(name="echo-voice"), model_dir="-", deploy_config={})
    deployment = Deployment.objects.get(name="dep")
    deployment.replicas.filter(stage="echo").update(state="LOADING", progress=0.4)
    deployment.replicas.filter(stage="voice").update(state="ERROR", last_error="CUDA <oom>", restarts=3)
    page = alice_client.get(reverse("console:deployment-panel", args=["dep"])).content.decode()
    echo = page[page.index('data-replica="echo-0"') :]
    assert 'style="width:40%"' in echo[: echo.index("</tr>")]
    voice = page[page.index('data-replica="voice-0"') :]
    voice = voice[: voice.index("</tr>")]
    assert "ERROR" in voice and "CUDA &lt;oom&gt;" in voice and '<td class="num">3</td>' in voice
    assert 'class="dot LOADING"' in page and 'class="dot ERROR"' in page


def test_the_deployment_panel_shows_one_row_per_stage_group_replica(alice_client, pipelines):
    grouped = {"stages": {"echo": {"group": "speech"}, "voice": {"group": "speech"}}}
    deployment_create(
        name="dep", pipeline=Pipeline.objects.get(name="echo-voice"), model_dir="-", deploy_config=grouped
    )
    page = alice_client.get(reverse("console:deployment-panel", args=["dep"])).content.decode()
    assert page.count("<tr data-replica=") == 1
    row = page[page.index('data-replica="echo-0"') :]
    assert "speech (echo+voice)" in row[: row.index("</tr>")]


def test_the_dashboard_shows_rates_percentiles_and_the_chart(alice_client, alice, pipelines):
    from datetime import timedelta

    from dashboard_reading import dashboard_numbers
    from django.utils import timezone

    from control_plane.inference.models import InferenceRequest

    deployment_create(name="dep", pipeline=Pipeline.objects.get(name="echo-voice"), model_dir="-", deploy_config={})
    for index, ttft in enumerate((0.5, 0.1, 0.4, 0.2, 0.3)):
        metrics = {"ttft_s": ttft, "ttfp_s": 2 * ttft, "e2el_s": 10 * ttft}
        history_row(alice, f"req-{index}", prompt="hi", metrics=metrics)
    history_row(alice, "req-earlier", prompt="hi", status="failed")  # no TTFT or TTFP
    history_row(alice, "req-yesterday", prompt="hi", metrics={"ttft_s": 9.0})
    now = timezone.now()
    InferenceRequest.objects.filter(request_id="req-earlier").update(created_at=now - timedelta(minutes=10, seconds=5))
    InferenceRequest.objects.filter(request_id="req-yesterday").update(created_at=now - timedelta(days=1))
    history_row(alice, "req-other", prompt="hi", deployment="other", metrics={"ttft_s": 7.0})
    # a refused request ends in milliseconds: it must not pull the percentiles down
    history_row(alice, "req-refused", prompt="hi", status="failed")
    InferenceRequest.objects.filter(request_id="req-refused").update(e2el_s=0.011, ttft_s=0.001)
    history_row(alice, "req-speech", prompt="hi", route="audio.speech", metrics={"ttfp_s": 3.0, "e2el_s": 8.0})
    InferenceRequest.objects.filter(request_id="req-earlier").update(created_at=now - timedelta(minutes=10, seconds=5))

    for url in (reverse("console:dashboard"), reverse("console:dashboard-panel")):
        numbers = dashboard_numbers(alice_client.get(url).content.decode(), "dep")
        assert numbers.requests_per_min == 1.4  # 7 requests in the last 5 minutes
        assert numbers.last_hour == 8 and numbers.queue_depth == 0
        chat = "chat.completions"
        assert [numbers.latency[(chat, "TTFT", p)] for p in (50, 90, 99)] == [0.3, 0.5, 0.5]
        assert [numbers.latency[(chat, "TTFP", p)] for p in (50, 90, 99)] == [0.6, 1.0, 1.0]
        assert [numbers.latency[(chat, "E2EL", p)] for p in (50, 90, 99)] == [3.0, 5.0, 5.0]  # failed ones left out
        assert [numbers.latency[("audio.speech", "E2EL", p)] for p in (50, 90, 99)] == [8.0, 8.0, 8.0]
        assert numbers.latency[("audio.speech", "TTFT", 50)] is None
        assert len(numbers.bars) == 60 and sum(numbers.bars) == 8
        assert numbers.bars[-1] == 7 and numbers.bars[-11] == 1  # this minute, and ten minutes ago


def test_a_dashboard_without_requests_shows_no_percentiles(alice_client, pipelines):
    from dashboard_reading import dashboard_numbers

    deployment_create(name="dep", pipeline=Pipeline.objects.get(name="echo"), model_dir="-", deploy_config={})
    numbers = dashboard_numbers(alice_client.get(reverse("console:dashboard-panel")).content.decode(), "dep")
    assert numbers.requests_per_min == 0 and numbers.last_hour == 0 and sum(numbers.bars) == 0
    assert numbers.latency == {}


def test_the_deploy_form_shows_and_stores_the_audio_cap(root_client, pipelines):
    url = reverse("console:deploy", args=["echo-voice"])
    page = root_client.get(url).content.decode()
    assert 'name="max_audio_seconds"' in page and "0.5 s per text token, at most 120 s" in page
    assert 'name="max_audio_seconds"' not in root_client.get(reverse("console:deploy", args=["echo"])).content.decode()
    response = root_client.post(url, _deploy_post("capped", max_audio_seconds="20"))
    assert response.status_code == 302
    assert Deployment.objects.get(name="capped").deploy_config["max_audio_seconds"] == 20.0
