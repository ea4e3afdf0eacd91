"""The `ar_to_dit` family: an LLM writes the image prompt, a diffusion stage renders it.

The prompt-enhancer pattern of image services: the user's chat message goes to an
autoregressive stage ("prompter", our torch AR engine or vLLM) under a system prompt that
asks for one image prompt; its text (client-visible, like OpenAI's `revised_prompt`)
travels over a text edge to the diffusion stage ("dit"), which renders it with the
request's image parameters (height, width, seed, ... in `params`).

Checkpoint layout (`python -m stages.tiny OUT --only ar_to_dit` builds a tiny one):

    <model_dir>/config.json   {"omnistage_family": "ar_to_dit"}
    <model_dir>/prompter/     a transformers causal LM with a chat template
    <model_dir>/dit/          a diffusers text-to-image pipeline

Models whose DiT reads the AR stage's hidden states or KV cache (rather than its text)
declare an edge with `carries="hidden"` or `"kv"`; the config system accepts both.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from stages.config import EdgeConfig, PipelineConfig, StageConfig, StageDeployConfig
from stages.engine import StageEngine
from stages.errors import ConfigError
from stages.models import DEFAULT_VARIANT, ModelFamily
from stages.protocol import StageRequest

PROMPTER, DIT = "prompter", "dit"

SYSTEM_PROMPT = (
    "You write prompts for an image generator. Rewrite the user's request as one vivid, concrete image "
    "description: subject, setting, style, lighting. Answer with the prompt only."
)

PIPELINE = PipelineConfig(
    family="ar_to_dit",
    name="ar_to_dit",
    description="An LLM writes the image prompt from the chat message; a diffusion transformer renders it.",
    stages=[
        StageConfig(
            id=0,
            name=PROMPTER,
            kind="ar",
            output="text",
            default_backend="torch",
            model_subdir=PROMPTER,
            default_sampling={"max_tokens": 64},
        ),
        StageConfig(id=1, name=DIT, kind="diffusion", output="image", default_backend="diffusers", model_subdir=DIT),
    ],
    edges=[EdgeConfig(source=0, target=1, carries="text")],
    needs_chat_template=True,
)


class ARToDiTFamily(ModelFamily):
    name = "ar_to_dit"
    pipelines = {DEFAULT_VARIANT: PIPELINE}
    model_types = ("ar_to_dit",)

    def build_engine(self, stage_name: str, model_dir: str | Path, stage_deploy: StageDeployConfig) -> StageEngine:
        if stage_name == PROMPTER:
            return _build_prompter(stage_dir(model_dir, PROMPTER), stage_deploy)
        if stage_name == DIT:
            from stages.models.text_to_image import build_diffusion_engine

            return build_diffusion_engine(stage_name, stage_dir(model_dir, DIT), stage_deploy)
        raise ConfigError("stage", f"the ar_to_dit pipeline has stages {PROMPTER!r} and {DIT!r}, not {stage_name!r}")

    def prepare_request(
        self, request: StageRequest, model_dir: str | Path, stage_deploy: StageDeployConfig
    ) -> StageRequest:
        """Chat messages (or a bare prompt) under the prompt-writing system prompt, as prompt token ids."""
        from stages.models.llm import apply_chat_template

        if request.prompt_token_ids is not None:
            return request
        messages = request.messages or [{"role": "user", "content": request.prompt or ""}]
        if messages[0].get("role") != "system":
            messages = [{"role": "system", "content": SYSTEM_PROMPT}, *messages]
        token_ids = apply_chat_template(stage_dir(model_dir, PROMPTER), messages)
        return msgspec.structs.replace(request, messages=None, prompt=None, prompt_token_ids=token_ids)


def stage_dir(model_dir: str | Path, subdir: str) -> Path:
    """The stage's part of the checkpoint: `model_dir/subdir`, or `model_dir` when it is already that part."""
    candidate = Path(model_dir) / subdir
    return candidate if candidate.is_dir() else Path(model_dir)


def _build_prompter(model_dir: Path, stage_deploy: StageDeployConfig) -> StageEngine:
    backend = stage_deploy.backend or "torch"
    if backend == "vllm":
        from stages.ar.vllm_engine import VLLMEngine

        return VLLMEngine(model_dir, stage_deploy)
    if backend == "torch":
        from stages.ar import ARTorchEngine

        return ARTorchEngine.from_pretrained(model_dir, stage_deploy, stage_id=0)
    raise ConfigError(f"stages.{PROMPTER}.backend", f"the prompter runs on 'torch' or 'vllm', not {backend!r}")


family = ARToDiTFamily()
