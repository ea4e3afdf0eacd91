"""The voices a deployment's checkpoint speaks with, as its family publishes them
(`python -m stages.models.voices`, run once per checkpoint and process: reading them may need torch,
which the control plane never imports): {"voices": [...], "default_voice": ..., "reference_voices": bool}."""

from __future__ import annotations

import asyncio
import json
import sys

from control_plane.inference.errors import ApiError
from control_plane.inference.targets import Served

READ_TIMEOUT_S = 120.0
_published: dict[tuple[str, str], dict] = {}


async def published_voices(served: Served) -> dict:
    """{"voices": [...], "default_voice": ..., "reference_voices": ...} of the deployment's checkpoint."""
    key = (served.pipeline.family, served.deployment.model_dir)
    if key not in _published:
        out = await run_stages_tool("stages.models.voices", *key, what="Reading the model's voices")
        _published[key] = json.loads(out)
    return _published[key]


async def run_stages_tool(module: str, *args: str, what: str, stdin: bytes | None = None) -> bytes:
    """Run `python -m module args` (a torch-side tool of the engine library) and return its stdout;
    a timeout is a 503, a failure a 500 naming the tool's last line of stderr."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", module, *args, stdin=asyncio.subprocess.PIPE if stdin is not None else None,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(process.communicate(stdin), READ_TIMEOUT_S)
    except TimeoutError:
        process.kill()
        raise ApiError(503, f"{what} timed out; retry later.", code="voices_unavailable",
                       headers={"Retry-After": "5"}) from None  # fmt: skip
    if process.returncode != 0:
        reason = err.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise ToolFailed(process.returncode, f"{what} failed: {reason[0]}")
    return out


class ToolFailed(ApiError):
    """A tool's non-zero exit: a 500 unless its caller knows what the status means."""

    def __init__(self, returncode: int, message: str):
        super().__init__(500, message, code="voices_unavailable")
        self.returncode = returncode
        self.reason = message
