"""What a new user meets in the console, through Django's test client: the catalog without the
test pipelines and with search, the deployments list, the history's pages and filters in the
query string, error pages in the console's layout, the scale form and its notice, the video
form's defaults from the family, the key form's fields, the voice playground's code."""

from __future__ import annotations

import re
from datetime import timedelta
from urllib.parse import parse_qs

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from control_plane.deployments.models import Deployment, DeploymentState, Pipeline
from control_plane.deployments.services import deployment_create
from control_plane.inference.models import InferenceRequest

pytestmark = pytest.mark.django_db


def _names(page: str, attribute: str) -> list[str]:
    return re.findall(rf'{attribute}="([^"]+)"', page)


# -- catalog ------------------------------------------------------------------------------------


def test_the_catalog_hides_the_internal_echo_pipelines(root_client, pipelines):
    page = root_client.get(reverse("console:catalog")).content.decode()
    shown = _names(page, "data-pipeline")
    assert "qwen2_5_omni" in shown and "text_to_video" in shown
    assert not [name for name in shown if name.startswith("echo")]
    # still deployable by its URL (tests and demos use them)
    assert root_client.get(reverse("console:deploy", args=["echo-voice"])).status_code == 200
    assert Pipeline.objects.filter(name__startswith="echo").count() == 4


def test_the_catalog_searches_and_filters_by_output_modality(alice_client, pipelines):
    def shown(**params) -> list[str]:
        return _names(alice_client.get(reverse("console:catalog"), params).content.decode(), "data-pipeline")

    assert set(shown(modality="video")) == {"text_to_video"}
    assert set(shown(modality="audio")) == {"qwen2_5_omni", "qwen3_omni"}
    thinkers = set(shown(q="thinker"))
    assert {"qwen2_5_omni_thinker", "qwen3_omni_thinker"} <= thinkers and "text_to_video" not in thinkers
    assert "qwen3_omni_thinker" in shown(q="QWEN3 thinker") and "qwen2_5_omni_thinker" not in shown(q="qwen3 thinker")
    assert set(shown(q="omni", modality="audio")) == {"qwen2_5_omni", "qwen3_omni"}
    page = alice_client.get(reverse("console:catalog"), {"q": "no such <b>thing</b>"}).content.decode()
    assert "data-catalog-empty" in page and "<b>thing</b>" not in page
    assert 'value="no such &lt;b&gt;thing&lt;/b&gt;"' in page  # the query stays in the box


# -- deployments list ------------------------------------------------------------------------


def test_the_navigation_has_a_deployments_list_with_states_stages_and_replicas(alice_client, pipelines):
    voice = deployment_create(name="talky", pipeline=Pipeline.objects.get(name="echo-voice"), model_dir="-",
                              deploy_config={"stages": {"voice": {"replicas": 2}}})  # fmt: skip
    voice.replicas.filter(stage="echo").update(state=DeploymentState.RUNNING)
    voice.replicas.filter(stage="voice", index=0).update(state=DeploymentState.RUNNING)
    Deployment.objects.filter(pk=voice.pk).update(state=DeploymentState.LOADING)
    deployment_create(name="quiet", pipeline=Pipeline.objects.get(name="echo"), model_dir="-", deploy_config={})

    page = alice_client.get(reverse("console:dashboard")).content.decode()
    assert f'href="{reverse("console:deployments")}"' in page and 'data-nav="deployments"' in page
    page = alice_client.get(reverse("console:deployments")).content.decode()
    assert _names(page, "data-deployment-row") == ["quiet", "talky"]
    row = page[page.index('data-deployment-row="talky"') :]
    row = row[: row.index("</tr>")]
    assert ">LOADING<" in row and 'href="/deployments/talky/"' in row
    assert re.search(r'data-stage="echo"[^>]*>echo 1/1<', row) and re.search(r'data-stage="voice"[^>]*>voice 1/2<', row)
    assert re.search(r"data-replicas>2/3<", row)
    assert 'class="active" data-nav="deployments"' in page
    panel = alice_client.get(reverse("console:deployments-panel")).content.decode()
    assert 'data-deployment-row="talky"' in panel and "<html" not in panel
    detail = alice_client.get(reverse("console:deployment", args=["talky"])).content.decode()
    assert 'class="active" data-nav="deployments"' in detail


