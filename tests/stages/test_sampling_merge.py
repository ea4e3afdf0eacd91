"""The one sampling merge: pipeline default < deployment override < request, validated once,
errors naming the field, one default for max_tokens."""

from __future__ import annotations

import msgspec
import pytest

from stages.errors import InvalidRequest
from stages.protocol import DEFAULT_MAX_TOKENS, SamplingParams
from stages.sampling_merge import SAMPLING_FIELDS, merge_sampling


def test_each_layer_wins_over_the_one_before():
    sampling = merge_sampling(
        {"temperature": 0.0, "max_tokens": 256, "top_k": 5},
        {"max_tokens": 40, "top_p": 0.8},
        {"top_k": 3},
    )
    assert (sampling.temperature, sampling.max_tokens, sampling.top_p, sampling.top_k) == (0.0, 40, 0.8, 3)


def test_a_request_field_of_none_is_not_set():
    sampling = merge_sampling({"max_tokens": 256}, None, {"max_tokens": None, "temperature": None, "seed": 7})
    assert (sampling.max_tokens, sampling.temperature, sampling.seed) == (256, 1.0, 7)


def test_max_tokens_has_one_default():
    assert merge_sampling().max_tokens == DEFAULT_MAX_TOKENS == SamplingParams().max_tokens
    assert merge_sampling({"temperature": 0.0}, {"top_k": 2}, {"seed": 1}).max_tokens == DEFAULT_MAX_TOKENS


def test_a_stop_string_is_one_stop():
    assert merge_sampling(request={"stop": "END"}).stop == ["END"]


def test_the_fields_are_sampling_params_own():
    assert SAMPLING_FIELDS == tuple(field.name for field in msgspec.structs.fields(SamplingParams))
    assert {"temperature", "max_tokens", "stop_token_ids", "repetition_penalty"} <= set(SAMPLING_FIELDS)


@pytest.mark.parametrize(
    ("layers", "param", "field", "reason"),
    [
        ([None, None, {"top_p": 7}], "", "top_p", "must be in (0, 1]"),
        ([None, None, {"temperature": "hot"}], "", "temperature", "Expected `float`, got `str`"),
        ([None, None, {"temprature": 0.5}], "", "temprature", "Object contains unknown field `temprature`"),
        ([None, None, {"top_p": 7}], "sampling_params_list[1]", "sampling_params_list[1].top_p", None),
        ([None, {"max_tokens": 0}, None], "", "max_tokens", "must be >= 1"),
        ([{"min_tokens": 9}, None, {"max_tokens": 4}], "", "min_tokens", None),
        ([None, None, {"stop_token_ids": [-1]}], "", "stop_token_ids", None),
        ([None, None, "hot"], "sampling_params_list[0]", "sampling_params_list[0]", "Expected `object`, got `str`"),
    ],
)
def test_an_invalid_value_names_its_field(layers, param, field, reason):
    with pytest.raises(InvalidRequest) as error:
        merge_sampling(*layers, param=param)
    assert error.value.param == field
    if reason is not None:
        assert error.value.reason == reason


def test_the_merge_is_pure():
    pipeline, deployment, request = {"max_tokens": 8}, {"top_k": 2}, {"stop": "x"}
    merge_sampling(pipeline, deployment, request)
    assert (pipeline, deployment, request) == ({"max_tokens": 8}, {"top_k": 2}, {"stop": "x"})
