"""Per-request sampling, stops and streaming text of the torch engine."""

from __future__ import annotations

import pytest

from stages.ar import ARTorchEngine
from stages.ar.detokenizer import IncrementalDetokenizer
from stages.config import StageDeployConfig
from stages.protocol import SamplingParams, StageRequest

PROMPT = "Once upon a time there was a small robot"


@pytest.fixture(scope="module")
def engine(tiny_llms):
    return ARTorchEngine.from_pretrained(tiny_llms["qwen2"], StageDeployConfig())


def request(request_id: str, **sampling) -> StageRequest:
    return StageRequest(request_id=request_id, prompt=PROMPT, sampling=SamplingParams(**sampling))


def test_seeded_sampling_is_reproducible_whatever_the_batch(engine, helpers):
    params = dict(temperature=1.0, top_p=0.9, top_k=50, seed=7, max_tokens=24, ignore_eos=True)
    alone = helpers.run_engine(engine, {0: [request("a", **params)]})["a"]
    crowd = [request(f"other{i}", temperature=1.0, max_tokens=30, seed=i) for i in range(3)]
    together = helpers.run_engine(engine, {0: crowd[:2], 1: [request("a", **params), crowd[2]]})["a"]
    other_seed = helpers.run_engine(engine, {0: [request("a", **{**params, "seed": 8})]})["a"]

    assert together.token_ids == alone.token_ids
    assert len(alone.token_ids) == 24 and alone.finish_reason == "length"
    assert other_seed.token_ids != alone.token_ids


def test_top_k_one_is_greedy(engine, helpers):
    greedy = helpers.run_engine(engine, {0: [request("g", temperature=0.0, max_tokens=16)]})["g"]
    top1 = helpers.run_engine(engine, {0: [request("k", temperature=1.3, top_k=1, max_tokens=16)]})["k"]
    assert top1.token_ids == greedy.token_ids


def test_stop_token_id_ends_with_stop(engine, helpers):
    greedy = helpers.run_engine(engine, {0: [request("g", temperature=0.0, max_tokens=16, ignore_eos=True)]})["g"]
    stop_id = greedy.token_ids[5]
    first = greedy.token_ids.index(stop_id)
    result = helpers.run_engine(engine, {0: [request("s", temperature=0.0, max_tokens=16, stop_token_ids=[stop_id])]})
    assert result["s"].token_ids == greedy.token_ids[: first + 1]
    assert result["s"].finish_reason == "stop"


def test_min_tokens_defers_stop_tokens(engine, helpers):
    greedy = helpers.run_engine(engine, {0: [request("g", temperature=0.0, max_tokens=8)]})["g"]
    stop_id = greedy.token_ids[0]
    result = helpers.run_engine(
        engine, {0: [request("m", temperature=0.0, max_tokens=8, min_tokens=3, stop_token_ids=[stop_id])]}
    )["m"]
    assert stop_id not in result.token_ids[:3]
    assert len(result.token_ids) >= 3


def test_stop_string_trims_text_and_ends_with_stop(engine, helpers):
    full = helpers.run_engine(engine, {0: [request("f", temperature=0.0, max_tokens=40, ignore_eos=True)]})["f"]
    text = full.text
    start = next(i for i in range(8, len(text) - 3) if "\ufffd" not in text[i : i + 3] and text[i : i + 3].strip())
    stop = text[start : start + 3]
    result = helpers.run_engine(
        engine, {0: [request("s", temperature=0.0, max_tokens=40, ignore_eos=True, stop=[stop])]}
    )["s"]
    assert result.finish_reason == "stop"
    assert result.text == text[: text.index(stop)]
    assert stop not in "".join(result.deltas)


def test_max_tokens_ends_with_length_and_text_matches_tokens(engine, helpers):
    result = helpers.run_engine(engine, {0: [request("l", temperature=0.0, max_tokens=12, ignore_eos=True)]})["l"]
    assert len(result.token_ids) == 12 and result.finish_reason == "length"
    assert result.text == engine.tokenizer.decode(result.token_ids, skip_special_tokens=True)
    assert [o.seq for o in result.outputs] == list(range(len(result.outputs)))
    assert result.outputs[0].metrics["ttft"] >= 0
    assert result.outputs[-1].metrics["num_output_tokens"] == 12


def test_streamed_deltas_never_split_a_multibyte_character(engine):
    text = "Unicode: 你好世界 🙂🚀✨ café naïve — Привет"
    token_ids = engine.tokenizer(text, add_special_tokens=False)["input_ids"]
    detokenizer = IncrementalDetokenizer(engine.tokenizer)
    deltas = []
    for token_id in token_ids:
        detokenizer.add_token(token_id)
        deltas.append(detokenizer.take_delta(finished=False))
    detokenizer.flush()
    deltas.append(detokenizer.take_delta(finished=True))
    assert "".join(deltas) == text
    assert all("\ufffd" not in delta for delta in deltas)
    assert sum(1 for token_id in token_ids if "\ufffd" in engine.tokenizer.decode([token_id])) > 0