# -- history ------------------------------------------------------------------------------------


def _rows(user, count: int, prefix: str = "", **fields) -> None:
    start = timezone.now() - timedelta(minutes=5)
    InferenceRequest.objects.bulk_create([
        InferenceRequest(request_id=f"{prefix}{fields.get('deployment_name', 'dep')}-{n:03d}", user=user,
                         route=fields.get("route", "chat.completions"), status=fields.get("status", "completed"),
                         deployment_name=fields.get("deployment_name", "dep"), inputs={"prompt": f"prompt {n}"},
                         created_at=fields.get("at", start) + timedelta(seconds=n))
        for n in range(count)
    ])  # fmt: skip


def _request_ids(page: str) -> list[str]:
    return _names(page, "data-request")


def test_history_pages_past_the_newest_fifty(alice_client, alice):
    _rows(alice, 120)
    first = alice_client.get(reverse("console:history")).content.decode()
    assert _request_ids(first) == [f"dep-{n:03d}" for n in range(119, 69, -1)]  # newest first
    assert "1–50 of 120" in first and "page 1 of 3" in first
    seen = list(_request_ids(first))
    page = first
    while 'data-page="next"' in page:
        link = re.search(r'href="([^"]+)" data-page="next"', page).group(1).replace("&amp;", "&")
        page = alice_client.get(reverse("console:history") + link).content.decode()
        seen += _request_ids(page)
    assert seen == [f"dep-{n:03d}" for n in range(119, -1, -1)]  # every row once, in order
    assert "101–120 of 120" in page and 'data-page="first"' in page
    beyond = alice_client.get(reverse("console:history"), {"page": "99"}).content.decode()
    assert _request_ids(beyond) == [f"dep-{n:03d}" for n in range(19, -1, -1)]  # the last page


def test_history_filters_stay_in_the_query_string_across_pages(alice_client, alice):
    yesterday = timezone.now() - timedelta(days=1)
    _rows(alice, 60, deployment_name="omni", route="audio.speech", status="failed")
    _rows(
        alice,
        5,
        "old-",
        deployment_name="omni",
        route="audio.speech",
        status="failed",
        at=yesterday - timedelta(days=1),
    )
    _rows(alice, 30, deployment_name="other", route="audio.speech", status="failed")
    _rows(alice, 30, "chat-", deployment_name="omni", route="chat.completions", status="failed")
    today = timezone.localdate().isoformat()
    params = {"deployment": "omni", "route": "audio.speech", "status": "failed", "from": today, "to": today}
    page = alice_client.get(reverse("console:history"), params).content.decode()
    assert "1–50 of 60" in page
    link = re.search(r'href="\?([^"]+)" data-page="next"', page).group(1).replace("&amp;", "&")
    assert parse_qs(link) == {**{key: [value] for key, value in params.items()}, "page": ["2"]}
    second = alice_client.get(reverse("console:history") + "?" + link).content.decode()
    assert "51–60 of 60" in second and all(row.startswith("omni-") for row in _request_ids(second))
    # the form shows the filters it applied
    for field, value in (("from", today), ("to", today), ("deployment", "omni")):
        assert re.search(rf'name="{field}" value="{value}"', second)
    assert re.search(r'<option value="audio.speech" selected>', second)
    assert re.search(r'<option value="failed" selected>', second)
    # a date range that holds only the older rows
    older = (yesterday - timedelta(days=1)).date().isoformat()
    page = alice_client.get(reverse("console:history"), {"from": older, "to": older}).content.decode()
    assert "1–5 of 5" in page
    # nonsense in the query string is ignored, not an error
    assert alice_client.get(reverse("console:history"), {"from": "soon", "status": "bogus"}).status_code == 200


# -- error pages and favicon ---------------------------------------------------------------------


def test_a_missing_page_is_a_styled_404_in_the_console_layout(alice_client):
    response = alice_client.get("/no/such/page/")
    page = response.content.decode()
    assert response.status_code == 404
    assert 'data-error-page="404"' in page and "console.css" in page and 'data-nav="dashboard"' in page
    assert "/no/such/page/" in page
    missing = alice_client.get(reverse("console:deployment", args=["gone"]))
    assert missing.status_code == 404 and 'data-error-page="404"' in missing.content.decode()
    # the API's paths answer JSON in their own error shapes
    assert Client().get("/api/no-such-thing/").json() == {"detail": "Not found."}
    v1 = Client().get("/v1/models/a/b/c")
    assert v1.status_code == 404 and v1.json()["error"]["type"] == "invalid_request_error"


