"""GET /v1/openapi.json: the OpenAI-compatible routes as an OpenAPI 3.1 document (the REST API
under /api/ has its own, /api/schema/). Request bodies come from the structs the views parse
with (msgspec's JSON Schema of them), so the document follows the code; multipart bodies add
their file fields. The realtime WebSocket (/v1/realtime) is described by its events, not here.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import msgspec
from django.http import JsonResponse

from control_plane.inference.errors import openai_endpoint
from control_plane.openai_compat.chat import ChatRequest
from control_plane.openai_compat.completions import CompletionRequest
from control_plane.openai_compat.image_edits import ImageEditRequest
from control_plane.openai_compat.images import ImageRequest
from control_plane.openai_compat.response_inputs import ResponseRequest
from control_plane.openai_compat.speech import SpeechRequest
from control_plane.openai_compat.transcription_inputs import TranscriptionRequest
from control_plane.openai_compat.videos import VideoRequest
from control_plane.openai_compat.voices import VoiceForm

JSON, FORM, SSE = "application/json", "multipart/form-data", "text/event-stream"
AUDIO = "audio/*"
BINARY = {"type": "string", "format": "binary"}
REF = "#/components/schemas/{name}"


@dataclass(frozen=True)
class Operation:
    path: str
    method: str
    operation_id: str
    summary: str
    body: type | None = None
    body_type: str = JSON
    files: tuple[str, ...] = ()
    answers: tuple[str, ...] = (JSON,)
    parameters: tuple[tuple[str, str, bool], ...] = ()
    """(name, where: path or query, required)."""


OPERATIONS = (
    Operation("/v1/models", "get", "listModels", "The deployments the caller may call."),
    Operation("/v1/models/{model}", "get", "retrieveModel", "One deployment.", parameters=(("model", "path", True),)),
    Operation("/v1/chat/completions", "post", "createChatCompletion", "Chat: text, audio and image outputs.",
              ChatRequest, answers=(JSON, SSE)),
    Operation("/v1/completions", "post", "createCompletion", "A raw prompt (no chat template) in, text out.",
              CompletionRequest, answers=(JSON, SSE)),
    Operation("/v1/responses", "post", "createResponse", "Responses API: text and audio out, conversation state.",
              ResponseRequest, answers=(JSON, SSE)),
    Operation("/v1/responses/{response_id}", "get", "getResponse", "A stored response.",
              parameters=(("response_id", "path", True),)),
    Operation("/v1/responses/{response_id}", "delete", "deleteResponse", "Delete a stored response.",
              parameters=(("response_id", "path", True),)),
    Operation("/v1/responses/{response_id}/input_items", "get", "listInputItems", "A stored response's input.",
              parameters=(("response_id", "path", True), ("after", "query", False), ("limit", "query", False),
                          ("order", "query", False))),
    Operation("/v1/audio/speech", "post", "createSpeech", "Text to speech.", SpeechRequest,
              answers=(AUDIO, SSE)),
    Operation("/v1/audio/transcriptions", "post", "createTranscription", "Speech to text.", TranscriptionRequest,
              FORM, ("file",), (JSON, "text/plain", SSE)),
    Operation("/v1/audio/translations", "post", "createTranslation", "Speech to English text.",
              TranscriptionRequest, FORM, ("file",), (JSON, "text/plain")),
    Operation("/v1/audio/voices", "get", "listVoices", "The voices a deployment speaks with, the caller's own too.",
              parameters=(("model", "query", True),)),
    Operation("/v1/audio/voices", "post", "createVoice", "A custom voice from a reference clip.", VoiceForm, FORM,
              ("file",)),
    Operation("/v1/audio/voices/{voice}", "delete", "deleteVoice", "Delete one of the caller's custom voices.",
              parameters=(("voice", "path", True),)),
    Operation("/v1/images/generations", "post", "createImage", "Text to image.", ImageRequest),
    Operation("/v1/images/edits", "post", "createImageEdit", "Image to image.", ImageEditRequest, FORM, ("image",)),
    Operation("/v1/videos", "post", "createVideo", "Start a video job.", VideoRequest),
    Operation("/v1/videos", "get", "listVideos", "The caller's video jobs.",
              parameters=(("after", "query", False), ("limit", "query", False), ("order", "query", False))),
    Operation("/v1/videos/{video_id}", "get", "getVideo", "One video job.", parameters=(("video_id", "path", True),)),
    Operation("/v1/videos/{video_id}", "delete", "deleteVideo", "Delete a video job.",
              parameters=(("video_id", "path", True),)),
    Operation("/v1/videos/{video_id}/content", "get", "getVideoContent", "The video file.",
              answers=("video/mp4",), parameters=(("video_id", "path", True),)),
    Operation("/v1/files/{token}/content", "get", "getSignedFile", "An artifact by signed, expiring URL (the token "
              "is the credential).", answers=("application/octet-stream",), parameters=(("token", "path", True),)),
    Operation("/v1/realtime/client_secrets", "post", "createRealtimeClientSecret",
              "A short-lived secret for a browser's realtime session."),
)  # fmt: skip

ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type"],
            "properties": {name: {"type": ["string", "null"]} for name in ("message", "type", "param", "code")},
        }
    },
}


def _body(operation: Operation) -> dict[str, Any]:
    schema: dict[str, Any] = {"$ref": REF.format(name=operation.body.__name__)}
    if operation.files:
        properties = {name: BINARY for name in operation.files}
        schema = {"allOf": [schema, {"type": "object", "required": list(operation.files), "properties": properties}]}
    return {"required": True, "content": {operation.body_type: {"schema": schema}}}


def _operation(operation: Operation) -> dict[str, Any]:
    body: dict[str, Any] = {
        "operationId": operation.operation_id,
        "summary": operation.summary,
        "responses": {
            "200": {"description": "OK", "content": {kind: {} for kind in operation.answers}},
            "4XX": {"description": "An invalid request, in OpenAI's error shape (`param` names the field).",
                    "content": {JSON: {"schema": {"$ref": REF.format(name="Error")}}}},
        },
    }  # fmt: skip
    if operation.parameters:
        body["parameters"] = [{"name": name, "in": where, "required": required, "schema": {"type": "string"}}
                              for name, where, required in operation.parameters]  # fmt: skip
    if operation.body is not None:
        body["requestBody"] = _body(operation)
    return body


@functools.cache
def document() -> dict[str, Any]:
    bodies = tuple(dict.fromkeys(op.body for op in OPERATIONS if op.body is not None))
    _, components = msgspec.json.schema_components(bodies, ref_template=REF)
    paths: dict[str, dict[str, Any]] = {}
    for operation in OPERATIONS:
        paths.setdefault(operation.path, {})[operation.method] = _operation(operation)
    return {
        "openapi": "3.1.0",
        "info": {"title": "Omnistage OpenAI-compatible API", "version": "0.1.0",
                 "description": "Authenticate with `Authorization: Bearer <API key>`."},
        "paths": paths,
        "components": {"schemas": {**components, "Error": ERROR},
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
    }  # fmt: skip


@openai_endpoint("GET")
async def schema(request):
    return JsonResponse(document())
