"""The scheduler and block manager on their own: pure Python, no model."""

from __future__ import annotations

from stages.ar.block_manager import BlockManager
from stages.ar.scheduler import Scheduler
from stages.ar.sequence import Sequence, SequenceStatus
from stages.protocol import SamplingParams


def sequence(name: str, prompt_len: int) -> Sequence:
    seq = Sequence(request_id=name, token_ids=[], sampling=SamplingParams(), max_length=1000)
    seq.append_prompt(list(range(prompt_len)))
    return seq


def compute(batch) -> None:
    for seq, count in batch.work:
        seq.num_computed_tokens += count


def test_prompts_are_chunked_under_the_token_budget_and_decodes_come_first():
    scheduler = Scheduler(BlockManager(num_blocks=64, block_size=4), max_batch=8, token_budget=6)
    a, b = sequence("a", 4), sequence("b", 9)
    scheduler.add(a)
    scheduler.add(b)
    first = scheduler.schedule()
    assert [(s.request_id, n) for s, n in first.work] == [("a", 4), ("b", 2)]
    compute(first)
    a.token_ids.append(1)  # a sampled a token: it decodes next
    second = scheduler.schedule()
    assert [(s.request_id, n) for s, n in second.work] == [("a", 1), ("b", 5)]


def test_max_batch_limits_running_sequences():
    scheduler = Scheduler(BlockManager(num_blocks=64, block_size=4), max_batch=2, token_budget=100)
    for name in "abc":
        scheduler.add(sequence(name, 3))
    batch = scheduler.schedule()
    assert [s.request_id for s, _ in batch.work] == ["a", "b"]
    assert [s.request_id for s in scheduler.waiting] == ["c"]


def test_a_full_cache_preempts_the_newest_running_sequence():
    blocks = BlockManager(num_blocks=4, block_size=4)  # 3 usable blocks
    scheduler = Scheduler(blocks, max_batch=8, token_budget=100)
    a, b = sequence("a", 4), sequence("b", 4)
    scheduler.add(a)
    scheduler.add(b)
    compute(scheduler.schedule())
    a.token_ids.append(1)
    b.token_ids.append(1)
    batch = scheduler.schedule()  # a needs a 3rd block (ok), then b needs a 4th: b is preempted
    assert [(s.request_id, n) for s, n in batch.work] == [("a", 1)]
    assert batch.preempted == [b] and b.status is SequenceStatus.WAITING
    assert b.num_computed_tokens == 0 and b.block_table == []
    assert scheduler.waiting[0] is b and scheduler.num_preemptions == 1


def test_finish_frees_blocks_at_once_and_waiting_input_is_skipped():
    blocks = BlockManager(num_blocks=8, block_size=4)
    scheduler = Scheduler(blocks, max_batch=8, token_budget=100)
    streaming = Sequence(request_id="s", token_ids=[], sampling=SamplingParams(), max_length=100, input_finished=False)
    streaming.append_prompt([1])
    full = sequence("f", 6)
    scheduler.add(streaming)
    scheduler.add(full)
    batch = scheduler.schedule()
    assert [s.request_id for s, _ in batch.work] == ["f"]  # "s" holds back its only token
    assert blocks.num_free_blocks == 7 - 2
    scheduler.finish(full, "abort")
    assert blocks.num_free_blocks == 7 and full.finish_reason == "abort"
    assert scheduler.has_unfinished()  # "s" still waits for input