def test_a_forbidden_page_is_styled_too(alice_client, root, pipelines):
    deployment_create(name="roots", pipeline=Pipeline.objects.get(name="echo"), model_dir="-", deploy_config={},
                      user=root)  # fmt: skip
    response = alice_client.post(reverse("console:deployment-stop", args=["roots"]))
    assert response.status_code == 403
    page = response.content.decode()
    assert 'data-error-page="403"' in page and "Only the user who created roots or an admin" in page


def test_a_server_error_is_a_styled_500(alice, monkeypatch):
    import console.views.dashboard as dashboard

    def broken():
        raise RuntimeError("the database went away")

    monkeypatch.setattr(dashboard, "dashboard_rows", broken)
    client = Client(raise_request_exception=False)
    client.force_login(alice)
    response = client.get(reverse("console:dashboard"))
    page = response.content.decode()
    assert response.status_code == 500
    assert 'data-error-page="500"' in page and "console.css" in page and "database went away" not in page


def test_every_page_links_a_favicon(alice_client):
    for page in (alice_client.get(reverse("console:dashboard")), Client().get(reverse("console:login"))):
        icon = re.search(r'<link rel="icon" type="image/svg\+xml" href="([^"]+)"', page.content.decode()).group(1)
        served = Client().get(icon)  # a static file: no sign-in needed
        assert served.status_code == 200 and b"<svg" in b"".join(served.streaming_content)


# -- scaling ------------------------------------------------------------------------------------


def test_the_scale_form_starts_from_the_current_replicas_and_its_notice_goes_once_landed(root_client, pipelines):
    deployment = deployment_create(name="dep", pipeline=Pipeline.objects.get(name="echo-voice"), model_dir="-",
                                   deploy_config={"stages": {"echo": {"replicas": 3}}})  # fmt: skip
    deployment.replicas.update(state=DeploymentState.RUNNING)
    page = root_client.get(reverse("console:deployment", args=["dep"])).content.decode()
    assert re.search(r'id="scale-replicas"[^>]*value="3"', page)
    assert re.search(r'<option value="voice" data-replicas="1">', page)

    root_client.post(reverse("console:deployment-scale", args=["dep"]), {"stage": "voice", "replicas": "2"})
    panel_url = reverse("console:deployment-panel", args=["dep"])
    panel = root_client.get(panel_url).content.decode()
    assert 'data-scaling="voice"' in panel and "Scaling voice to 2 replicas: 1 of 2 running." in panel
    assert 'data-scaling="voice"' in root_client.get(panel_url).content.decode()  # stays while under way
    page = root_client.get(reverse("console:deployment", args=["dep"])).content.decode()
    assert re.search(r'<option value="voice" data-replicas="2">', page)

    deployment.replicas.filter(stage="voice").update(state=DeploymentState.RUNNING)  # the new replica is up
    assert "data-scaling" not in root_client.get(panel_url).content.decode()
    assert "data-scaling" not in root_client.get(panel_url).content.decode()  # and does not come back

    root_client.post(reverse("console:deployment-scale", args=["dep"]), {"stage": "echo", "replicas": "1"})
    assert "Scaling echo to 1 replica:" in root_client.get(panel_url).content.decode()
    deployment.replicas.filter(stage="echo", index__gte=1).delete()  # the reconciler drained the surplus
    assert "data-scaling" not in root_client.get(panel_url).content.decode()


def test_a_stopped_deployment_has_no_scale_form_and_its_stopped_replicas_no_queue(root_client, pipelines):
    deployment = deployment_create(name="dep", pipeline=Pipeline.objects.get(name="echo"), model_dir="-",
                                   deploy_config={})  # fmt: skip
    deployment.replicas.update(queue_depth=7)
    assert 'id="scale-form"' in root_client.get(reverse("console:deployment", args=["dep"])).content.decode()
    root_client.post(reverse("console:deployment-stop", args=["dep"]))
    deployment.replicas.update(state=DeploymentState.STOPPED)
    page = root_client.get(reverse("console:deployment", args=["dep"])).content.decode()
    assert 'id="scale-form"' not in page
    assert re.search(r"data-queue>–<", page) and "data-queue>7<" not in page


