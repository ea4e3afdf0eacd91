"""A prompt's audio clips are padded to the longest of them, not to the feature extractor's
maximum: Qwen2.5-Omni's processor pads each clip to 300 s of features by default, so a ten-turn
spoken conversation (every turn's audio is in every response's prompt) prepared 50 minutes of
mel frames for 20 s of speech. The frames the audio tower reads stay exactly transformers'."""

from __future__ import annotations

import numpy as np
import pytest

from stages.config import StageDeployConfig
from stages.models import get_family
from stages.models.omni_inputs import AUDIO_RATE
from stages.protocol import StageRequest
from stages.tensors import from_wire

TURNS = 10
CLIP_S = 2.0


def spoken_conversation(turns: int) -> tuple[list[dict], list[np.ndarray]]:
    """A realtime session's prompt after `turns` spoken turns: each user turn a clip (as sample
    lists, one a little longer), each answer text."""
    rng = np.random.default_rng(0)
    clips = [(rng.standard_normal(int(AUDIO_RATE * CLIP_S) + 37 * turn) * 0.1).astype(np.float32)
             for turn in range(turns)]  # fmt: skip
    messages = []
    for turn, clip in enumerate(clips):
        messages.append({"role": "user", "content": [{"type": "audio", "audio": clip.tolist()}]})
        if turn < turns - 1:
            messages.append({"role": "assistant", "content": f"answer number {turn}"})
    return messages, clips


@pytest.fixture(scope="module")
def omni_dir(repo_tiny_models):
    return str(repo_tiny_models / "qwen2_5_omni")


def test_a_spoken_conversation_is_padded_to_its_longest_clip(omni_dir):
    from stages.models.qwen2_5_omni import processor

    messages, clips = spoken_conversation(TURNS)
    request = StageRequest(request_id="talk", messages=messages)
    prepared = get_family("qwen2_5_omni").prepare_request(request, omni_dir, StageDeployConfig())
    features = from_wire(prepared.payloads["input_features"])
    mask = from_wire(prepared.payloads["feature_attention_mask"]).bool()
    hop = processor(omni_dir).feature_extractor.hop_length
    longest_frames = max(clip.size for clip in clips) // hop + 1
    assert features.shape[0] == TURNS and features.shape[-1] <= longest_frames + 4, features.shape

    proc = processor(omni_dir)  # transformers' own padding (300 s a clip), as the oracle tests use it
    text = proc.tokenizer.apply_chat_template(
        [{"role": m["role"], "content": [{"type": "audio"}] if m["role"] == "user" else m["content"]}
         for m in messages], add_generation_prompt=True, tokenize=False)  # fmt: skip
    reference = proc(text=text, audio=clips, return_tensors="pt")
    assert prepared.prompt_token_ids == reference["input_ids"][0].tolist()
    reference_mask = reference["feature_attention_mask"].bool()
    assert mask.sum(-1).tolist() == reference_mask.sum(-1).tolist()
    for clip in range(TURNS):
        ours = features[clip][:, mask[clip]]
        theirs = reference["input_features"][clip][:, reference_mask[clip]]
        assert np.array_equal(ours.numpy(), theirs.numpy()), clip


def test_a_clip_longer_than_the_extractor_takes_is_cut_as_transformers_cuts_it(omni_dir):
    from stages.models.omni_inputs import audio_padding
    from stages.models.qwen2_5_omni import processor

    extractor = processor(omni_dir).feature_extractor
    assert audio_padding([np.zeros(extractor.n_samples + 1)], extractor) == extractor.n_samples
    padded = audio_padding([np.zeros(10), np.zeros(1600)], extractor)
    assert padded % extractor.hop_length == 0 and 1600 + extractor.n_fft <= padded < 1600 + extractor.n_fft + 160
