"""Fixtures of the omni tests: the tiny Qwen2.5-Omni and Qwen3-Omni checkpoints, built once per session,
transformers' own `generate(return_audio=True)` as the oracle, and a chain of the family's stage engines."""

from __future__ import annotations

import os

import numpy as np
import pytest

from stages.orchestrator.forwarding import build_stage_request
from stages.protocol import SamplingParams, StageRequest
from stages.tensors import to_numpy

FAMILIES = ["qwen2_5_omni", "qwen3_omni"]
VOICES = {"qwen2_5_omni": "Chelsie", "qwen3_omni": "ethan"}


@pytest.fixture(scope="session", autouse=True)
def _omni_threads():
    import torch

    torch.set_num_threads(int(os.environ.get("OMNISTAGE_TEST_THREADS", "2")))


@pytest.fixture(scope="session")
def omni_models(tmp_path_factory) -> dict:
    from stages.tiny import build_all

    return build_all(tmp_path_factory.mktemp("omni_tiny_models"), only=FAMILIES)


def hf_reference(family: str, model_dir, messages, n_text: int, n_codes: int, **media) -> dict:
    """transformers' own processor and generate(return_audio=True), everything greedy."""
    if family == "qwen2_5_omni":
        from stages.models.qwen2_5_omni import processor
    else:
        from stages.models.qwen3_omni import processor
    proc = processor(str(model_dir))
    text = proc.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return hf_generate(family, model_dir, proc(text=text, return_tensors="pt", **media), n_text, n_codes)


def hf_generate(family: str, model_dir, inputs, n_text: int, n_codes: int) -> dict:
    """transformers' own generate(return_audio=True) on processed inputs, greedy; the talker's codes captured."""
    import torch

    if family == "qwen2_5_omni":
        from transformers import Qwen2_5OmniForConditionalGeneration as Model
    else:
        from transformers import Qwen3OmniMoeForConditionalGeneration as Model
    model = Model.from_pretrained(model_dir).eval()
    if family == "qwen3_omni":
        model.talker.config.audio_config = model.config.thinker_config.audio_config
    captured = {}
    talker_generate = model.talker.generate

    def capture(*args, **kwargs):
        result = talker_generate(*args, **kwargs)
        captured["result"] = result
        return result

    model.talker.generate = capture
    torch.manual_seed(0)
    sequences, wav = model.generate(
        **inputs,
        thinker_max_new_tokens=n_text,
        thinker_do_sample=False,
        thinker_eos_token_id=[151645],
        talker_max_new_tokens=n_codes,
        talker_do_sample=False,
        speaker=VOICES[family],
        return_audio=True,
    )
    prompt_len = inputs["input_ids"].shape[1]
    result = captured["result"]
    if family == "qwen2_5_omni":
        codes = result[0, prompt_len + 2 :].tolist()
        codes = codes[: next((i for i, c in enumerate(codes) if c in (8292, 8294)), len(codes))]
    else:
        frames = [hidden[-1] for hidden in result.hidden_states if hidden[-1] is not None]
        codes = torch.cat(frames, dim=0).tolist() if frames else []
    return {
        "tokens": sequences[0, prompt_len:].tolist(),
        "codes": codes,
        "wav": wav.reshape(-1).numpy(),
        "prompt_len": prompt_len,
    }


def run_chain(
    family_name: str,
    model_dir,
    requests: list[StageRequest],
    talker_sampling: SamplingParams,
    deploy_overrides: dict | None = None,
    arrive_at: dict[str, int] | None = None,
) -> dict[str, dict]:
    """The family's three stage engines driven in one loop, outputs forwarded chunk by chunk the way the
    orchestrator forwards them (stages.orchestrator.forwarding). A request arrives at the loop's turn
    `arrive_at[request_id]` (default 0). Returns per request: tokens, codes, audio."""
    from stages.config import StageDeployConfig
    from stages.models import get_family, load_stage_engine

    family = get_family(family_name)
    pipeline = family.pipeline
    deploy = StageDeployConfig(**(deploy_overrides or {}))
    engines = [load_stage_engine(family, stage.name, model_dir, deploy, pipeline) for stage in pipeline.stages]
    results = {r.request_id: {"tokens": [], "codes": [], "audio": [], "errors": []} for r in requests}
    seqs: dict[tuple[str, int], int] = {}
    arrivals = {request.request_id: (arrive_at or {}).get(request.request_id, 0) for request in requests}
    turn = 0
    while turn <= max(arrivals.values()) or any(engine.has_unfinished() for engine in engines):
        for request in requests:
            if arrivals[request.request_id] == turn:
                engines[0].add_request(request)
        turn += 1
        for stage_id, engine in enumerate(engines):
            for output in engine.step():
                result = results[output.request_id]
                if output.error is not None:
                    result["errors"].append((stage_id, output.error))
                    for other in engines:
                        other.abort(output.request_id)
                    continue
                if stage_id == 0:
                    result["tokens"] += output.token_ids
                elif stage_id == 1:
                    result["codes"] += output.token_ids or (
                        to_numpy(output.payloads["codes"]).tolist() if "codes" in output.payloads else []
                    )
                else:
                    result["audio"].append(to_numpy(output.payloads["audio"]))
                if stage_id < 2:
                    _forward(engines[stage_id + 1], output, stage_id, seqs, talker_sampling, requests)
    for result in results.values():
        result["audio"] = np.concatenate(result["audio"]) if result["audio"] else np.zeros(0, np.float32)
    return results


def _forward(target, output, stage_id, seqs, talker_sampling, requests):
    key = (output.request_id, stage_id + 1)
    seq = seqs.get(key, 0)
    entry = next(r for r in requests if r.request_id == output.request_id)
    request = build_stage_request(
        wire_id=output.request_id,
        source_stage=stage_id,
        target_stage=stage_id + 1,
        seq=seq,
        finished=output.finished,
        outputs=[output],
        sampling=talker_sampling if stage_id == 0 else None,
        base_params=entry.params,
        options=entry.options,
        at=0.0,
    )
    seqs[key] = seq + 1
    if seq == 0:
        target.add_request(request)
    else:
        target.add_chunk(request)
