"""bench serve's prompts: random ones of an exact token length from a real (tiny) tokenizer,
reproducible by seed, and users' JSONL files with errors that name the line."""

from __future__ import annotations

import pytest
from tiny_checkpoints import tiny_checkpoint

from client.bench.prompts import PromptError, dataset_prompts, random_prompts
from client.bench.tokenizer import LocalTokenizer

pytestmark = pytest.mark.slow  # builds a tiny checkpoint for its tokenizer


@pytest.fixture(scope="module")
def tiny_models():
    return {name: tiny_checkpoint(name) for name in ("qwen2", "sd3")}


@pytest.fixture(scope="module")
def tokenizer(tiny_models) -> LocalTokenizer:
    return LocalTokenizer.from_dir(tiny_models["qwen2"])


@pytest.mark.parametrize("length", [1, 7, 128])
def test_random_prompts_have_exactly_the_input_length(tokenizer, length):
    prompts = random_prompts(20, length, seed=3, tokenizer=tokenizer)
    assert {len(tokenizer.encode(p.text)) for p in prompts} == {length}
    assert {p.input_len for p in prompts} == {length}
    assert len({p.text for p in prompts}) == 20


def test_a_tokenizer_that_rewrites_its_text_still_gets_exact_lengths(tiny_models):
    clip = LocalTokenizer.from_dir(tiny_models["sd3"])  # lower-cases, word-level pieces: tokenizer/tokenizer.json
    assert clip.path.parent.name == "tokenizer"
    prompts = random_prompts(10, 16, seed=0, tokenizer=clip)
    assert {len(clip.encode(p.text)) for p in prompts} == {16}


def test_the_seed_decides_the_prompts(tokenizer):
    assert random_prompts(3, 16, 1, tokenizer) == random_prompts(3, 16, 1, tokenizer)
    assert random_prompts(3, 16, 1, tokenizer) != random_prompts(3, 16, 2, tokenizer)


def test_drawable_ids_hold_no_special_tokens(tokenizer):
    special = set(tokenizer.tokenizer.get_added_tokens_decoder())
    assert special and not special & set(tokenizer.drawable_ids.tolist())


def test_without_a_tokenizer_prompts_are_words():
    (prompt,) = random_prompts(1, 12, 0, None)
    assert len(prompt.text.split()) == 12 and prompt.input_len is None


def test_dataset_prompts_cycle_and_count_tokens(tmp_path, tokenizer):
    path = tmp_path / "prompts.jsonl"
    path.write_text('{"prompt": "hello there"}\n\n{"messages": [{"role": "user", "content": "hi"}], "output_len": 5}\n')
    prompts = dataset_prompts(path, 5, tokenizer)
    assert [p.plain_text() for p in prompts] == ["hello there", "hi", "hello there", "hi", "hello there"]
    assert prompts[0].input_len == len(tokenizer.encode("hello there"))
    assert prompts[1].output_len == 5 and prompts[1].chat_messages() == [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("line", "message"),
    [("not json", "prompts.jsonl:2: not JSON"), ('{"text": "x"}', "prompts.jsonl:2: needs a non-empty 'prompt'"),
     ('{"prompt": "x", "output_len": 0}', "prompts.jsonl:2: 'output_len' must be a positive integer")],
)  # fmt: skip
def test_bad_dataset_lines_are_named(tmp_path, line, message):
    path = tmp_path / "prompts.jsonl"
    path.write_text('{"prompt": "fine"}\n' + line + "\n")
    with pytest.raises(PromptError, match=message):
        dataset_prompts(path, 1, None)