def test_stop_string_split_over_tokens_is_held_back(engine):
    text = "Hello world, how are you today?"
    token_ids = engine.tokenizer(text, add_special_tokens=False)["input_ids"]
    detokenizer = IncrementalDetokenizer(engine.tokenizer, stop=["are you"])
    emitted, stop = "", None
    for token_id in token_ids:
        stop = detokenizer.add_token(token_id)
        emitted += detokenizer.take_delta(finished=stop is not None)
        if stop:
            break
    assert stop == "are you"
    assert emitted == "Hello world, how "


def test_repetition_penalty_equals_transformers(engine, tiny_llms, hf_models, helpers):
    import torch

    prompt = [5, 17, 5, 17, 5, 17, 9, 40]
    with torch.no_grad():
        reference = (
            hf_models("qwen2")
            .generate(
                torch.tensor([prompt]), max_new_tokens=20, min_new_tokens=20, do_sample=False, repetition_penalty=1.8
            )[0, len(prompt) :]
            .tolist()
        )
    plain = helpers.run_engine(
        engine,
        {
            0: [
                StageRequest(
                    request_id="p",
                    prompt_token_ids=prompt,
                    sampling=SamplingParams(temperature=0, max_tokens=20, ignore_eos=True),
                )
            ]
        },
    )["p"]
    penalized = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True, repetition_penalty=1.8)
    other = StageRequest(
        request_id="o", prompt_token_ids=[3, 4, 5], sampling=SamplingParams(temperature=0, max_tokens=20)
    )
    result = helpers.run_engine(
        engine, {0: [other, StageRequest(request_id="r", prompt_token_ids=prompt, sampling=penalized)]}
    )
    assert result["r"].token_ids == reference
    assert reference != plain.token_ids  # the penalty changed the greedy path


def test_repetition_penalty_of_several_rows_in_one_batch_equals_transformers_for_each(engine, hf_models, helpers):
    """Each penalized row's seen tokens are its own: the new tokens of all rows reach the device in
    one copy and must land in their own rows."""
    import torch

    prompts = {"a": [5, 17, 5, 17, 5, 17, 9, 40], "b": [40, 9, 40, 9, 3, 3, 3, 12], "c": [7, 7, 21, 30]}
    penalties = {"a": 1.8, "b": 1.3, "c": 2.5}
    references = {}
    with torch.no_grad():
        for name, prompt in prompts.items():
            generated = hf_models("qwen2").generate(
                torch.tensor([prompt]),
                max_new_tokens=16,
                min_new_tokens=16,
                do_sample=False,
                repetition_penalty=penalties[name],
            )
            references[name] = generated[0, len(prompt) :].tolist()
    requests = [
        StageRequest(
            request_id=name,
            prompt_token_ids=prompt,
            sampling=SamplingParams(temperature=0, max_tokens=16, ignore_eos=True, repetition_penalty=penalties[name]),
        )
        for name, prompt in prompts.items()
    ]
    result = helpers.run_engine(engine, {0: requests})
    assert {name: result[name].token_ids for name in prompts} == references


def test_suppressed_tokens_are_never_sampled(engine, helpers):
    greedy = helpers.run_engine(engine, {0: [request("g", temperature=0.0, max_tokens=12, ignore_eos=True)]})["g"]
    banned = tuple(sorted(set(greedy.token_ids[:3])))

    def suppress(step, engine):
        if step == 0:
            engine.sequences["s"].suppressed_token_ids = banned

    result = helpers.run_engine(
        engine, {0: [request("s", temperature=0.0, max_tokens=12, ignore_eos=True)]}, on_step=suppress
    )["s"]
    assert len(result.token_ids) == 12 and not set(result.token_ids) & set(banned)


def test_input_limit_holds_a_sequence_until_its_side_input_arrives(engine, helpers):
    """A talker-style sequence may not compute past `input_limit`; raising it lets it go on, and the
    tokens equal those of a sequence that was never held."""
    free = helpers.run_engine(engine, {0: [request("free", temperature=0.0, max_tokens=10, ignore_eos=True)]})["free"]
    held_at = {}

    def hold(step, engine):
        seq = engine.sequences.get("held")
        if seq is None:
            return
        if step == 0:
            seq.input_limit = seq.num_prompt_tokens + 2  # two generated tokens may be fed back
        elif seq.num_output_tokens == 3 and "at" not in held_at:
            held_at["at"] = step
        elif "at" in held_at and step == held_at["at"] + 5:
            held_at["after_five_steps"] = seq.num_output_tokens
            seq.input_limit = None

    result = helpers.run_engine(
        engine, {0: [request("held", temperature=0.0, max_tokens=10, ignore_eos=True)]}, on_step=hold
    )["held"]
    assert held_at["after_five_steps"] == 3
    assert result.token_ids == free.token_ids
