"""The tiny-llm demo on SmolLM2-135M-Instruct through the platform: deployed by the model's registry
name, it answers a chat in English through the OpenAI SDK."""

from __future__ import annotations

import pytest
from smollm2_checkpoint import NAME, smollm2_checkpoint

pytestmark = pytest.mark.slow


def test_the_demo_model_deployed_by_name_answers_paris(serving_stack):
    smollm2_checkpoint()
    deployment = serving_stack.deploy(
        "tiny-llm", "llm", model_dir=NAME, deploy_config={"stages": {"llm": {"max_length": 512}}}
    )
    assert deployment["model_dir"].endswith(f"/var/models/{NAME}")
    serving_stack.wait_running("tiny-llm", timeout=300)
    reply = serving_stack.client(timeout=120).chat.completions.create(
        model="tiny-llm",
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        temperature=0,
        max_tokens=24,
    )
    assert "Paris" in reply.choices[0].message.content, reply
    assert reply.choices[0].finish_reason == "stop"
