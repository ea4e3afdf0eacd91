""" "View code": the curl and Python (openai client) calls that make the same request as a
playground did, against the OpenAI-compatible API."""

from __future__ import annotations

import json
import shlex

from console.playground_requests import PlaygroundRequest

PLACEHOLDER_KEY = "$OMNISTAGE_API_KEY"


def _shorten_media(messages: list) -> list:
    """Attachments are data URLs of megabytes: show their shape, not their bytes."""
    shortened = []
    for message in messages:
        content = message["content"]
        if isinstance(content, list):
            content = [_short_part(part) for part in content]
        shortened.append({**message, "content": content})
    return shortened


def _short_part(part: dict) -> dict:
    if part.get("type") == "image_url":
        return {"type": "image_url", "image_url": {"url": "data:image/png;base64,<…>"}}
    if part.get("type") == "input_audio":
        return {
            "type": "input_audio",
            "input_audio": {"data": "<base64 audio>", "format": part["input_audio"]["format"]},
        }
    return part


def _body(run: PlaygroundRequest) -> tuple[str, dict]:
    p = run.parameters
    if run.mode == "chat":
        body = {
            "model": run.deployment,
            "messages": _shorten_media(run.request.messages or []),
            "max_tokens": p["max_tokens"],
            "temperature": p["temperature"],
            "modalities": run.modalities or ["text"],
            "stream": True,
        }
        if "audio" in body["modalities"]:
            body["audio"] = {"format": p["audio_format"], **({"voice": p["voice"]} if p["voice"] else {})}
        return "/v1/chat/completions", body
    if run.mode == "image":
        body = {"model": run.deployment, "prompt": run.request.prompt, "size": p["size"], "n": 1}
        body["num_inference_steps"] = p["num_inference_steps"]
        if p["seed"] is not None:
            body["seed"] = p["seed"]
        return "/v1/images/generations", body
    if run.mode == "speech":
        body = {"model": run.deployment, "input": run.request.prompt, "response_format": p["response_format"]}
        if p["voice"]:
            body["voice"] = p["voice"]
        return "/v1/audio/speech", body
    body = {"model": run.deployment, "prompt": run.request.prompt, "size": p["size"]}
    if p["num_frames"] is not None:
        body["num_frames"] = p["num_frames"]
    body["num_inference_steps"] = p["num_inference_steps"]
    if p["seed"] is not None:
        body["seed"] = p["seed"]
    return "/v1/videos", body


def curl_sample(run: PlaygroundRequest, base_url: str) -> str:
    path, body = _body(run)
    lines = [f"curl {shlex.quote(base_url + path)}", f'  -H "Authorization: Bearer {PLACEHOLDER_KEY}"']
    if run.mode == "video":  # the videos route takes a multipart form
        lines += [f"  -F {shlex.quote(f'{key}={value}')}" for key, value in body.items()]
    else:
        lines += ['  -H "Content-Type: application/json"', f"  -d {shlex.quote(json.dumps(body, indent=2))}"]
    if run.mode in ("speech",):
        lines.append(f"  --output speech.{body['response_format'].replace('pcm16', 'pcm')}")
    if run.mode == "chat":
        lines.insert(1, "  -N")
    return " \\\n".join(lines)


def python_sample(run: PlaygroundRequest, base_url: str) -> str:
    path, body = _body(run)
    head = (
        "import os\n\nfrom openai import OpenAI\n\n"
        f'client = OpenAI(base_url="{base_url}/v1", api_key=os.environ["OMNISTAGE_API_KEY"])\n'
    )
    if run.mode == "chat":
        standard = {
            k: body[k] for k in ("model", "messages", "max_tokens", "temperature", "modalities", "audio") if k in body
        }
        return head + (
            f"\nstream = client.chat.completions.create(\n    **{_py(standard)},\n    stream=True,\n)\n"
            "for chunk in stream:\n"
            "    delta = chunk.choices[0].delta\n"
            '    print(delta.content or "", end="", flush=True)\n'
            '    # audio arrives as base64 PCM in getattr(delta, "audio", None)\n'
        )
    if run.mode == "image":
        extra = {k: v for k, v in body.items() if k not in ("model", "prompt", "size", "n")}
        return head + (
            f"\nresult = client.images.generate(\n    model={body['model']!r},\n    prompt={body['prompt']!r},\n"
            f"    size={body['size']!r},\n    extra_body={_py(extra)},\n)\n"
            'import base64\nopen("image.png", "wb").write(base64.b64decode(result.data[0].b64_json))\n'
        )
    if run.mode == "speech":
        return head + (
            f"\nresponse = client.audio.speech.create(\n    model={body['model']!r},\n    input={body['input']!r},\n"
            f"    voice={body.get('voice')!r},  # None: the model's default voice\n"
            f"    response_format={body['response_format']!r},\n)\n"
            f'response.write_to_file("speech.{body["response_format"].replace("pcm16", "pcm")}")\n'
        )
    return (
        "import os\n\nimport httpx\n\n"
        f'job = httpx.post(\n    "{base_url}{path}",\n'
        '    headers={"Authorization": f"Bearer {os.environ[\'OMNISTAGE_API_KEY\']}"},\n'
        f"    data={_py({k: str(v) for k, v in body.items()})},\n).json()\n"
        f"# poll GET {path}/{{job['id']}} until its status is 'completed', then GET {path}/{{job['id']}}/content\n"
    )


def _py(value) -> str:
    """A Python literal for JSON data (True/False/None, not true/false/null)."""
    return repr(json.loads(json.dumps(value)))


def code_samples(run: PlaygroundRequest, base_url: str) -> dict[str, str]:
    return {"curl": curl_sample(run, base_url), "python": python_sample(run, base_url)}
