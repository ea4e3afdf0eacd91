"""Hand-made hostile inputs for every /v1 and /api route: malformed JSON, values past every
bound, wrong types, broken media and multipart bodies. Each case is (label, method, path,
httpx keyword arguments)."""

from __future__ import annotations

import base64

DEEP = "[" * 100_000 + "]" * 100_000
HUGE = 2**80
LONE_SURROGATE = '"\\ud800"'
GARBAGE_PNG = "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"garbage" * 20).decode()
GARBAGE_WAV = base64.b64encode(b"RIFF\x00\x00\x00\x00WAVEjunk" * 8).decode()
JSON = {"Content-Type": "application/json"}

JSON_ROUTES = {
    "/v1/chat/completions": {"model": "echo", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
    "/v1/completions": {"model": "echo", "prompt": "hi", "max_tokens": 2},
    "/v1/audio/speech": {"model": "echo-voice", "input": "hi", "voice": "default"},
    "/v1/responses": {"model": "echo", "input": "hi", "max_output_tokens": 2},
    "/v1/images/generations": {"model": "echo", "prompt": "a cat"},
    "/v1/videos": {"model": "echo", "prompt": "a cat"},
    "/v1/realtime/client_secrets": {"session": {"type": "realtime", "model": "echo"}},
}
FORM_ROUTES = ("/v1/audio/transcriptions", "/v1/audio/translations", "/v1/images/edits", "/v1/videos")
GET_ROUTES = (
    "/v1/models", "/v1/models/%00", "/v1/models/" + "x" * 5000, "/v1/audio/voices?model=%ff", "/v1/responses/%2f..",
    "/v1/responses/x/input_items?limit=" + str(HUGE), "/v1/videos?limit=-1", "/v1/videos?after=%ud800",
    "/v1/videos/x/content?variant=../../etc/passwd", "/v1/files/%2e%2e/content",
    "/api/requests/?limit=" + str(HUGE), "/api/requests/?offset=-5", "/api/requests/?since=not-a-date",
    "/api/requests/?until=", "/api/requests/?user=", "/api/requests/?status=%00", "/api/usage/?since=99999999999999",
    "/api/usage/?group_by=%ud800", "/api/deployments/%2e%2e/", "/api/keys/" + str(HUGE) + "/",
    "/static/%2f..%2fsettings.py", "/static/console/%2f", "/static/console/..%2f..%2fsettings.py",
    "/static/%2fetc%2fpasswd", "/v1/models/..%5c..%5cetc",
)  # fmt: skip


def raw_body_cases(path: str) -> list[tuple[str, str, str, dict]]:
    """Bodies that are not the JSON object a route expects."""
    bodies = {
        "deep nesting": DEEP,
        "not json": "{model: echo",
        "empty": "",
        "array": "[]",
        "string": '"hi"',
        "null": "null",
        "nan": '{"model": "echo", "temperature": NaN}',
        "infinity": '{"model": "echo", "top_p": Infinity}',
        "1e400": '{"model": "echo", "temperature": 1e400}',
        "lone surrogate model": '{"model": ' + LONE_SURROGATE + "}",
        "invalid utf-8": b'{"model": "\xff\xfe"}',
    }
    return [(f"{path} {label}", "POST", path, {"content": body, "headers": JSON}) for label, body in bodies.items()]


def field_cases(path: str, base: dict) -> list[tuple[str, str, str, dict]]:
    """The route's valid body with one field made hostile."""
    hostile = {
        "seed": HUGE,
        "max_tokens": HUGE,
        "n": -(2**70),
        "temperature": "hot",
        "model": {"$ne": None},
        "stream": "yes",
        "user": "\ud800",
        "stop": [1, 2],
        "metadata": {"k": DEEP[:50]},
        "size": "99999999x99999999",
    }
    return [(f"{path} {name}", "POST", path, {"json": {**base, name: value}}) for name, value in hostile.items()]


def chat_cases() -> list[tuple[str, str, str, dict]]:
    path = "/v1/chat/completions"
    messages = {
        "lone surrogate content": [{"role": "user", "content": "\ud800"}],
        "not a list": "hello",
        "empty": [],
        "number": [1],
        "no content": [{"role": "user"}],
        "bad role": [{"role": "root", "content": "x"}],
        "content object": [{"role": "user", "content": {"a": 1}}],
        "bare image_url": [{"role": "user", "content": [{"type": "image_url"}]}],
        "image_url no data": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}],
        "image garbage": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": GARBAGE_PNG}}]}],
        "image file url": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}]}],
        "image private url": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://127.0.0.1:1/"}}]}],
        "audio garbage": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": GARBAGE_WAV, "format": "wav"}}]}],
        "audio bad base64": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "!!!", "format": "wav"}}]}],
        "unknown part": [{"role": "user", "content": [{"type": "file", "file": {"file_data": "x"}}]}],
        "video garbage": [{"role": "user", "content": [{"type": "video_url", "video_url": {"url": "data:video/mp4;base64,AAAA"}}]}],
    }  # fmt: skip
    unsupported = {
        "logit_bias": {"50256": -100},
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}},
        "logprobs": True,
        "sampling_params_list": [{"max_tokens": HUGE}],
        "additional_information": {"x": "\ud800"},
        "modalities": ["smell"],
        "audio": {"format": "exe"},
    }
    base = JSON_ROUTES[path]
    cases = [(f"chat messages {label}", "POST", path, {"json": {**base, "messages": value}})
             for label, value in messages.items()]  # fmt: skip
    cases += [(f"chat {name}", "POST", path, {"json": {**base, name: value}}) for name, value in unsupported.items()]
    return cases


def form_cases(path: str) -> list[tuple[str, str, str, dict]]:
    return [
        (f"{path} multipart without boundary", "POST", path,
         {"content": b"--x\r\n\r\n", "headers": {"Content-Type": "multipart/form-data"}}),
        (f"{path} multipart garbage", "POST", path,
         {"content": b"\x00\xff" * 100, "headers": {"Content-Type": "multipart/form-data; boundary=zz"}}),
        (f"{path} no file", "POST", path, {"data": {"model": "echo"}, "files": {"other": ("a.txt", b"x")}}),
        (f"{path} garbage file", "POST", path,
         {"data": {"model": "echo-voice", "seed": str(HUGE)}, "files": {"file": ("a.wav", b"junk"), "image": ("a.png", b"junk")}}),
        (f"{path} wrong media type", "POST", path, {"content": b"<x/>", "headers": {"Content-Type": "text/xml"}}),
    ]  # fmt: skip


def api_body_cases() -> list[tuple[str, str, str, dict]]:
    hostile = {
        "/api/keys/": {"name": "\ud800", "scopes": ["inference"]},
        "/api/deployments/": {"name": "x", "pipeline": "echo", "model_dir": "-", "deploy_config": {"max_queue": HUGE}},
    }
    cases = [(f"{path} hostile field", "POST", path, {"json": body}) for path, body in hostile.items()]
    for path in hostile:
        cases += [(f"{path} {label}", method, p, kw) for label, method, p, kw in raw_body_cases(path)]
    return cases


def all_cases() -> list[tuple[str, str, str, dict]]:
    cases = [(f"GET {path}", "GET", path, {}) for path in GET_ROUTES]
    for path, base in JSON_ROUTES.items():
        cases += raw_body_cases(path) + field_cases(path, base)
    cases += chat_cases()
    for path in FORM_ROUTES:
        cases += form_cases(path)
    return cases + api_body_cases()
