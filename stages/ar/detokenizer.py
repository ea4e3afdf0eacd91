"""Incremental detokenization with stop strings.

Text is released only when it is stable: a trailing U+FFFD (an incomplete multi-byte character
split over tokens) is held back until the next token completes it, and while stop strings are
set, the last `len(longest stop) - 1` characters are held back in case they begin a stop string.
When a stop string appears, the text is cut before it and the request finishes with "stop".
"""

from __future__ import annotations

REPLACEMENT_CHAR = "\ufffd"


class IncrementalDetokenizer:
    def __init__(self, tokenizer, stop: list[str] | None = None, skip_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.stop = [s for s in (stop or []) if s]
        self.skip_special_tokens = skip_special_tokens
        self.token_ids: list[int] = []
        self.text = ""
        self.num_emitted_chars = 0
        self._prefix_offset = 0
        self._read_offset = 0
        self._holdback = max((len(s) for s in self.stop), default=1) - 1
        self._decode_ids = _fast_decoder(tokenizer, skip_special_tokens)

    def add_token(self, token_id: int, check_stop: bool = True) -> str | None:
        """Append a token; return the stop string if the text now contains one (text cut before it)."""
        self.token_ids.append(token_id)
        prefix = self._decode(self.token_ids[self._prefix_offset : self._read_offset])
        full = self._decode(self.token_ids[self._prefix_offset :])
        if len(full) <= len(prefix) or full.endswith(REPLACEMENT_CHAR):
            return None
        searched_from = max(0, len(self.text) - self._holdback)
        self.text += full[len(prefix) :]
        self._prefix_offset, self._read_offset = self._read_offset, len(self.token_ids)
        return self._cut_at_stop(searched_from) if check_stop else None

    def flush(self) -> str | None:
        """At the end, release text held back for an incomplete character (as U+FFFD)."""
        prefix = self._decode(self.token_ids[self._prefix_offset : self._read_offset])
        full = self._decode(self.token_ids[self._prefix_offset :])
        if len(full) <= len(prefix):
            return None
        searched_from = max(0, len(self.text) - self._holdback)
        self.text += full[len(prefix) :]
        self._prefix_offset, self._read_offset = self._read_offset, len(self.token_ids)
        return self._cut_at_stop(searched_from)

    def _cut_at_stop(self, searched_from: int) -> str | None:
        hits = [(self.text.find(s, searched_from), s) for s in self.stop]
        hits = [(index, s) for index, s in hits if index >= 0]
        if not hits:
            return None
        index, stop = min(hits)
        self.text = self.text[:index]
        return stop

    def take_delta(self, finished: bool) -> str:
        """The text not emitted yet that is safe to emit (all of it once finished)."""
        end = len(self.text) if finished else max(self.num_emitted_chars, len(self.text) - self._holdback)
        delta = self.text[self.num_emitted_chars : end]
        self.num_emitted_chars = end
        return delta

    def _decode(self, token_ids: list[int]) -> str:
        return self._decode_ids(token_ids) if token_ids else ""


def _fast_decoder(tokenizer, skip_special_tokens: bool):
    """The `tokenizers` backend's decode when it gives the same text (no clean-up pass); else the wrapper's."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and not getattr(tokenizer, "clean_up_tokenization_spaces", False):
        return lambda ids: backend.decode(ids, skip_special_tokens=skip_special_tokens)
    return lambda ids: tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)
