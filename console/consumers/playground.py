"""The playgrounds' WebSocket: one per page, authenticated by the session.

The browser sends `{"type": "run", "ref", "mode", "deployment", "input"}` (see
playground_requests.py) and may send `{"type": "cancel", "ref"}`; several runs may be in
flight at once (an image gallery, a video job queue). Each run is checked, admitted by the
accounts quota, recorded in the history, and served through `serve()`; its outputs go back
as the events listed in relay.py, each carrying the run's `ref`.
"""

from __future__ import annotations

import asyncio
import logging

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from console.code_samples import code_samples
from console.history import history_close, history_open
from console.playground_requests import PlaygroundInvalid, PlaygroundRequest, playground_request
from console.relay import RunRecord, message_events
from control_plane.accounts.permissions import AccessDenied, check_access
from control_plane.accounts.quota import QuotaExceeded, QuotaUnavailable, aquota_admit, aquota_refund
from control_plane.accounts.usage import usage_record
from control_plane.deployments.models import DeploymentState
from control_plane.deployments.queries import deployment_get
from control_plane.deployments.services import pipeline_config_of
from control_plane.inference.models import Status
from control_plane.openai_compat.chat import check_modalities
from control_plane.openai_compat.chat_inputs import prepare_messages, summarize
from control_plane.openai_compat.errors import ApiError
from control_plane.openai_compat.payloads import PayloadUnavailable, resolve
from control_plane.openai_compat.sampling import build_sampling
from control_plane.orchestrator.serving import ServingUnavailable, cancel, serve
from control_plane.redis_client import get_async_redis
from stages.config import load_deploy_config
from stages.protocol import StageOutput

log = logging.getLogger(__name__)
IDLE_TIMEOUT_S = 120.0
USAGE_MODALITY = {"chat": "text", "image": "image", "speech": "audio", "video": "video"}


def _deployment_for(user, name: str):
    deployment = deployment_get(name)
    if deployment is None:
        raise PlaygroundInvalid("deployment", f"no deployment named {name!r}")
    try:
        check_access(user, None, "inference", deployment)
    except AccessDenied as denied:
        raise PlaygroundInvalid("deployment", denied.message) from None
    if deployment.state != DeploymentState.RUNNING:
        raise PlaygroundInvalid("deployment", f"{name} is {deployment.state}; wait until it is RUNNING")
    return deployment


async def _prepare(run: PlaygroundRequest, deployment) -> dict:
    """Shape and check the request as the OpenAI routes do (media, modalities, per-stage
    sampling); returns the later stages' sampling."""
    pipeline = await database_sync_to_async(pipeline_config_of)(deployment.pipeline)
    outputs = pipeline.output_modalities
    try:
        if run.mode == "chat":
            wanted = [modality for modality in ("text", "audio") if modality in outputs] or None
            run.modalities = check_modalities(wanted, outputs)
            run.request.params["modalities"] = run.modalities
        if run.mode == "speech":  # a chat-template model reads messages, others the prompt
            run.request.prompt, run.request.messages = (
                (None, run.request.messages) if pipeline.needs_chat_template else (run.request.prompt, None)
            )
        if run.request.messages:
            run.request.messages = await prepare_messages(run.request.messages)
            run.inputs["messages"] = summarize(run.request.messages)  # the history keeps no media bytes
        fields = {key: run.parameters[key] for key in ("max_tokens", "temperature") if key in run.parameters}
        deploy = load_deploy_config(deployment.deploy_config or {}, pipeline)
        entry, later, extra = build_sampling(pipeline, deploy, fields, None)
    except ApiError as error:
        param = error.param or ""
        field = "attachments" if ".content[" in param else param.rpartition(".")[2] or "input"
        raise PlaygroundInvalid(field, error.message) from None
    if entry is not None:
        run.request.sampling = entry
    run.request.params.update(extra)
    return later


async def _readable(output: StageOutput, client) -> StageOutput:
    """Large payloads travel as Redis handles: read them so the browser gets bytes."""
    for name, payload in list(output.payloads.items()):
        try:
            output.payloads[name] = await resolve(payload, client)
        except PayloadUnavailable:
            log.warning("payload %s of %s could not be read", name, output.request_id)
    return output


def _estimate(run: PlaygroundRequest) -> dict:
    if run.mode == "image":
        return {"images": 1}
    if run.mode == "chat":
        return {"text_tokens": run.parameters["max_tokens"]}
    return {}


def _usage(run: PlaygroundRequest, record: RunRecord, summary_usage: dict) -> dict:
    return {
        "text_tokens_in": int(summary_usage.get("prompt_tokens", 0)),
        "text_tokens_out": int(summary_usage.get("completion_tokens", 0)),
        "audio_seconds_out": round(record.audio_seconds, 3),
        "images": sum(1 for media in record.media if media.kind == "image"),
        "video_seconds": sum(
            float(m.params.get("num_frames", 0)) / float(m.params.get("fps", 1) or 1)
            for m in record.media
            if m.kind == "video"
        ),
    }


def _ending(run: PlaygroundRequest, message) -> tuple[dict, dict]:
    """How the history row ends, and the browser's last event, for a complete or fail message."""
    summary = message.summary
    metrics = dict(summary.metrics) if summary else {}
    usage = dict(summary.usage) if summary else {}
    if message.kind == "complete":
        reason = summary.finish_reason if summary else None
        done = {"type": "done", "request_id": run.request.request_id, "finish_reason": reason, "metrics": metrics,
                "usage": usage}  # fmt: skip
        return {"status": Status.COMPLETED, "finish_reason": reason or "stop", "metrics": metrics,
                "summary_usage": usage}, done  # fmt: skip
    error = message.error
    text = error.message if error else "the request failed"
    param = error.param if error else None
    body = {"message": text, "type": error.type if error else "server_error", "param": param}
    ending = {"status": Status.FAILED, "finish_reason": "error", "error": body, "metrics": metrics,
              "summary_usage": usage}  # fmt: skip
    return ending, {"type": "error", "message": text, "field": param}


