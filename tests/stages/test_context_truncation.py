"""Prompt counting against the thinker's own processor (the tiny Qwen2.5-Omni checkpoint), and
which oldest items leave a prompt that does not fit."""

from __future__ import annotations

import numpy as np
import pytest
from procs import REPO

from stages.context_truncation import PromptCounter, kept_from, qwen2_5_audio_tokens, qwen3_audio_tokens

MODEL = str(REPO / "var" / "models" / "qwen2_5_omni")


@pytest.fixture(scope="module")
def processor(repo_tiny_models):
    from stages.models.qwen2_5_omni import processor

    return processor(MODEL)


@pytest.mark.parametrize("seconds", [0.5, 1.37, 3.3, 10.0])
def test_a_spoken_turn_counts_as_the_thinker_counts_it(processor, seconds):
    audio = np.random.default_rng(0).standard_normal(int(16000 * seconds)).astype(np.float32) * 0.1
    conversation = [{"role": "user", "content": [{"type": "audio"}]}]
    text = processor.tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
    expected = processor(text=text, audio=[audio], return_tensors="pt")["input_ids"].shape[1]
    counter = PromptCounter.for_model(MODEL, "qwen2_5_omni")
    assert counter.fixed("") + counter.message([], [audio.size]) == expected


def test_text_turns_count_as_the_chat_template_renders_them(processor):
    conversation = [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "hello, how are you"},
        {"role": "assistant", "content": "fine, thanks; and you?"},
    ]
    text = processor.tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
    expected = len(processor.tokenizer(text)["input_ids"])
    counter = PromptCounter.for_model(MODEL, "qwen2_5_omni")
    assert counter.fixed("Answer briefly.") + sum(counter.message([m["content"]]) for m in conversation[1:]) == expected


def test_audio_token_formulas():
    assert [qwen2_5_audio_tokens(16000 * s) for s in (1, 2, 10)] == [25, 50, 250]
    assert qwen3_audio_tokens(16000) == 13 and qwen3_audio_tokens(16000 * 10) == 130


def test_the_oldest_items_leave_first():
    assert kept_from([10, 10, 10], fixed=5, budget=35) == 0
    assert kept_from([10, 10, 10], fixed=5, budget=34) == 1
    assert kept_from([10, 10, 10], fixed=5, budget=34, retention_ratio=0.5) == 2
    assert kept_from([10, 10, 30], fixed=5, budget=34) is None