def test_a_scale_on_a_deployment_that_then_stops_leaves_no_notice(root_client, pipelines):
    deployment_create(name="dep", pipeline=Pipeline.objects.get(name="echo"), model_dir="-", deploy_config={})
    root_client.post(reverse("console:deployment-scale", args=["dep"]), {"stage": "echo", "replicas": "2"})
    panel_url = reverse("console:deployment-panel", args=["dep"])
    assert 'data-scaling="echo"' in root_client.get(panel_url).content.decode()
    root_client.post(reverse("console:deployment-stop", args=["dep"]))
    assert "data-scaling" not in root_client.get(panel_url).content.decode()


# -- video defaults -----------------------------------------------------------------------------


def _running(name: str, pipeline: str) -> Deployment:
    return Deployment.objects.create(name=name, pipeline=Pipeline.objects.get(name=pipeline), model_dir="/models/x",
                                     state=DeploymentState.RUNNING)  # fmt: skip


def test_the_video_form_opens_on_a_frame_count_the_family_accepts(alice_client, pipelines):
    config = Pipeline.objects.get(name="text_to_video").config
    assert config["frame_multiple"] == 4 and (config["request_defaults"]["num_frames"] - 1) % 4 == 0
    url = reverse("console:playground", args=["video"])
    for deployments in ([], ["clip"]):  # from the catalog's video family, then from the running deployment
        for name in deployments:
            _running(name, "text_to_video")
        page = alice_client.get(url).content.decode()
        frames = re.search(r'<input id="num_frames"[^>]*>', page).group(0)
        assert 'value="17"' in frames and 'step="4"' in frames and 'min="1"' in frames
    assert re.search(r'<option value="clip" data-num-frames="17" data-frame-multiple="4">', page)


def test_a_video_request_without_a_frame_count_leaves_it_to_the_deployment():
    from console.code_samples import curl_sample
    from console.playground_requests import playground_request

    message = {"mode": "video", "deployment": "clip", "input": {"prompt": "waves", "num_frames": ""}}
    run = playground_request(message)
    assert run.request.options.diffusion.num_frames is None and "num_frames" not in curl_sample(run, "http://x")
    message["input"]["num_frames"] = "17"
    assert playground_request(message).request.options.diffusion.num_frames == 17


def test_a_pipeline_refuses_a_default_frame_count_its_multiple_rejects():
    from stages.config import PipelineConfig, StageConfig
    from stages.errors import ConfigError

    stage = StageConfig(id=0, name="dit", kind="diffusion", output="video")
    with pytest.raises(ConfigError, match="4k \\+ 1"):
        PipelineConfig(family="f", name="n", stages=[stage], frame_multiple=4, request_defaults={"num_frames": 8})


# -- API keys -----------------------------------------------------------------------------------


def test_a_key_gets_an_expiry_and_a_deployment_allow_list_from_the_form(alice_client, alice):
    from control_plane.accounts.models import ApiKey

    day = (timezone.localdate() + timedelta(days=30)).isoformat()
    response = alice_client.post(reverse("console:keys"), {"name": "ci", "scopes": ["inference"],
                                 "expires_on": day, "allowed_deployments": "omni, tts  other"})  # fmt: skip
    page = response.content.decode()
    assert response.status_code == 200 and "data-secret" in page and 'data-copy="new-secret"' in page
    key = ApiKey.objects.get(name="ci")
    assert key.allowed_deployments == ["omni", "tts", "other"]
    assert timezone.localtime(key.expires_at).date().isoformat() > day  # through the end of that day
    assert timezone.localtime(key.expires_at - timedelta(microseconds=1)).date().isoformat() == day
    row = page[page.index('data-key="ci"') :]
    shown_expiry = timezone.localtime(key.expires_at).strftime("%Y-%m-%d %H:%M")
    assert "omni, tts, other" in row[: row.index("</tr>")] and shown_expiry in row[: row.index("</tr>")]
    assert 'data-confirm="Revoke the key “ci”?' in row


