"""The offline API (`Omni`, `AsyncOmni`) over the in-process driver, with real engines:
the echo stage (orchestration only) and the tiny Qwen2 on our torch AR engine."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from stages import AsyncOmni, Omni
from stages.errors import InvalidRequest
from stages.omni import RequestFailed
from stages.protocol import SamplingParams, StageRequest


@pytest.fixture(scope="module")
def echo():
    omni = Omni("echo")
    yield omni
    omni.close()


def test_generate_answers_each_prompt_with_text_tokens_and_metrics(echo):
    results = echo.generate(["hello big world", "one"])
    assert [r.text for r in results] == ["hello big world", "one"]
    assert [len(r.token_ids) for r in results] == [3, 1]
    assert all(r.finish_reason == "stop" for r in results)
    metrics = results[0].metrics
    assert 0 < metrics["ttft_s"] <= metrics["e2el_s"] and metrics["tpot_s"] >= 0
    assert results[0].usage["completion_tokens"] == 3


def test_sampling_params_apply_per_prompt(echo):
    short, full = echo.generate(["a b c d", "a b c d"], [SamplingParams(max_tokens=2), {"max_tokens": 10}])
    assert (short.text, short.finish_reason) == ("a b", "length")
    assert (full.text, full.finish_reason) == ("a b c d", "stop")


def test_prompt_shapes(echo):
    conversation = [{"role": "system", "content": "x"}, {"role": "user", "content": "last words"}]
    (from_messages,) = echo.generate(conversation)
    assert from_messages.text == "last words"
    (from_dict,) = echo.generate({"prompt": "as dict", "params": {"k": 1}})
    assert from_dict.text == "as dict"
    (from_request,) = echo.generate(StageRequest(request_id="mine", prompt="a request"))
    assert (from_request.request_id, from_request.text) == ("mine", "a request")


def test_bad_input_names_the_field_and_the_engine_keeps_serving(echo):
    with pytest.raises(InvalidRequest) as excinfo:
        echo.generate("x", {"max_tokens": 0})
    assert excinfo.value.param == "max_tokens"
    with pytest.raises(InvalidRequest) as excinfo:
        echo.generate({"promt": "typo"})
    assert excinfo.value.param == "promt"
    with pytest.raises(InvalidRequest) as excinfo:
        echo.generate({"prompt_token_ids": None, "prompt": None})
    assert excinfo.value.param == "prompt"
    assert echo.generate("still here")[0].text == "still here"


def test_an_engine_error_in_one_request_leaves_the_others_alone(echo):
    async def both():
        engine = echo.engine
        failing = engine.generate_all({"prompt": "boom", "options": {"extra": {"echo_fail": True}}})
        fine = engine.generate_all("fine words")
        return await asyncio.gather(failing, fine, return_exceptions=True)

    failed, fine = asyncio.run_coroutine_threadsafe(both(), echo._loop).result()
    assert isinstance(failed, RequestFailed) and "echo_fail" in str(failed) and "stage 'echo'" in str(failed)
    assert fine.text == "fine words"


async def test_async_omni_streams_deltas_and_a_final_summary():
    async with AsyncOmni("echo", deploy={"stages": {"echo": {"options": {"delay_s": 0.001}}}}) as omni:
        deltas = [delta async for delta in omni.generate("streamed answer here")]
    assert [d.text for d in deltas[:-1]] == ["streamed", " answer", " here"]
    assert deltas[-1].finished and deltas[-1].finish_reason == "stop" and "e2el_s" in deltas[-1].metrics


async def test_leaving_the_stream_early_cancels_the_request():
    async with AsyncOmni("echo", deploy={"stages": {"echo": {"options": {"delay_s": 0.01}}}}) as omni:
        async for _ in omni.generate(" ".join(["w"] * 200), request_id="leaver"):
            break
        replica = omni._driver.replicas["echo-0"]
        for _ in range(100):
            if not replica.engine.has_unfinished():
                break
            await asyncio.sleep(0.01)
        assert not replica.engine.has_unfinished()
        assert "leaver" not in omni._driver.core.requests


async def test_a_stuck_stage_times_out_with_a_clear_error():
    async with AsyncOmni("echo", deploy={"hop_timeout_s": 0.3}) as omni:
        with pytest.raises(RequestFailed) as excinfo:
            await omni.generate_all({"prompt": "never", "options": {"extra": {"echo_hang": True}}})
    assert excinfo.value.error.type == "timeout_error" and "hop_timeout_s=0.3" in str(excinfo.value)


async def test_admission_limit_rejects_with_queue_full():
    deploy = {"max_queue": 1, "stages": {"echo": {"options": {"delay_s": 0.02}}}}
    async with AsyncOmni("echo", deploy=deploy) as omni:
        results = await asyncio.gather(omni.generate_all("a b c"), omni.generate_all("d e f"), return_exceptions=True)
    failures = [r for r in results if isinstance(r, RequestFailed)]
    assert len(failures) == 1 and failures[0].error.code == "queue_full"


def test_two_stage_pipelines_stream_and_batch_between_stages():
    for variant in ("chain", "chain-batch"):
        with Omni("echo", pipeline=variant) as omni:
            (result,) = omni.generate("through two stages")
        assert result.text == "through two stages"
        assert set(result.metrics) >= {"stage.echo.duration_s", "stage.echo2.duration_s"}


def test_voice_pipeline_returns_text_and_audio_with_ttfp():
    with Omni("echo", pipeline="voice") as omni:
        (result,) = omni.generate("say three words")
    assert result.text == "say three words"
    assert isinstance(result.audio, np.ndarray) and result.audio.shape == (3 * 160,) and result.sample_rate == 16000
    assert 0 < result.metrics["ttfp_s"] <= result.metrics["e2el_s"]
    assert result.metrics["audio_s"] == 480 / 16000 and result.metrics["rtf"] > 0


def test_replicas_share_the_load():
    deploy = {"stages": {"echo": {"replicas": 2, "options": {"delay_s": 0.005}}}}
    with Omni("echo", deploy=deploy) as omni:
        results = omni.generate([f"request {i} with words" for i in range(6)])
        assert [r.text for r in results] == [f"request {i} with words" for i in range(6)]
        assert set(omni.engine._driver.replicas) == {"echo-0", "echo-1"}


def test_unknown_model_is_a_clear_error(tmp_path):
    with pytest.raises(InvalidRequest) as excinfo:
        Omni(tmp_path / "missing")
    assert excinfo.value.param == "model"
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mamba9"}))
    with pytest.raises(Exception, match="mamba9"):
        Omni(tmp_path)


# ------------------------------------------------------------ the tiny LLM, torch engine


@pytest.fixture(scope="module")
def qwen2(tmp_path_factory):
    from stages.tiny import build

    return build("qwen2", tmp_path_factory.mktemp("offline") / "qwen2")


@pytest.fixture(scope="module")
def tiny_llm(qwen2):
    import torch

    torch.set_num_threads(2)
    omni = Omni(qwen2)
    yield omni
    omni.close()


@pytest.mark.slow
def test_omni_answers_a_chat_prompt_on_the_tiny_llm(qwen2, tiny_llm):
    import torch
    from transformers import AutoModelForCausalLM

    from stages.models.llm import apply_chat_template

    (result,) = tiny_llm.generate("Hello", SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))
    prompt = apply_chat_template(qwen2, [{"role": "user", "content": "Hello"}])
    model = AutoModelForCausalLM.from_pretrained(qwen2, dtype=torch.float32)
    expected = model.generate(
        torch.tensor([prompt]),
        do_sample=False,
        max_new_tokens=12,
        min_new_tokens=12,
        attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
    )[0, len(prompt) :].tolist()
    assert result.token_ids == expected
    assert result.text and result.finish_reason == "length" and result.metrics["ttft_s"] > 0


@pytest.mark.slow
def test_bad_chat_input_names_the_field_on_the_tiny_llm(tiny_llm):
    with pytest.raises(InvalidRequest) as excinfo:
        tiny_llm.generate([{"role": "user"}])
    assert excinfo.value.param == "messages[0]"
    with pytest.raises(InvalidRequest) as excinfo:
        tiny_llm.generate("Hello", {"max_tokens": 5, "top_p": 0})
    assert excinfo.value.param == "top_p"
    (ok,) = tiny_llm.generate(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], {"max_tokens": 3}
    )
    assert len(ok.token_ids) <= 3


async def test_request_ids_are_unique_while_running_and_reusable_after():
    async with AsyncOmni("echo", deploy={"stages": {"echo": {"options": {"delay_s": 0.01}}}}) as omni:
        first = asyncio.ensure_future(omni.generate_all("a b c", request_id="same"))
        await asyncio.sleep(0.005)
        with pytest.raises(InvalidRequest) as excinfo:
            await omni.generate_all("x", request_id="same")
        assert excinfo.value.param == "request_id"
        assert (await first).text == "a b c"
        assert (await omni.generate_all("again", request_id="same")).text == "again"
