""" "View code" for the voice playground: one spoken turn over `/v1/realtime`, in Python with the
official `openai` SDK's realtime client and in JavaScript with a plain WebSocket (the GA event
names; the server accepts the beta ones too)."""

from __future__ import annotations

import json

DEFAULT_INSTRUCTIONS = "You are a helpful assistant."

PYTHON = '''\
"""One spoken turn: send a WAV (24 kHz mono 16-bit), save the spoken answer as answer.wav."""
import base64
import os
import sys
import wave

from openai import OpenAI

client = OpenAI(
    base_url="{http_base}/v1",
    websocket_base_url="{ws_base}/v1",
    api_key=os.environ["OMNISTAGE_API_KEY"],
)

with wave.open(sys.argv[1], "rb") as question:
    pcm16 = question.readframes(question.getnframes())

with client.realtime.connect(model={model}) as connection:
    connection.session.update(session={session})
    for start in range(0, len(pcm16), 9600):  # 200 ms per event
        connection.input_audio_buffer.append(audio=base64.b64encode(pcm16[start : start + 9600]).decode())
    connection.input_audio_buffer.commit()
    connection.response.create()

    answer = bytearray()
    for event in connection:
        if event.type == "response.output_audio.delta":
            answer += base64.b64decode(event.delta)
        elif event.type == "response.output_audio_transcript.delta":
            print(event.delta, end="", flush=True)
        elif event.type == "error":
            raise SystemExit(event.error.message)
        elif event.type == "response.done":
            break

with wave.open("answer.wav", "wb") as out:
    out.setnchannels(1)
    out.setsampwidth(2)
    out.setframerate(24000)
    out.writeframes(bytes(answer))
print()
'''

JAVASCRIPT = """\
// One spoken turn over a WebSocket (Node 22+ or a browser). In a browser, do not ship an API key:
// mint a short-lived secret on your server with POST {http_base}/v1/realtime/client_secrets.
const key = process.env.OMNISTAGE_API_KEY;
const socket = new WebSocket("{ws_base}/v1/realtime?model=" + encodeURIComponent({model}),
  ["realtime", "openai-insecure-api-key." + key]);
const answer = [];

socket.onopen = () => {{
  socket.send(JSON.stringify({{ type: "session.update", session: {session} }}));
  // pcm16: an Int16Array of 24 kHz mono samples (the microphone, or a decoded file)
  const pcm16 = new Int16Array(24000);
  const bytes = new Uint8Array(pcm16.buffer);
  socket.send(JSON.stringify({{ type: "input_audio_buffer.append", audio: btoa(String.fromCharCode(...bytes)) }}));
  socket.send(JSON.stringify({{ type: "input_audio_buffer.commit" }}));
  socket.send(JSON.stringify({{ type: "response.create" }}));
}};

socket.onmessage = ({{ data }}) => {{
  const event = JSON.parse(data);
  if (event.type === "response.output_audio.delta") answer.push(event.delta);  // base64 pcm16, 24 kHz
  else if (event.type === "response.output_audio_transcript.delta") console.log(event.delta);
  else if (event.type === "error") console.error(event.error.message);
  else if (event.type === "response.done") socket.close();
}};
"""


def _session(voice: str, instructions: str) -> dict:
    session = {"type": "realtime", "instructions": instructions or DEFAULT_INSTRUCTIONS}
    session["audio"] = {"input": {"turn_detection": None}}  # this sample commits its turn itself
    if voice:
        session["audio"]["output"] = {"voice": voice}
    return session


def voice_code_samples(base_url: str, deployment: str, voice: str = "", instructions: str = "") -> dict[str, str]:
    """`base_url`: the console's origin (http or https); the WebSocket's follows it."""
    http_base = base_url.rstrip("/")
    ws_base = "ws" + http_base.removeprefix("http")
    session = _session(voice, instructions)
    python = PYTHON.format(http_base=http_base, ws_base=ws_base, model=repr(deployment), session=repr(session))
    javascript = JAVASCRIPT.format(
        http_base=http_base, ws_base=ws_base, model=json.dumps(deployment), session=json.dumps(session)
    )
    return {"python": python, "javascript": javascript}
