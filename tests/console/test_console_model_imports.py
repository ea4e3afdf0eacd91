"""The Models page's imports: the WebSocket that pushes each import's progress, and, in a real
browser on a live platform, an import from a local stand-in of the Hugging Face hub whose bar
moves as the files arrive, then a deployment of the imported model by its name, which answers
a chat request."""

from __future__ import annotations

import io
import shutil
import tarfile
import time

import httpx
import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from console_browser import chromium_page, shot
from console_stack import ConsoleStack
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from hub_server import HubServer

from control_plane.accounts.services import api_key_create
from control_plane.asgi import application
from control_plane.deployments.models import Deployment
from control_plane.registry.models import Model

PATH = "/ws/console/models/"
PASSWORD = "correct horse battery"


def session_headers(user) -> list[tuple[bytes, bytes]]:
    client = Client()
    client.force_login(user)
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    return [(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1"), (b"cookie", cookie)]


@pytest.mark.django_db(transaction=True)
async def test_an_anonymous_models_socket_is_refused():
    communicator = WebsocketCommunicator(
        application, PATH, headers=[(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1")]
    )
    connected, code = await communicator.connect()
    assert not connected and code == 4401


@pytest.mark.django_db(transaction=True)
async def test_the_models_socket_pushes_each_change_of_an_import_until_it_ends(alice):
    update = sync_to_async(lambda **fields: Model.objects.filter(name="m").update(**fields))
    await sync_to_async(Model.objects.create)(name="m", path="/x", status="importing", bytes_total=100, files_total=2)
    await sync_to_async(Model.objects.create)(name="done", path="/y")  # ready: nothing to say about it
    communicator = WebsocketCommunicator(application, PATH, headers=await sync_to_async(session_headers)(alice))
    connected, _ = await communicator.connect()
    assert connected
    try:
        first = await communicator.receive_json_from(timeout=10)
        assert (first["type"], first["name"], first["status"], first["bytes_done"]) == ("import", "m", "importing", 0)
        await update(bytes_done=40, files_done=1)
        second = await communicator.receive_json_from(timeout=10)
        assert (second["bytes_done"], second["files_done"], second["bytes_total"]) == (40, 1, 100)
        await update(bytes_done=100, files_done=2, status="ready")
        last = await communicator.receive_json_from(timeout=10)
        assert (last["status"], last["bytes_done"]) == ("ready", 100)
        await sync_to_async(Model.objects.filter(name="m").delete)()
        assert (await communicator.receive_json_from(timeout=10))["status"] == "deleted"
        assert await communicator.receive_nothing(timeout=1.0)
    finally:
        await communicator.disconnect()


@pytest.fixture
def hub(repo_tiny_models, tmp_path):
    served = shutil.copytree(repo_tiny_models / "qwen2", tmp_path / "served")
    with HubServer({"tiny/qwen2": served}, bytes_per_s=150_000) as server:  # ~12 s: the bar is seen moving
        yield server


@pytest.fixture
def import_stack(platform_env, tmp_path, pipelines, settings, hub):
    """A live platform whose models folder is the test's own, with the stand-in as its hub."""
    models = tmp_path / "models"
    models.mkdir()
    settings.MODELS_DIR = models
    env = {**platform_env, "OMNISTAGE_MODELS_DIR": str(models), "HF_ENDPOINT": hub.url,
           "OMNISTAGE_REPLICA_BACKOFF_BASE_S": "1", "OMNISTAGE_HEARTBEAT_INTERVAL": "0.5",
           "OMNISTAGE_HEARTBEAT_TTL": "15"}  # fmt: skip
    env.pop("HF_HUB_OFFLINE", None)
    env.pop("TRANSFORMERS_OFFLINE", None)
    stack = ConsoleStack(env, tmp_path)
    settings.REDIS_URL = stack.redis.url
    yield stack
    Deployment.objects.update(desired_state="STOPPED")
    time.sleep(1.0)
    stack.stop()


ROW_STATE = """(name) => {
  const row = document.querySelector(`tr[data-model='${name}']`);
  const bar = row?.querySelector("[data-progress] > span");
  return { status: row?.dataset.status ?? null, width: bar ? parseFloat(bar.style.width || "0") : null };
}"""


def row_state(page, name: str) -> dict:
    """The row's status and its bar's width in percent (None without a bar, or while the page reloads)."""
    try:
        return page.evaluate(ROW_STATE, name)
    except Exception:  # the page reloads when the import ends
        return {"status": None, "width": None}


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_hub_import_shows_a_moving_bar_then_deploys_by_name_and_answers(import_stack, root, monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs an event loop
    base = import_stack.base
    with chromium_page() as page:
        page.goto(f"{base}/login/")
        page.fill("#id_username", "root")
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_selector("h1:text('Dashboard')")
        page.goto(f"{base}/models/")
        page.fill("#hub", "tiny/qwen2")
        page.fill("#hub-name", "hubqwen")
        page.click("#import-hub button[type=submit]")
        page.wait_for_selector("tr[data-model='hubqwen'][data-status='importing']")
        widths: list[float] = []
        shot_taken = False
        while (state := row_state(page, "hubqwen"))["status"] != "ready":
            assert state["status"] != "failed", page.content()
            width = state["width"]
            if width is not None and (not widths or widths[-1] != width):
                widths.append(width)
            if not shot_taken and width is not None and 20 < width < 80:
                shot(page, "models-01-import-progress")
                shot_taken = True
            time.sleep(0.1)
        moving = [width for width in widths if 0 < width < 100]
        assert len(moving) >= 3 and moving == sorted(moving), widths  # the bar grew as the bytes came
        page.wait_for_selector("tr[data-model='hubqwen'][data-status='ready']:has(td:text-is('llm'))")  # reloaded
        shot(page, "models-02-imported")

        page.goto(f"{base}/catalog/llm/deploy/")
        page.fill("[name=name]", "hubchat")
        page.fill("[name=model_dir]", "hubqwen")  # by name
        page.click("form button[type=submit]:text('Deploy')")
        page.wait_for_url(f"{base}/deployments/hubchat/")
        try:
            page.wait_for_selector("[data-deployment-state]:text('RUNNING')", timeout=300_000)
        except Exception:
            print(import_stack.logs())
            raise
    assert Deployment.objects.get(name="hubchat").model_dir == str(Model.objects.get(name="hubqwen").path)
    _, secret = api_key_create(user=root, name="chat", scopes=["inference"])
    answer = httpx.post(
        f"{base}/v1/chat/completions",
        headers={"Authorization": f"Bearer {secret}"},
        timeout=120,
        json={"model": "hubchat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8},
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["model"] == "hubchat" and answer.json()["choices"][0]["message"]["role"] == "assistant"
    assert answer.json()["usage"]["completion_tokens"] > 0


@pytest.fixture
def models_dir(tmp_path, settings):
    settings.MODELS_DIR = tmp_path / "models"
    settings.MODELS_DIR.mkdir()
    return settings.MODELS_DIR


def test_the_import_form_is_for_admins(models_dir, alice_client):
    page = alice_client.get(reverse("console:models")).content.decode()
    assert 'id="import-hub"' not in page and "console/js/models.js" in page
    refused = alice_client.post(reverse("console:models"), {"source": "hub", "hub": "tiny/qwen2"})
    assert refused.status_code == 403 and not Model.objects.exists()


def test_an_offline_hub_import_from_the_form_is_refused_on_its_field(models_dir, root_client, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    response = root_client.post(reverse("console:models"), {"source": "hub", "hub": "tiny/qwen2", "name": "q"})
    assert response.status_code == 400
    page = response.content.decode()
    assert 'data-error="hub"' in page and "HF_HUB_OFFLINE" in page and 'value="tiny/qwen2"' in page
    assert not Model.objects.exists()


def test_an_archive_uploaded_from_the_form_is_listed(models_dir, root_client):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in (("config.json", b'{"model_type": "llama", "architectures": ["LlamaForCausalLM"]}'),):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    upload = SimpleUploadedFile("uploaded.tar.gz", buffer.getvalue())
    response = root_client.post(reverse("console:models"), {"source": "archive", "archive": upload})
    assert response.status_code == 302
    page = root_client.get(reverse("console:models")).content.decode()
    assert 'data-model="uploaded" data-status="ready"' in page and "Imported “uploaded”" in page


def test_importing_and_failed_rows_show_a_bar_and_a_reason_with_retry(models_dir, root_client):
    Model.objects.create(name="coming", path="-", status="importing", bytes_done=25, bytes_total=100, files_total=4)
    Model.objects.create(name="broken", path="-", status="failed", status_reason="the hub answered 500",
                         hub_repo="tiny/qwen2", hub_revision="main")  # fmt: skip
    page = root_client.get(reverse("console:models")).content.decode()
    coming = page.split('data-model="coming"', 1)[1].split("</tr>", 1)[0]
    assert 'style="width:25.0%"' in coming and "0/4 files" in coming
    broken = page.split('data-model="broken"', 1)[1].split("</tr>", 1)[0]
    assert "the hub answered 500" in broken and 'value="tiny/qwen2"' in broken and "Retry" in broken
