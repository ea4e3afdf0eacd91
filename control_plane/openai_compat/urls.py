"""Routes under /v1 (included by control_plane/urls.py). Anything else under /v1 answers an
OpenAI-shaped 404."""

from django.urls import include, path, re_path

from control_plane.inference.errors import ApiError, openai_endpoint
from control_plane.openai_compat import (
    chat,
    completions,
    files,
    image_edits,
    images,
    models_list,
    openapi,
    responses,
    speech,
    transcriptions,
    videos,
    voices,
)


@openai_endpoint("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
async def not_found(request, rest: str = ""):
    raise ApiError(404, f"Unknown request URL: {request.method} {request.path}.", code="unknown_url")


urlpatterns = [
    path("openapi.json", openapi.schema, name="v1-openapi"),
    path("models", models_list.model_list, name="v1-models"),
    path("models/<str:model>", models_list.model_detail, name="v1-model"),
    path("chat/completions", chat.chat_completions, name="v1-chat-completions"),
    path("completions", completions.completions, name="v1-completions"),
    path("audio/speech", speech.speech, name="v1-audio-speech"),
    path("audio/transcriptions", transcriptions.transcriptions, name="v1-audio-transcriptions"),
    path("audio/translations", transcriptions.translations, name="v1-audio-translations"),
    path("audio/voices", voices.voice_collection, name="v1-audio-voices"),
    path("audio/voices/<str:voice>", voices.voice_item, name="v1-audio-voice"),
    path("responses", responses.create, name="v1-responses"),
    path("responses/<str:response_id>", responses.item, name="v1-response"),
    path("responses/<str:response_id>/input_items", responses.item_inputs, name="v1-response-input-items"),
    path("images/generations", images.generations, name="v1-images-generations"),
    path("images/edits", image_edits.edits, name="v1-images-edits"),
    path("videos", videos.collection, name="v1-videos"),
    path("videos/<str:video_id>", videos.item, name="v1-video"),
    path("videos/<str:video_id>/content", videos.content, name="v1-video-content"),
    path("files/<str:token>/content", files.signed_file, name="v1-signed-file"),
    path("realtime/", include("control_plane.realtime.urls")),
    re_path(r"^(?P<rest>.*)$", not_found),
]
