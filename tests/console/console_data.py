"""Test data for the console tests: history rows written through the inference services."""

from __future__ import annotations

import numpy as np

from control_plane.inference import services
from control_plane.inference.audio_encoding import encode_audio

SCRIPT = '<script>alert("owned")</script><img src=x onerror=alert(1)>'


def history_row(
    user,
    request_id: str,
    *,
    prompt: str,
    output: str = "ok",
    status: str = "completed",
    deployment: str = "dep",
    metrics: dict | None = None,
    route: str = "chat.completions",
):
    row = services.request_open(
        request_id=request_id,
        route=route,
        user=user,
        deployment_name=deployment,
        inputs={"prompt": prompt},
        parameters={"max_tokens": 8},
        modalities=["text", "audio"],
        status="running",
    )
    silence = encode_audio(np.zeros(100, np.float32), 16000, "wav")
    services.artifact_add(row, kind="audio", data=silence, mime_type="audio/wav", extension="wav")
    if status == "completed":
        services.request_close(
            row, status=status, output_text=output, summary_metrics=metrics or {"e2el_s": 0.2, "ttft_s": 0.05}
        )
    else:
        services.request_close(row, status=status, error={"message": "failed", "type": "server_error"})
    return row
