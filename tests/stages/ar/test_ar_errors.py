"""Bad input fails its own request with an InvalidRequest naming the field; others keep going.
Abort frees the request's KV cache at once."""

from __future__ import annotations

import pytest

from stages.ar import ARTorchEngine
from stages.config import StageDeployConfig
from stages.errors import InvalidRequest
from stages.protocol import RequestOptions, SamplingParams, StageRequest

GREEDY = SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True)


@pytest.fixture(scope="module")
def engine(tiny_llms):
    return ARTorchEngine.from_pretrained(tiny_llms["llama"], StageDeployConfig(max_length=64))


BAD_REQUESTS = {
    "max_tokens": StageRequest(request_id="bad", prompt="hi", sampling=SamplingParams(max_tokens=-1)),
    "prompt": StageRequest(request_id="bad", prompt_token_ids=[5] * 64),
    "prompt_token_ids": StageRequest(request_id="bad", prompt_token_ids=[1, 2, 10**6]),
    "hidden_layers": StageRequest(request_id="bad", prompt="hi", options=RequestOptions(extra={"hidden_layers": [7]})),
    "top_p": StageRequest(request_id="bad", prompt="hi", sampling=SamplingParams(top_p=0)),
    "stop_token_ids": StageRequest(request_id="bad", prompt="hi", sampling=SamplingParams(stop_token_ids=[-1])),
}


@pytest.mark.parametrize("field", sorted(BAD_REQUESTS))
def test_bad_input_names_the_field_and_spares_other_requests(engine, field, helpers):
    alone = helpers.run_engine(engine, {0: [StageRequest(request_id="good", prompt="hello", sampling=GREEDY)]})

    engine.add_request(StageRequest(request_id="good", prompt="hello", sampling=GREEDY))
    engine.step()
    with pytest.raises(InvalidRequest) as error:
        engine.add_request(BAD_REQUESTS[field])
    assert error.value.param == field
    assert field in str(error.value)
    rest = helpers.run_engine(engine, {})
    assert alone["good"].token_ids[1:] == rest["good"].token_ids


@pytest.mark.parametrize(
    "empty",
    [
        StageRequest(request_id="e", prompt=""),
        StageRequest(request_id="e", prompt_token_ids=[]),
        StageRequest(request_id="e"),
    ],
)
def test_empty_prompt_is_invalid(engine, empty):
    with pytest.raises(InvalidRequest) as error:
        engine.add_request(empty)
    assert error.value.param == "prompt"
    assert not engine.has_unfinished()


def test_duplicate_request_id_is_invalid(engine):
    engine.add_request(StageRequest(request_id="dup", prompt="hi", sampling=GREEDY))
    with pytest.raises(InvalidRequest) as error:
        engine.add_request(StageRequest(request_id="dup", prompt="hi"))
    assert error.value.param == "request_id"
    engine.abort("dup")


def test_abort_frees_the_cache_at_once(engine):
    blocks = engine.block_manager
    for index in range(3):
        prompt = [7 + index] * 40
        engine.add_request(StageRequest(request_id=f"a{index}", prompt_token_ids=prompt, sampling=GREEDY))
    engine.step()
    engine.step()
    used = blocks.num_blocks - 1 - blocks.num_free_blocks
    assert used == 3 * 3  # 41 tokens each, 16 per block
    engine.abort("a1")
    assert blocks.num_blocks - 1 - blocks.num_free_blocks == 2 * 3
    outputs = engine.step()
    assert {o.request_id for o in outputs} == {"a0", "a2"}
    engine.abort("a0")
    engine.abort("a2")
    engine.abort("unknown")
    assert blocks.num_free_blocks == blocks.num_blocks - 1
    assert not engine.has_unfinished()
