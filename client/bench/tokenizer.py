"""A deployment's tokenizer read from its checkpoint directory with the `tokenizers` library
(no transformers, no torch): enough to draw prompts of an exact token length."""

from __future__ import annotations

from pathlib import Path

import numpy as np

CANDIDATE_FILES = ("tokenizer.json", "tokenizer/tokenizer.json")


def tokenizer_file(directory: str | Path) -> Path | None:
    for name in CANDIDATE_FILES:
        path = Path(directory) / name
        if path.is_file():
            return path
    return None


class LocalTokenizer:
    def __init__(self, path: Path):
        from tokenizers import Tokenizer

        self.path = path
        self.tokenizer = Tokenizer.from_file(str(path))
        self._ids: np.ndarray | None = None

    @classmethod
    def from_dir(cls, directory: str | Path) -> LocalTokenizer:
        path = tokenizer_file(directory)
        if path is None:
            raise FileNotFoundError(f"no tokenizer.json in {directory} (looked for {', '.join(CANDIDATE_FILES)})")
        return cls(path)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids) -> str:
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=True)

    @property
    def drawable_ids(self) -> np.ndarray:
        """Ids a random prompt may hold: no special or added tokens, and none that decodes alone
        to nothing or to a broken UTF-8 fragment (a byte-level piece of a longer character)."""
        if self._ids is None:
            special = set(self.tokenizer.get_added_tokens_decoder())
            ids = [i for i in range(self.tokenizer.get_vocab_size(with_added_tokens=False)) if i not in special]
            texts = self.tokenizer.decode_batch([[i] for i in ids], skip_special_tokens=True)
            self._ids = np.array(
                [i for i, text in zip(ids, texts, strict=True) if text.strip() and "\ufffd" not in text]
            )
        return self._ids
