"""What a conversation costs in the thinker's context, and which of its oldest items leave the
prompt when it would not fit (OpenAI's realtime `truncation`).

    counter = PromptCounter.for_model(model_dir, family)
    costs = [counter.message(role, texts, audio_samples) for each item]
    first = kept_from(costs, fixed=counter.fixed(instructions), budget=..., retention_ratio=1.0)

Counts follow the Qwen chat template (`<|im_start|>role\\n ... <|im_end|>\\n`) and the thinkers'
audio encoders, so a prompt is counted as the thinker will count it: text with the checkpoint's
own `tokenizer.json` (the `tokenizers` package, no torch), audio with the encoder's length
formula. Without a tokenizer (echo pipelines) a UTF-8 byte is counted as a token, never less
than a tokenizer would. Pure: no Django, no torch.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from pathlib import Path

AUDIO_RATE = 16000
MEL_HOP = 160  # samples per mel frame of the omni feature extractors
MESSAGE_OVERHEAD = 5  # <|im_start|> role \n ... <|im_end|> \n
AUDIO_OVERHEAD = 2  # <|audio_bos|> ... <|audio_eos|>
GENERATION_PROMPT = 3  # <|im_start|> assistant \n
DEFAULT_SYSTEM = {
    "qwen2_5_omni": "You are Qwen, a virtual human developed by the Qwen Team, Alibaba Group, capable of "
    "perceiving auditory and visual inputs, as well as generating text and speech.",
    "qwen3_omni": "",
}
"""The system message a family's chat template adds when the conversation has none; other
families are counted with the Qwen2 LLM templates' default."""
FALLBACK_SYSTEM = "You are a helpful assistant."


def qwen2_5_audio_tokens(samples: int) -> int:
    """Qwen2.5-Omni's audio encoder: a stride-2 convolution then a 2x average pool over mel frames."""
    frames = samples // MEL_HOP
    if frames <= 0:
        return 0
    after_conv = (frames - 1) // 2 + 1
    return max(0, (after_conv - 2) // 2 + 1)


def qwen3_audio_tokens(samples: int) -> int:
    """Qwen3-Omni's audio encoder: 13 tokens per 100 mel frames, three stride-2 convolutions on the rest."""
    frames = samples // MEL_HOP
    rest = frames % 100
    tail = 0
    if rest:
        feat = (rest - 1) // 2 + 1
        tail = ((feat - 1) // 2 + 1 - 1) // 2 + 1
    return tail + (frames // 100) * 13


AUDIO_TOKENS: dict[str, Callable[[int], int]] = {
    "qwen2_5_omni": qwen2_5_audio_tokens,
    "qwen3_omni": qwen3_audio_tokens,
}


class PromptCounter:
    def __init__(self, count_text: Callable[[str], int], audio_tokens: Callable[[int], int], default_system: str):
        self.count_text = count_text
        self.audio_tokens = audio_tokens
        self.default_system = default_system

    @classmethod
    def for_model(cls, model_dir: str | Path | None, family: str) -> PromptCounter:
        audio = AUDIO_TOKENS.get(family, qwen2_5_audio_tokens)
        return cls(_text_counter(str(model_dir or "")), audio, DEFAULT_SYSTEM.get(family, FALLBACK_SYSTEM))

    def message(self, texts: Sequence[str], audio_samples: Sequence[int] = ()) -> int:
        """One chat message: its text parts and its audio parts (sample counts at 16 kHz)."""
        text = sum(self.count_text(text) for text in texts if text)
        audio = sum(self.audio_tokens(samples) + AUDIO_OVERHEAD for samples in audio_samples)
        return MESSAGE_OVERHEAD + text + audio

    def fixed(self, instructions: str) -> int:
        """What every prompt carries besides the conversation: the system message and the generation prompt."""
        system = instructions or self.default_system
        return (self.message([system]) if system else 0) + GENERATION_PROMPT


def kept_from(costs: Sequence[int], *, fixed: int, budget: int, retention_ratio: float = 1.0) -> int | None:
    """The index of the oldest item to keep so that the prompt fits `budget`; 0 when everything
    fits, None when not even the newest item does. Once something must go, the kept items fill at
    most `retention_ratio` of the room after the fixed part (a lower ratio truncates less often)."""
    room = budget - fixed
    if sum(costs) <= room:
        return 0
    target = math.floor(room * retention_ratio)
    total = 0
    for index in range(len(costs) - 1, -1, -1):
        if total + costs[index] > target:
            return index + 1 if index + 1 < len(costs) else None
        total += costs[index]
    return 0


@functools.lru_cache(maxsize=32)
def _text_counter(model_dir: str) -> Callable[[str], int]:
    path = Path(model_dir) / "tokenizer.json" if model_dir else None
    if path is None or not path.is_file():
        return lambda text: len(text.encode())
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(path))
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False).ids)
