"""`omnistage bench serve` as its users run it: the console script's module in a child process
whose environment holds no Django settings, with its exit status, output and result file."""

from __future__ import annotations

import json
import os
import subprocess
import time
import wave
from dataclasses import dataclass
from pathlib import Path

from procs import PYTHON, REPO, wait_for


@dataclass
class BenchRun:
    code: int
    stdout: str
    stderr: str
    result: dict | None

    def levels(self) -> list[dict]:
        assert self.result is not None, self.stderr
        return self.result["levels"]

    def requests(self) -> list[dict]:
        return [request for level in self.levels() for request in level["per_request"]]


def bench_argv(base_url: str, api_key: str, result_json: Path, *flags: str) -> list[str]:
    return [PYTHON, "-m", "client.cli", "bench", "serve", "--base-url", base_url, "--api-key", api_key,
            "--no-progress", "--result-json", str(result_json), *flags]  # fmt: skip


def client_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("DJANGO_", "PYTEST_"))}
    env["PYTHONPATH"] = str(REPO)
    return env


def bench_serve(base_url: str, api_key: str, tmp_path: Path, *flags: str, timeout: float = 900) -> BenchRun:
    result_json = tmp_path / f"bench-{time.monotonic_ns()}.json"
    done = subprocess.run(bench_argv(base_url, api_key, result_json, *flags), cwd=REPO, env=client_env(),
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip
    result = json.loads(result_json.read_text()) if result_json.exists() else None
    return BenchRun(done.returncode, done.stdout, done.stderr, result)


def wav_seconds(data: bytes) -> float:
    import io

    with wave.open(io.BytesIO(data), "rb") as reader:
        return reader.getnframes() / reader.getframerate()


def recorded_audio_seconds(request_id: str, direction: str = "out") -> float:
    """The seconds of the audio artifact the request's history row keeps: the answer's, or with
    `direction` "in" the spoken input's."""
    from control_plane.inference.models import Artifact

    def recorded() -> list[Artifact]:  # a stream's last event reaches the client before its row closes
        audio = Artifact.objects.filter(request__request_id=request_id, kind="audio")
        return [a for a in audio if a.meta.get("direction", "out") == direction]

    try:
        wait_for(recorded, timeout=60, what=f"the audio artifact of {request_id}")
    except TimeoutError:
        from control_plane.inference.models import InferenceRequest

        row = InferenceRequest.objects.filter(request_id=request_id).first()
        kept = [(a.kind, a.meta) for a in row.artifacts.all()] if row else None
        raise AssertionError(f"{request_id}: row {row and (row.status, row.route)}, artifacts {kept}") from None
    (artifact,) = recorded()
    return wav_seconds(artifact.file.read())


METRICS = ("request_throughput", "output_tokens_per_s", "audio_seconds_per_s", "ttft_ms", "tpot_ms", "itl_ms",
           "e2el_ms", "audio_ttfp_ms", "audio_rtf")  # fmt: skip
