"""Media URLs (OMNISTAGE_FETCH_MEDIA_URLS=1) against real local HTTP servers: every hop's
resolved address is checked, so neither a URL nor a redirect reaches loopback, private,
link-local or other non-public addresses unless a network is allowed explicitly; redirects,
size and time are capped; the client is told one generic sentence."""

from __future__ import annotations

import base64
import http.server
import threading
import time

import pytest

from control_plane.inference.errors import ApiError
from control_plane.openai_compat.chat_inputs import prepare_messages

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
ALLOWED = "127.0.0.2"  # the "public" media host of these tests: allowed through MEDIA_URL_ALLOWED_NETWORKS


def serve(host: str, routes: dict):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            action = routes.get(self.path)
            if action is None:
                self.send_response(404)
                self.end_headers()
                return
            action(self)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer((host, 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def image(handler, body: bytes = PNG):
    handler.send_response(200)
    handler.send_header("Content-Type", "image/png")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def redirect(to: str):
    def action(handler):
        handler.send_response(302)
        handler.send_header("Location", to)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    return action


def slow(handler):
    handler.send_response(200)
    handler.send_header("Content-Type", "image/png")
    handler.end_headers()
    for _ in range(50):
        handler.wfile.write(b"x")
        handler.wfile.flush()
        time.sleep(0.1)


def unbounded(handler):  # no Content-Length: counted as it arrives
    handler.send_response(200)
    handler.send_header("Content-Type", "image/png")
    handler.end_headers()
    for _ in range(100):
        handler.wfile.write(b"0" * 10_000)


@pytest.fixture
def servers(settings):
    internal = serve("127.0.0.1", {"/secret.png": image})  # an internal service: loopback
    port = internal.server_port
    routes = {
        "/cat.png": image,
        "/to-internal": redirect(f"http://127.0.0.1:{port}/secret.png"),
        "/to-localhost": redirect(f"http://localhost:{port}/secret.png"),
        "/to-metadata": redirect("http://169.254.169.254/latest/meta-data/"),
        "/to-self": redirect("/cat.png"),
        "/loop": redirect("/loop"),
        "/slow.png": slow,
        "/big.png": lambda handler: image(handler, b"0" * 200_000),
        "/unbounded.png": unbounded,
    }
    public = serve(ALLOWED, routes)
    settings.FETCH_MEDIA_URLS = True
    settings.MEDIA_URL_HOSTS = []
    settings.MEDIA_URL_ALLOWED_NETWORKS = [f"{ALLOWED}/32"]
    settings.MAX_MEDIA_BYTES = 100_000
    settings.MEDIA_FETCH_TIMEOUT_S = 2.0
    yield f"http://{ALLOWED}:{public.server_port}", port
    public.shutdown()
    internal.shutdown()


def message(url: str) -> list[dict]:
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]


async def refused(url: str) -> ApiError:
    with pytest.raises(ApiError) as caught:
        await prepare_messages(message(url))
    return caught.value


async def test_an_allowed_host_is_fetched_and_same_host_redirects_followed(servers):
    base, _ = servers
    for path in ("/cat.png", "/to-self"):
        (fetched,) = await prepare_messages(message(base + path))
        assert base64.b64decode(fetched["content"][0]["image_url"]["url"].split(",")[1]) == PNG


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:{port}/secret.png",
        "http://localhost:{port}/secret.png",
        "http://[::1]:{port}/secret.png",
        "http://0.0.0.0:{port}/secret.png",
        "http://127.1:{port}/secret.png",
        "http://2130706433:{port}/secret.png",  # 127.0.0.1 as one number
        "http://[::ffff:127.0.0.1]:{port}/secret.png",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/x.png",
        "http://192.168.1.1/x.png",
        "http://172.16.0.1/x.png",
        "http://[fe80::1]/x.png",
        "http://224.0.0.1/x.png",
        "http://100.64.0.1/x.png",
    ],
)
async def test_non_public_addresses_are_refused(servers, url):
    _, port = servers
    error = await refused(url.format(port=port))
    assert error.status == 400 and error.code == "url_fetch_failed"


@pytest.mark.parametrize("path", ["/to-internal", "/to-localhost", "/to-metadata"])
async def test_a_redirect_to_an_internal_address_is_refused(servers, path):
    base, port = servers
    error = await refused(base + path)
    assert error.code == "url_fetch_failed"
    assert str(port) not in error.message and "127.0.0.1" not in error.message and "302" not in error.message


async def test_redirects_size_and_time_are_capped(servers):
    base, _ = servers
    assert (await refused(base + "/loop")).code == "url_fetch_failed"
    assert (await refused(base + "/big.png")).status == 413
    assert (await refused(base + "/unbounded.png")).status == 413
    started = time.perf_counter()
    assert (await refused(base + "/slow.png")).code == "url_fetch_failed"
    assert time.perf_counter() - started < 4


async def test_errors_tell_one_generic_sentence(servers):
    base, port = servers
    messages = {
        (await refused(url)).message for url in (base + "/missing.png", f"http://127.0.0.1:{port}/x", base + "/loop")
    }
    assert messages == {"Could not fetch 'messages[0].content[0].image_url.url'."}
