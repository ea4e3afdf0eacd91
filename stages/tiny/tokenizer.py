"""A locally trained byte-level BPE tokenizer in Qwen's shape, wrapped in transformers' `Qwen2Tokenizer`.

No hub is reachable, so tiny checkpoints train their own tokenizer: a byte-level BPE with Qwen's
pre-tokenizer regex, trained with `tokenizers` on a built-in corpus, with a ChatML chat template.

The default layout is compact (a few hundred BPE tokens, then the specials). For checkpoints whose
serving code hard-codes real Qwen ids, the optional parameters give the real layout instead:

    build_tokenizer(out_dir, pad_to=151643,
                    special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>", ...],
                    fixed_ids={"user": 872, "system": 8948, "assistant": 77091},
                    named_tokens={"audio_token": "<|AUDIO|>"}, chat_template=OMNI_TEMPLATE)

`pad_to` fills the id space with unreachable `<|unused_i|>` entries up to that id, the special tokens
follow from there in the given order, and `fixed_ids` moves single-token words onto the given ids.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

DEFAULT_SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

_CORPUS = """\
The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a single step.
Omnistage serves omni-modality models: text, audio, images and video flow through stages of a pipeline.
The thinker reads the prompt and writes text; the talker turns it into speech codes; the vocoder sings.
Hello, how are you today? I am fine, thank you. What is the weather like in Paris, Berlin and Tokyo?
Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 2024 3.14159 -7 +12 50% $5 #1 @home a=b x<y z>w (parentheses) [brackets].
def main():\n    print("hello world")\n    return 0\n
Unicode: café naïve résumé über straße, 你好世界，今天天气很好。こんにちは 안녕하세요 Привет мир 🙂🚀✨ ½ € ©.
system user assistant system user assistant: You are a helpful assistant. Tell me a story about a robot.
Once upon a time there was a small robot who loved to read books about the sea, the stars and the wind.
Streams of tokens arrive one by one; a scheduler batches requests; a cache keeps keys and values.
"""


_DIALOGUE = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\nHello."


def training_corpus(repeats: int = 8) -> list[str]:
    lines = [line for line in _CORPUS.splitlines() if line.strip()]
    return (lines + [_DIALOGUE] * 4) * repeats


@functools.cache
def train_bpe(vocab_size: int = 512) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Train a byte-level BPE with Qwen's pre-tokenizer; return (vocab, merges). Deterministic, cached."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(training_corpus(), trainer)
    model = json.loads(tokenizer.to_str())["model"]
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return dict(model["vocab"]), merges


def lay_out_vocab(
    vocab: dict[str, int],
    *,
    pad_to: int | None = None,
    fixed_ids: dict[str, int] | None = None,
) -> dict[str, int]:
    """Pad the BPE vocab with `<|unused_i|>` up to `pad_to`, then move `fixed_ids` words onto their ids."""
    layout = dict(vocab)
    if pad_to is not None:
        if pad_to < len(layout):
            raise ValueError(f"pad_to={pad_to} is smaller than the trained vocabulary ({len(layout)})")
        for index, token_id in enumerate(range(len(layout), pad_to)):
            layout[f"<|unused_{index}|>"] = token_id
    by_id = {token_id: token for token, token_id in layout.items()}
    for word, target in (fixed_ids or {}).items():
        if word not in layout:
            raise ValueError(f"{word!r} is not a single token of the trained vocabulary; add it to the corpus")
        if target not in by_id:
            raise ValueError(f"fixed id {target} for {word!r} is outside the vocabulary (use pad_to)")
        source, displaced = layout[word], by_id[target]
        layout[word], layout[displaced] = target, source
        by_id[target], by_id[source] = word, displaced
    return layout


def build_tokenizer(
    out_dir: str | Path | None = None,
    *,
    vocab_size: int = 512,
    pad_to: int | None = None,
    special_tokens: list[str] | None = None,
    fixed_ids: dict[str, int] | None = None,
    named_tokens: dict[str, str] | None = None,
    chat_template: str = CHATML_TEMPLATE,
    eos_token: str = "<|im_end|>",
    pad_token: str = "<|endoftext|>",
    extra_config: dict[str, Any] | None = None,
):
    """Train, lay out and wrap the tokenizer; save it to `out_dir` when given. Returns the Qwen2Tokenizer."""
    from tokenizers import AddedToken
    from transformers import Qwen2Tokenizer

    vocab, merges = train_bpe(vocab_size)
    merges = list(merges)
    vocab = lay_out_vocab(vocab, pad_to=pad_to, fixed_ids=fixed_ids)
    specials = special_tokens or DEFAULT_SPECIAL_TOKENS
    first_special = max(vocab.values()) + 1
    for offset, token in enumerate(specials):
        vocab[token] = first_special + offset
    tokenizer = Qwen2Tokenizer(
        vocab=vocab,
        merges=merges,
        unk_token=None,
        eos_token=eos_token,
        pad_token=pad_token,
        extra_special_tokens=named_tokens or {},
        **(extra_config or {}),
    )
    tokenizer.add_tokens([AddedToken(token, special=True) for token in specials])
    tokenizer.chat_template = chat_template
    if out_dir is not None:
        tokenizer.save_pretrained(str(out_dir))
    return tokenizer