def test_key_form_errors_for_expiry_land_on_the_field(alice_client, alice):
    from control_plane.accounts.models import ApiKey

    for value in ("2001-01-01", "next week"):
        response = alice_client.post(reverse("console:keys"), {"name": "old", "scopes": ["inference"],
                                     "expires_on": value, "allowed_deployments": "omni"})  # fmt: skip
        page = response.content.decode()
        assert response.status_code == 400 and not ApiKey.objects.filter(name="old").exists()
        field = page[page.index('id="key-expires"') - 200 :]
        assert 'class="field invalid"' in field[:200] and "errorlist" in field[:1000]
        assert f'value="{value}"' in page and 'value="omni"' in page  # what was typed stays


def test_a_key_name_with_html_is_escaped_in_the_revoke_confirmation(alice_client, alice):
    from console_data import SCRIPT

    alice_client.post(reverse("console:keys"), {"name": SCRIPT, "scopes": ["inference"]})
    page = alice_client.get(reverse("console:keys")).content.decode()
    assert SCRIPT not in page and 'data-confirm="Revoke the key “&lt;script&gt;' in page


# -- voice "View code" --------------------------------------------------------------------------


def test_the_voice_playground_shows_python_and_javascript_for_its_deployment(alice_client, pipelines):
    _running("talky", "echo-voice")
    page = alice_client.get(reverse("console:voice")).content.decode()
    assert 'id="voice-code"' in page and 'data-code="python"' in page and 'data-code="javascript"' in page
    assert "client.realtime.connect(model=&#x27;talky&#x27;)" in page
    code = alice_client.get(reverse("console:voice-code"), {"deployment": "talky", "voice": "Ethan",
                                                            "instructions": 'Say "hi"'}).json()  # fmt: skip
    python, javascript = code["python"], code["javascript"]
    compile(python, "sample.py", "exec")  # valid Python
    assert "from openai import OpenAI" in python and 'websocket_base_url="ws://testserver/v1"' in python
    assert "client.realtime.connect(model='talky')" in python and "'voice': 'Ethan'" in python
    assert "'instructions': 'Say \"hi\"'" in python and "response.output_audio.delta" in python
    assert '"ws://testserver/v1/realtime?model=" + encodeURIComponent("talky")' in javascript
    assert '"instructions": "Say \\"hi\\""' in javascript and '"voice": "Ethan"' in javascript
    assert "openai-insecure-api-key." in javascript and "client_secrets" in javascript
    assert alice_client.get(reverse("console:voice-code"), {"deployment": "x"}).json()["python"].count("x") >= 1
    assert Client().get(reverse("console:voice-code")).status_code == 302  # signed-in users only


def test_the_javascript_sample_is_valid_javascript(alice_client, tmp_path):
    import shutil
    import subprocess

    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    code = alice_client.get(reverse("console:voice-code"), {"deployment": "talky"}).json()
    (tmp_path / "sample.mjs").write_text(code["javascript"])
    subprocess.run(["node", "--check", str(tmp_path / "sample.mjs")], check=True, capture_output=True)


def test_the_video_page_lists_the_users_api_jobs_and_polls_while_one_runs(alice_client, alice, bob, pipelines):
    def job(user, request_id: str, status: str) -> InferenceRequest:
        return InferenceRequest.objects.create(request_id=request_id, user=user, route="videos", status=status,
                                               deployment_name="clip", inputs={"prompt": f"prompt of {request_id}"})  # fmt: skip

    job(alice, "video_api_1", "completed")
    running = job(alice, "video_api_2", "running")
    job(alice, "console-video-abc", "completed")  # a playground run: shown by the page's own list
    job(bob, "video_bob", "running")
    page = alice_client.get(reverse("console:playground", args=["video"])).content.decode()
    assert _names(page, "data-api-job") == ["video_api_2", "video_api_1"]
    assert 'hx-trigger="every 3s"' in page and "prompt of video_api_2" in page
    running.status = "completed"
    running.save()
    partial = alice_client.get(reverse("console:video-api-jobs")).content.decode()
    assert _names(partial, "data-api-job") == ["video_api_2", "video_api_1"]
    assert "hx-trigger" not in partial and "<html" not in partial  # all done: the polling stops
