"""The thinker encodes the audio of requests admitted together in one audio-tower call, each request
getting the features it would get alone (to float32 rounding: batched GEMMs sum in another order);
a request whose audio fails to merge fails alone."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest

from stages.config import StageDeployConfig
from stages.protocol import SamplingParams, StageRequest
from stages.tensors import from_wire, to_numpy, to_wire

CLIPS_S = (0.6, 1.4, 1.0)


def _spoken_request(request_id: str, seconds: float, freq: float) -> StageRequest:
    t = np.arange(int(16000 * seconds)) / 16000
    clip = (0.3 * np.sin(2 * np.pi * freq * t)).astype(np.float32)
    return StageRequest(
        request_id=request_id,
        messages=[{"role": "user", "content": [{"type": "audio", "audio": clip.tolist()}, {"type": "text", "text": "?"}]}],
        sampling=SamplingParams(temperature=0, max_tokens=4),
    )  # fmt: skip


def _thinker(family: str, model: str):
    """The thinker's AR engine (under the preparing wrapper) and the family, for prepared requests."""
    from stages.models import get_family, load_stage_engine

    return load_stage_engine(family, "thinker", model, StageDeployConfig()).engine, get_family(family)


def _first_outputs(engine, requests: list[StageRequest]) -> dict:
    for request in requests:
        engine.add_request(request)
    outputs = {}
    while len(outputs) < len(requests):
        for output in engine.step():
            outputs.setdefault(output.request_id, output)
    for request in requests:
        engine.abort(request.request_id)
    return outputs


def _counting_audio_calls(monkeypatch, thinker) -> list[int]:
    calls = []
    encode = thinker.get_audio_features

    def counted(features, *args, **kwargs):
        calls.append(features.shape[0])
        return encode(features, *args, **kwargs)

    monkeypatch.setattr(thinker, "get_audio_features", counted)
    return calls


@pytest.mark.parametrize("family", ["qwen2_5_omni", "qwen3_omni"])
def test_audio_of_requests_admitted_together_is_encoded_in_one_call(omni_models, family, monkeypatch):
    engine, omni = _thinker(family, omni_models[family])
    prepared = [
        omni.prepare_request(_spoken_request(f"r{i}", seconds, 300.0 + 200 * i), omni_models[family], StageDeployConfig())
        for i, seconds in enumerate(CLIPS_S)
    ]  # fmt: skip
    text_only = StageRequest(
        request_id="text", prompt_token_ids=[9707, 11, 1879], sampling=SamplingParams(temperature=0, max_tokens=4)
    )
    alone = {request.request_id: _first_outputs(engine, [request])[request.request_id] for request in prepared}
    calls = _counting_audio_calls(monkeypatch, engine.adapter.model)

    together = _first_outputs(engine, [*prepared, text_only])

    assert calls == [len(CLIPS_S)]  # one call, every clip in it
    assert not any(output.error for output in together.values())
    for request_id, output in alone.items():
        for payload in ("embeds", "hidden"):
            ours, theirs = to_numpy(together[request_id].payloads[payload]), to_numpy(output.payloads[payload])
            assert ours.shape == theirs.shape
            assert np.allclose(ours, theirs, rtol=1e-3, atol=1e-3 * np.abs(theirs).max()), (request_id, payload)
        assert together[request_id].token_ids == output.token_ids


def test_a_request_whose_audio_does_not_fit_its_prompt_fails_alone(omni_models, monkeypatch):
    model = omni_models["qwen2_5_omni"]
    engine, omni = _thinker("qwen2_5_omni", model)
    good, bad = (
        omni.prepare_request(_spoken_request(name, 1.0, 440.0), model, StageDeployConfig()) for name in ("good", "bad")
    )
    mask = from_wire(bad.payloads["feature_attention_mask"]).clone()
    mask[:, mask.shape[-1] // 2 :] = 0  # half the clip's frames: fewer audio rows than placeholders
    bad = msgspec.structs.replace(bad, payloads={**bad.payloads, "feature_attention_mask": to_wire(mask)})
    calls = _counting_audio_calls(monkeypatch, engine.adapter.model)

    outputs = _first_outputs(engine, [good, bad])

    assert calls == [2, 1, 1]  # together, then each alone after the joint call failed
    assert outputs["bad"].error is not None and outputs["bad"].finished
    assert outputs["good"].error is None and outputs["good"].token_ids
    assert not engine.has_unfinished()