class PlaygroundConsumer(AsyncJsonWebsocketConsumer):
    # An alias that is never configured: this consumer takes no channel-layer messages (its runs'
    # outputs come through serve()), so it holds no blocking channel-layer read. That read did not
    # end when cancelled (channels_redis 4.3 over redis-py 8): a closed socket's consumer kept
    # running, and a test's event loop could not close.
    channel_layer_alias = "playground-needs-no-channel-layer"

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated or not user.is_active:
            await self.close(code=4401)
            return
        self.user = user
        self.runs: dict[str, asyncio.Task] = {}
        await self.accept()

    async def disconnect(self, code):
        for task in getattr(self, "runs", {}).values():
            task.cancel()

    async def receive_json(self, content, **kwargs):
        if not isinstance(content, dict):
            return
        ref = str(content.get("ref", ""))[:64]
        if content.get("type") == "run" and ref not in self.runs:
            self.runs[ref] = asyncio.create_task(self._run(ref, content))
        elif content.get("type") == "cancel" and ref in self.runs:
            self.runs.pop(ref).cancel()  # leaving serve() cancels the request in every stage
            await self._send(ref, {"type": "cancelled"})

    async def _send(self, ref: str, event: dict) -> None:
        await self.send_json({**event, "ref": ref})

    def _base_url(self) -> str:
        headers = dict(self.scope.get("headers", []))
        host = headers.get(b"host", b"127.0.0.1:8000").decode()
        return f"http://{host}"

    async def _run(self, ref: str, content: dict) -> None:
        try:
            run = playground_request(content)
            deployment = await database_sync_to_async(_deployment_for)(self.user, run.deployment)
            later_sampling = await _prepare(run, deployment)
            admission = await aquota_admit(user=self.user, estimate=_estimate(run))
        except PlaygroundInvalid as invalid:
            await self._send(ref, {"type": "error", "message": invalid.message, "field": invalid.field})
        except QuotaExceeded as exceeded:
            await self._send(ref, {"type": "error", "message": exceeded.message, "field": None})
        except QuotaUnavailable:
            await self._send(ref, {"type": "error", "message": "Quota service unavailable; try again.", "field": None})
        except Exception:  # a bug must reach the browser as an error, not leave it waiting
            log.exception("the playground could not start run %s", ref)
            await self._send(ref, {"type": "error", "message": "The console failed to start this run.", "field": None})
        else:
            await self._serve(ref, run, deployment, admission, later_sampling)
        finally:
            self.runs.pop(ref, None)

    async def _serve(self, ref: str, run: PlaygroundRequest, deployment, admission, later_sampling: dict) -> None:
        row = await database_sync_to_async(history_open)(user=self.user, run=run, deployment=deployment)
        await self._send(
            ref,
            {"type": "started", "request_id": run.request.request_id, "code": code_samples(run, self._base_url())},
        )
        record = RunRecord()
        ending: dict = {"status": Status.CANCELLED, "finish_reason": "abort"}
        last_event = None
        client = get_async_redis()
        stream = serve(str(deployment.id), run.request, later_sampling, idle_timeout_s=IDLE_TIMEOUT_S)
        try:
            async for message in stream:
                if message.output is not None and message.output.payloads:
                    message.output = await _readable(message.output, client)
                for event in message_events(message, record):
                    await self._send(ref, event)
                if message.kind in ("complete", "fail"):
                    ending, last_event = _ending(run, message)
        except ServingUnavailable as error:
            ending = {"status": Status.FAILED, "error": {"message": str(error), "type": "server_error"}}
            last_event = {"type": "error", "message": str(error), "field": None}
        except asyncio.CancelledError:
            # record the stop first: closing the stream must not be able to keep the row open
            await asyncio.shield(self._close_history(row, record, ending, run, admission, {}))
            try:
                await asyncio.wait_for(self._end(stream, client, run.request.request_id), timeout=5)
            except Exception:
                log.warning("closing the stream of stopped run %s failed", run.request.request_id, exc_info=True)
            raise
        await self._end(stream, client, run.request.request_id)
        # the history row is complete before the browser hears the end, so its link shows it all
        await self._close_history(row, record, ending, run, admission, ending.pop("summary_usage", {}))
        if last_event is not None:
            await self._send(ref, last_event)

    @staticmethod
    async def _end(stream, client, request_id: str) -> None:
        """Cancel the request in every stage (idempotent once it ended) and close the stream."""
        try:
            await cancel(client, request_id)
            await stream.aclose()
        except RuntimeError:
            pass  # the generator is still unwinding the task's cancellation; the cancel above went out
        finally:
            await client.aclose()

    async def _close_history(self, row, record, ending, run, admission, summary_usage) -> None:
        usage = _usage(run, record, summary_usage)
        try:
            await database_sync_to_async(history_close)(row, record, usage=usage, **ending)
            if ending["status"] == Status.COMPLETED:
                await database_sync_to_async(usage_record)(
                    request_id=run.request.request_id,
                    user=self.user,
                    deployment=run.deployment,
                    modality=USAGE_MODALITY[run.mode],
                    admission=admission,
                    **usage,
                )
            else:
                await aquota_refund(admission)
        except Exception:  # the history must not break the page; log it
            log.exception("could not record playground request %s", run.request.request_id)
