"""The `llm` family: one autoregressive stage that answers chat messages with text.

Any transformers causal LM checkpoint (Qwen2, Qwen3, Llama, ...) with a tokenizer and a
chat template. The stage runs on our torch engine by default, or on vLLM when the
stage's deploy config says `backend: vllm`. `messages` are turned into prompt token ids
with the tokenizer's chat template on the stage's host (`prepare_request`).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import msgspec

from stages.config import PipelineConfig, StageConfig, StageDeployConfig
from stages.engine import StageEngine
from stages.errors import ConfigError, InvalidRequest
from stages.models import DEFAULT_VARIANT, ModelFamily
from stages.protocol import StageRequest

STAGE_NAME = "llm"

PIPELINE = PipelineConfig(
    family="llm",
    name="llm",
    description="One autoregressive stage: chat messages in, text out.",
    stages=[StageConfig(id=0, name=STAGE_NAME, kind="ar", output="text", default_backend="torch")],
    needs_chat_template=True,
)


class LLMFamily(ModelFamily):
    name = "llm"
    pipelines = {DEFAULT_VARIANT: PIPELINE}
    model_types = ("qwen2", "qwen3", "llama", "mistral")

    def build_engine(self, stage_name: str, model_dir: str | Path, stage_deploy: StageDeployConfig) -> StageEngine:
        if stage_name != STAGE_NAME:
            raise ConfigError("stage", f"the llm pipeline has one stage {STAGE_NAME!r}, not {stage_name!r}")
        backend = stage_deploy.backend or "torch"
        if backend == "vllm":
            from stages.ar.vllm_engine import VLLMEngine

            return VLLMEngine(model_dir, stage_deploy)
        if backend == "torch":
            from stages.ar import ARTorchEngine

            return ARTorchEngine.from_pretrained(model_dir, stage_deploy)
        raise ConfigError(f"stages.{STAGE_NAME}.backend", f"the llm stage runs on 'torch' or 'vllm', not {backend!r}")

    def prepare_request(
        self, request: StageRequest, model_dir: str | Path, stage_deploy: StageDeployConfig
    ) -> StageRequest:
        if request.messages is None or request.prompt_token_ids is not None:
            return request
        token_ids = apply_chat_template(model_dir, request.messages)
        return msgspec.structs.replace(request, messages=None, prompt_token_ids=token_ids)


def apply_chat_template(model_dir: str | Path, messages: list[dict[str, Any]]) -> list[int]:
    """Prompt token ids for chat `messages`, ending with the assistant's generation prompt."""
    if not messages:
        raise InvalidRequest("messages", "must hold at least one message")
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or "role" not in message or "content" not in message:
            raise InvalidRequest(f"messages[{index}]", "each message needs a 'role' and a 'content'")
    tokenizer = load_tokenizer(str(model_dir))
    if not getattr(tokenizer, "chat_template", None):
        raise InvalidRequest("messages", f"the tokenizer in {model_dir} has no chat template; send a prompt instead")
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


@functools.lru_cache(maxsize=8)
def load_tokenizer(model_dir: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


family = LLMFamily()
