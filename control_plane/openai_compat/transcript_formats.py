"""A finished transcript in the `response_format` asked for: json, text, srt, vtt or
verbose_json. The model answers in one piece, so the subtitles and verbose_json hold one
segment spanning the whole file."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse, JsonResponse

from control_plane.inference.outcome import Usage


def token_usage(usage: Usage) -> dict[str, Any]:
    """OpenAI's token usage of a transcription; the input tokens are the audio's and the
    instruction's, as the model read them."""
    return {"type": "tokens", "input_tokens": usage.prompt_tokens, "output_tokens": usage.completion_tokens,
            "total_tokens": usage.prompt_tokens + usage.completion_tokens}  # fmt: skip


def timestamp(seconds: float, separator: str) -> str:
    millis = int(round(seconds * 1000))
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    secs, millis = divmod(millis, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{millis:03d}"


def srt(text: str, duration: float) -> str:
    return f"1\n{timestamp(0, ',')} --> {timestamp(duration, ',')}\n{text.strip()}\n\n"


def vtt(text: str, duration: float) -> str:
    return f"WEBVTT\n\n{timestamp(0, '.')} --> {timestamp(duration, '.')}\n{text.strip()}\n\n"


def verbose(text: str, *, task: str, language: str, duration: float, temperature: float) -> dict[str, Any]:
    segment = {"id": 0, "seek": 0, "start": 0.0, "end": round(duration, 3), "text": text, "tokens": [],
               "temperature": temperature, "avg_logprob": 0.0, "compression_ratio": 1.0, "no_speech_prob": 0.0}  # fmt: skip
    return {"task": task, "language": language, "duration": round(duration, 3), "text": text, "segments": [segment],
            "usage": {"type": "duration", "seconds": round(duration, 3)}}  # fmt: skip


def render(fmt: str, text: str, usage: Usage, *, task: str, language: str, duration: float, temperature: float):
    if fmt == "text":
        return HttpResponse(text, content_type="text/plain; charset=utf-8")
    if fmt == "srt":
        return HttpResponse(srt(text, duration), content_type="application/x-subrip; charset=utf-8")
    if fmt == "vtt":
        return HttpResponse(vtt(text, duration), content_type="text/vtt; charset=utf-8")
    if fmt == "verbose_json":
        return JsonResponse(verbose(text, task=task, language=language, duration=duration, temperature=temperature))
    return JsonResponse({"text": text, "usage": token_usage(usage)})
