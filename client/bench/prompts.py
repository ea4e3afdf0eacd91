"""The prompts a run sends: random ones of an exact token length, drawn with the seed from the
deployment's vocabulary (nothing to download), or the user's own from a JSONL file."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from client.bench.tokenizer import LocalTokenizer

MAX_ROUNDS = 16
# Without a tokenizer: words that byte-level BPE vocabularies (GPT-2, Qwen, Llama 3) hold as one
# token each with their leading space, so N of them come close to N tokens. The server's own
# count (usage.prompt_tokens) is reported beside the run either way.
WORDS = (
    "time year people way day man thing woman life child world school state family student group country "
    "problem hand part place case week company system program question work government number night point "
    "home water room mother area money story fact month lot right study book eye job word business issue "
    "side kind head house service friend father power hour game line end member law car city community name "
    "president team minute idea kid body information back parent face others level office door health person "
    "art war history party result change morning reason research girl guy moment air teacher force education"
).split()


class PromptError(ValueError):
    pass


@dataclass(frozen=True)
class Prompt:
    text: str | None = None
    messages: list[dict[str, Any]] | None = None
    input_len: int | None = None  # exact, counted with the tokenizer; None without one
    output_len: int | None = None  # the dataset's own, over --output-len

    def chat_messages(self) -> list[dict[str, Any]]:
        return self.messages or [{"role": "user", "content": self.text}]

    def plain_text(self) -> str:
        if self.text is not None:
            return self.text
        content = self.messages[-1].get("content", "")
        return content if isinstance(content, str) else " ".join(p.get("text", "") for p in content)


def random_prompts(count: int, input_len: int, seed: int, tokenizer: LocalTokenizer | None) -> list[Prompt]:
    if input_len < 1:
        raise PromptError("--input-len must be at least 1")
    rng = np.random.default_rng(seed)
    if tokenizer is None:
        return [Prompt(text=" ".join(rng.choice(WORDS, input_len))) for _ in range(count)]
    return [Prompt(text=exact_length_text(tokenizer, rng, input_len), input_len=input_len) for _ in range(count)]


def exact_length_text(tokenizer: LocalTokenizer, rng: np.random.Generator, length: int) -> str:
    """Random ids decoded to text whose re-encoding is exactly `length` tokens. Decoding and
    encoding again may merge or split pieces at their seams, so the ids are re-encoded, cut or
    topped up with fresh draws, and tried again until the count holds; a tokenizer that rewrites
    its text (lower-casing, word-level pieces) may never settle that way, and then the text is
    grown one drawn piece at a time instead, each kept only while the count stays within `length`."""
    pool = tokenizer.drawable_ids
    ids = list(rng.choice(pool, length))
    for _ in range(MAX_ROUNDS):
        text = tokenizer.decode(ids)
        encoded = tokenizer.encode(text)
        if len(encoded) == length:
            return text
        ids = encoded[:length] if len(encoded) > length else encoded + list(rng.choice(pool, length - len(encoded)))
    return _grown_text(tokenizer, rng, length)


def _grown_text(tokenizer: LocalTokenizer, rng: np.random.Generator, length: int) -> str:
    text, count = "", 0
    for _ in range(MAX_ROUNDS * length):
        piece = tokenizer.decode([rng.choice(tokenizer.drawable_ids)]).strip()
        candidate = f"{text} {piece}" if text else piece
        counted = len(tokenizer.encode(candidate))
        if counted <= length:
            text, count = candidate, counted
        if count == length:
            return text
    raise PromptError(f"could not make a prompt of exactly {length} tokens with this tokenizer")


def dataset_prompts(path: str | Path, count: int, tokenizer: LocalTokenizer | None) -> list[Prompt]:
    """Prompts from a JSONL file, one object a line: {"prompt": "..."} or {"messages": [...]},
    with an optional "output_len"; cycled when the run needs more than the file holds."""
    loaded = []
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            loaded.append(_dataset_prompt(line, f"{path}:{number}", tokenizer))
    if not loaded:
        raise PromptError(f"{path} holds no prompts")
    return [loaded[index % len(loaded)] for index in range(count)]


def _dataset_prompt(line: str, where: str, tokenizer: LocalTokenizer | None) -> Prompt:
    try:
        item = json.loads(line)
    except json.JSONDecodeError as error:
        raise PromptError(f"{where}: not JSON ({error})") from None
    if not isinstance(item, dict):
        raise PromptError(f'{where}: expected an object such as {{"prompt": "..."}}')
    output_len = item.get("output_len")
    if output_len is not None and (not isinstance(output_len, int) or output_len < 1):
        raise PromptError(f"{where}: 'output_len' must be a positive integer")
    if isinstance(item.get("prompt"), str) and item["prompt"].strip():
        text = item["prompt"]
        return Prompt(text=text, input_len=len(tokenizer.encode(text)) if tokenizer else None, output_len=output_len)
    if isinstance(item.get("messages"), list) and item["messages"]:
        return Prompt(messages=item["messages"], output_len=output_len)
    raise PromptError(f"{where}: needs a non-empty 'prompt' string or a 'messages' list")
