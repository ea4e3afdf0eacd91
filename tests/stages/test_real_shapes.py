"""`python -m stages.tiny --real-shapes OUT` writes the published models' configs with the tiny tokenizer
and processor files and no weights: each loads with transformers' (and diffusers') config classes, the
model it describes has the published parameter count (counted on the meta device: nothing allocated),
and its family prepares a request from it."""

from __future__ import annotations

import pytest

from stages.config import StageDeployConfig
from stages.models import detect_family, get_family
from stages.models.dummy_weights import has_weights
from stages.protocol import StageRequest
from stages.tiny import REAL_SHAPES, is_built
from stages.tiny.__main__ import main
from stages.tiny.real_shapes import PUBLISHED, parameter_counts


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    root = tmp_path_factory.mktemp("real_shapes")
    assert main(["--real-shapes", str(root)]) == 0
    return root


def test_the_cli_writes_every_directory_without_weights(real):
    assert sorted(path.name for path in real.iterdir()) == sorted(REAL_SHAPES)
    for name in REAL_SHAPES:
        assert is_built(real / name) and not has_weights(real / name)
    assert (real / "qwen2_5_omni_7b" / "spk_dict.pt").is_file()  # the voices, small


def test_the_omni_configs_load_with_their_transformers_classes(real):
    from transformers import Qwen2_5OmniConfig, Qwen3OmniMoeConfig

    omni = Qwen2_5OmniConfig.from_pretrained(real / "qwen2_5_omni_7b")
    text, talker = omni.thinker_config.text_config, omni.talker_config
    assert (text.hidden_size, text.num_hidden_layers, text.num_attention_heads, text.num_key_value_heads) == (
        3584, 28, 28, 4
    )  # fmt: skip
    assert (text.vocab_size, text.rope_parameters["mrope_section"]) == (152064, [16, 24, 24])
    assert (omni.thinker_config.vision_config.hidden_size, omni.thinker_config.audio_config.d_model) == (1280, 1280)
    assert (talker.hidden_size, talker.num_hidden_layers, talker.head_dim, talker.embedding_size) == (
        896,
        24,
        128,
        3584,
    )
    assert omni.token2wav_config.dit_config.num_hidden_layers == 22
    assert omni.token2wav_config.bigvgan_config.upsample_rates == [5, 3, 2, 2, 2, 2]

    moe = Qwen3OmniMoeConfig.from_pretrained(real / "qwen3_omni_30b_a3b")
    thinker, talker = moe.thinker_config.text_config, moe.talker_config
    assert (thinker.num_hidden_layers, thinker.hidden_size, thinker.num_experts, thinker.num_experts_per_tok) == (
        48, 2048, 128, 8
    )  # fmt: skip
    assert (talker.text_config.num_experts, talker.text_config.num_experts_per_tok) == (128, 6)
    assert talker.text_config.shared_expert_intermediate_size == 768
    assert (talker.code_predictor_config.num_hidden_layers, talker.num_code_groups, talker.accept_hidden_layer) == (
        5, 16, 24
    )  # fmt: skip
    assert (moe.code2wav_config.num_hidden_layers, moe.code2wav_config.upsample_rates) == (8, [8, 5, 4, 3])
    assert moe.thinker_config.vision_config.deepstack_visual_indexes == [8, 16, 24]


def test_the_llm_and_sd3_configs_load_with_their_classes(real):
    from diffusers import DiffusionPipeline, SD3Transformer2DModel
    from transformers import CLIPTextConfig, Qwen2Config, T5Config

    qwen = Qwen2Config.from_pretrained(real / "qwen2_5_0_5b")
    assert (qwen.hidden_size, qwen.num_hidden_layers, qwen.vocab_size, qwen.tie_word_embeddings) == (
        896,
        24,
        151936,
        True,
    )
    sd3 = real / "sd3_medium"
    assert DiffusionPipeline.load_config(sd3)["_class_name"] == "StableDiffusion3Pipeline"
    mmdit = SD3Transformer2DModel.load_config(sd3 / "transformer")
    assert (mmdit["num_layers"], mmdit["num_attention_heads"], mmdit["joint_attention_dim"]) == (24, 24, 4096)
    assert CLIPTextConfig.from_pretrained(sd3 / "text_encoder_2").num_hidden_layers == 32
    assert T5Config.from_pretrained(sd3 / "text_encoder_3").d_model == 4096


@pytest.mark.parametrize("name", sorted(REAL_SHAPES))
def test_the_parameter_count_is_the_published_size(real, name):
    counts = parameter_counts(real / name)
    for part, published in PUBLISHED[name].items():
        assert counts[part] == pytest.approx(published, rel=0.03), part


@pytest.mark.parametrize(
    ("name", "family"),
    [("qwen2_5_omni_7b", "qwen2_5_omni"), ("qwen3_omni_30b_a3b", "qwen3_omni"), ("qwen2_5_0_5b", "llm")],
)
def test_the_family_prepares_a_chat_request_from_the_directory(real, name, family):
    assert detect_family(real / name) == family
    request = StageRequest(request_id="r", messages=[{"role": "user", "content": "Hello there"}])
    prepared = get_family(family).prepare_request(request, real / name, StageDeployConfig())
    assert prepared.prompt_token_ids[-3:-1] == [151644, 77091]  # <|im_start|>assistant
