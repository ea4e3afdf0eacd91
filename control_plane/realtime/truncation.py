"""The session's `truncation`: which items of the conversation a response's prompt carries.

`"auto"` drops the oldest items once the conversation outgrows the context window (what the
deployment's AR stages hold, less the room the reply needs), keeping the instructions and
starting at a user item; `{"type": "retention_ratio", "retention_ratio": r}` then keeps at most
r of the room, so later turns need not truncate again at once; `"disabled"` keeps everything and
a response whose prompt would not fit fails with `context_length_exceeded`. Items stay in the
conversation (`conversation.item.retrieve` still finds them): only the prompt leaves them out.
Tokens are counted as the thinker counts them (stages/context_truncation.py).
"""

from __future__ import annotations

from control_plane.realtime.conversation import TEXT_ONLY_FAMILIES, Item
from stages.config import DeployConfig, PipelineConfig
from stages.context_truncation import PromptCounter, kept_from


class ContextTooLong(Exception):
    pass


def prompt_budget(pipeline: PipelineConfig, deploy: DeployConfig, reply_tokens: int) -> int | None:
    """Tokens a prompt may have: the smallest context of the AR stages (the talker's holds the
    thinker's prompt too) less the reply's room; None for pipelines without AR stages."""
    windows = [deploy.for_stage(stage).max_length for stage in pipeline.stages if stage.kind == "ar"]
    if not windows:
        return None
    window = min(windows)
    return window - min(reply_tokens, window // 2)


def item_tokens(counter: PromptCounter, item: Item, family: str) -> int:
    texts, audio = [], []
    for part in item.parts:
        if part.type == "input_audio" and part.samples is not None:
            if family in TEXT_ONLY_FAMILIES:
                texts.append(f"[user audio {part.seconds:.2f} s]")
            else:
                audio.append(part.samples.size)
        elif part.type in ("input_text", "output_text"):
            texts.append(part.text)
        elif part.type == "output_audio":
            texts.append(part.transcript or "")
    if item.role == "assistant" and not any(texts):
        return 0  # not in the prompt
    return counter.message(texts, audio)


def kept_items(
    items: list[Item], *, instructions: str, counter: PromptCounter, family: str, budget: int | None, truncation
) -> list[Item]:
    """The items the prompt carries under `truncation`; ContextTooLong when they cannot fit."""
    if budget is None:
        return items
    costs = [item_tokens(counter, item, family) for item in items]
    fixed = counter.fixed(instructions)
    if truncation == "disabled":
        if fixed + sum(costs) > budget:
            raise ContextTooLong(_too_long(fixed + sum(costs), budget, "truncation is disabled"))
        return items
    ratio, post_instructions = _ratio_and_limit(truncation)
    if post_instructions is not None:
        budget = min(budget, fixed + post_instructions)
    first = kept_from(costs, fixed=fixed, budget=budget, retention_ratio=ratio)
    while first is not None and first < len(items) and items[first].role == "assistant":
        first += 1  # a prompt starts with what the user said
    if first is None or first >= len(items):
        raise ContextTooLong(_too_long(fixed + costs[-1] if costs else fixed, budget, "even the newest item"))
    return items[first:]


def _ratio_and_limit(truncation) -> tuple[float, int | None]:
    if isinstance(truncation, dict):
        limits = truncation.get("token_limits") or {}
        return float(truncation.get("retention_ratio", 1.0)), limits.get("post_instructions")
    return 1.0, None


def _too_long(tokens: int, budget: int, why: str) -> str:
    return (
        f"The conversation needs {tokens} tokens of input but this model's context leaves {budget} "
        f"for it ({why}); delete items or start a new session."
    )
