"""`load_format: dummy`: every family's loader builds, from a directory of configs only (the tiny builder's
output minus its weight files), the same module tree with the same parameter shapes and buffers as it
loads from the weights, with weights of the same distribution; one seed builds the same weights, another
seed others; and a dummy-weight deployment of each family serves a request through every stage."""

from __future__ import annotations

import pytest
import torch

from stages import Omni
from stages.config import StageDeployConfig
from stages.errors import ConfigError
from stages.models.dummy_weights import has_weights, without_weights

FAMILY_MODELS = ["qwen2", "qwen2_5_omni", "qwen3_omni", "sd3", "pixart", "wan", "ar_to_dit"]
AUTO = StageDeployConfig()
SEED = 7  # not the tiny builders' 0: a weight equal to the checkpoint's would then have been read
DUMMY = StageDeployConfig(load_format="dummy", options={"dummy_seed": SEED})


@pytest.fixture(scope="module", autouse=True)
def _threads():
    torch.set_num_threads(2)


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> dict:
    from stages.tiny import build_all

    return build_all(tmp_path_factory.getbasetemp() / "dummy_weights_models", only=FAMILY_MODELS)


@pytest.fixture(scope="session")
def configs_only(tiny, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("configs_only")
    return {name: without_weights(path, root / name) for name, path in tiny.items()}


def omni_part(family: str, part: str):
    """How a family's stage loads its part: (module class, sub-config of the whole config, prefix)."""
    import transformers
    from transformers.models.qwen3_omni_moe import modeling_qwen3_omni_moe

    classes = {
        ("qwen2_5_omni", "thinker"): transformers.Qwen2_5OmniThinkerForConditionalGeneration,
        ("qwen2_5_omni", "talker"): transformers.Qwen2_5OmniTalkerForConditionalGeneration,
        ("qwen2_5_omni", "token2wav"): transformers.Qwen2_5OmniToken2WavModel,
        ("qwen3_omni", "thinker"): transformers.Qwen3OmniMoeThinkerForConditionalGeneration,
        ("qwen3_omni", "talker"): transformers.Qwen3OmniMoeTalkerForConditionalGeneration,
        ("qwen3_omni", "code2wav"): modeling_qwen3_omni_moe.Qwen3OmniMoeCode2Wav,
    }
    return classes[(family, part)]


def load_omni_part(family: str, part: str, model_dir, dummy_seed=None):
    from stages.models import qwen2_5_omni, qwen3_omni
    from stages.models.omni_weights import load_submodule

    module = qwen2_5_omni if family == "qwen2_5_omni" else qwen3_omni
    config = getattr(module.config(str(model_dir)), f"{part}_config")
    return load_submodule(
        model_dir,
        omni_part(family, part),
        config,
        f"{part}.",
        device="cpu",
        dtype=torch.float32,
        dummy_seed=dummy_seed,
    )


def load_pipeline_models(model_dir, deploy: StageDeployConfig) -> dict:
    from stages.diffusion.engine import load_pipeline
    from stages.diffusion.options import DiffusionOptions

    pipe = load_pipeline(model_dir, deploy, DiffusionOptions())
    return {name: part for name, part in pipe.components.items() if isinstance(part, torch.nn.Module)}


OMNI_PARTS = [
    ("qwen2_5_omni", "thinker"),
    ("qwen2_5_omni", "talker"),
    ("qwen2_5_omni", "token2wav"),
    ("qwen3_omni", "thinker"),
    ("qwen3_omni", "talker"),
    ("qwen3_omni", "code2wav"),
]


@pytest.mark.parametrize(("family", "part"), OMNI_PARTS)
def test_an_omni_stage_built_from_configs_matches_the_one_loaded_from_weights(family, part, tiny, configs_only):
    loaded = load_omni_part(family, part, tiny[family])
    dummy = load_omni_part(family, part, configs_only[family], dummy_seed=SEED)
    assert_same_model(dummy, loaded)


def test_a_causal_lm_built_from_configs_matches_the_one_loaded_from_weights(tiny, configs_only):
    from stages.ar.torch_engine import load_causal_lm

    loaded = load_causal_lm(tiny["qwen2"], AUTO, "cpu")
    dummy = load_causal_lm(configs_only["qwen2"], DUMMY, "cpu")
    assert_same_model(dummy, loaded)
    assert dummy.generation_config.eos_token_id == loaded.generation_config.eos_token_id


@pytest.mark.parametrize("name", ["sd3", "pixart", "wan"])
def test_a_diffusers_pipeline_built_from_configs_matches_the_one_loaded_from_weights(name, tiny, configs_only):
    loaded = load_pipeline_models(tiny[name], AUTO)
    dummy = load_pipeline_models(configs_only[name], DUMMY)
    assert sorted(dummy) == sorted(loaded)
    for component in loaded:
        assert_same_model(dummy[component], loaded[component])


def assert_same_model(dummy, loaded) -> None:
    """One module tree, the same parameter names, shapes and dtypes, equal non-weight buffers, and weights
    drawn from the distribution of the tiny builder's (mean and spread per tensor), none copied."""
    assert [(n, type(m).__name__) for n, m in dummy.named_modules()] == [
        (n, type(m).__name__) for n, m in loaded.named_modules()
    ]
    params, reference = dict(dummy.named_parameters()), dict(loaded.named_parameters())
    assert {n: (p.shape, p.dtype) for n, p in params.items()} == {n: (p.shape, p.dtype) for n, p in reference.items()}
    for name, buffer in loaded.named_buffers():  # rotary tables, positional embeddings, statistics
        torch.testing.assert_close(dict(dummy.named_buffers())[name], buffer, msg=f"buffer {name}")
    randomised = 0
    for name, weight in reference.items():
        drawn = params[name]
        assert torch.isfinite(drawn).all(), name
        if weight.numel() < 1024:
            continue
        spread = float(weight.detach().std())
        assert float(drawn.std()) == pytest.approx(spread, rel=0.2, abs=1e-6), f"{name}: std"
        assert float(drawn.mean()) == pytest.approx(float(weight.mean()), abs=0.2 * spread + 1e-6), f"{name}: mean"
        if spread > 0:
            assert not torch.equal(drawn, weight), f"{name} was read from the checkpoint"
            randomised += 1
    assert randomised > 0


def test_one_seed_builds_the_same_weights_and_another_seed_others(configs_only):
    from stages.ar.torch_engine import load_causal_lm
    from stages.models.omni_weights import thinker_embedding_rows
    from stages.models.qwen3_omni import config

    def talker(seed):  # the Qwen3 talker: its experts are drawn after construction
        return load_omni_part("qwen3_omni", "talker", configs_only["qwen3_omni"], dummy_seed=seed)

    def llm(seed):
        return load_causal_lm(
            configs_only["qwen2"], StageDeployConfig(load_format="dummy", options={"dummy_seed": seed}), "cpu"
        )

    def sd3(seed):
        return load_pipeline_models(
            configs_only["sd3"], StageDeployConfig(load_format="dummy", options={"dummy_seed": seed})
        )["transformer"]

    def rows(seed):
        text_config = config(str(configs_only["qwen3_omni"])).thinker_config.text_config
        return thinker_embedding_rows(
            configs_only["qwen3_omni"], text_config, [151671, 151672], device="cpu", dummy_seed=seed
        )

    for build in (talker, llm, sd3):
        first, again, other = build(0).state_dict(), build(0).state_dict(), build(1).state_dict()
        assert all(torch.equal(first[key], again[key]) for key in first)
        experts = [key for key in first if key.endswith("experts.gate_up_proj")]
        assert any(not torch.equal(first[key], other[key]) for key in first)
        for key in experts:  # uninitialised by transformers, drawn here, seeded too
            assert not torch.equal(first[key], other[key]) and float(first[key].std()) == pytest.approx(0.02, rel=0.1)
    assert torch.equal(rows(0), rows(0)) and not torch.equal(rows(0), rows(1)) and rows(0).shape == (2, 128)


def test_configs_without_weights_fail_clearly_unless_dummy(configs_only):
    from stages.ar.torch_engine import load_causal_lm

    assert not has_weights(configs_only["qwen2_5_omni"]) and (configs_only["qwen2_5_omni"] / "spk_dict.pt").is_file()
    with pytest.raises(ConfigError, match="load_format dummy"):
        load_causal_lm(configs_only["qwen2"], AUTO, "cpu")
    with pytest.raises(ConfigError, match="load_format dummy"):
        load_omni_part("qwen2_5_omni", "talker", configs_only["qwen2_5_omni"])
    with pytest.raises(ConfigError, match="load_format"):
        Omni(configs_only["qwen2"], load_format="random")


SHORT = {"max_tokens": 4, "temperature": 0}
CASES = {  # family checkpoint -> (prompt, stages that must have run, the output to expect)
    "qwen2": ("Hello there", ["llm"], "text"),
    "qwen2_5_omni": ([{"role": "user", "content": "Hello there"}], ["thinker", "talker", "code2wav"], "audio"),
    "qwen3_omni": ([{"role": "user", "content": "Hello there"}], ["thinker", "talker", "code2wav"], "audio"),
    "sd3": ("a red cat", ["dit"], "image"),
    "ar_to_dit": ("a red cat", ["prompter", "dit"], "image"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_dummy_weight_deployment_serves_a_request_through_every_stage(name, configs_only):
    prompt, stages, output = CASES[name]
    sampling = None if output == "image" else SHORT
    deploy = {"hop_timeout_s": 300, "stages": {"dit": {"options": {"default_steps": 2}}} if output == "image" else {}}
    with Omni(configs_only[name], deploy=deploy, load_format="dummy") as omni:
        assert {stage.load_format for stage in omni.engine.deploy.stages.values()} == {"dummy"}
        (result,) = omni.generate(prompt, sampling, stage_sampling={"talker": {"max_tokens": 16}, "prompter": SHORT})
    assert result.finish_reason in ("stop", "length")
    assert [stage for stage in stages if f"stage.{stage}.duration_s" in result.metrics] == stages
    if output == "text":
        assert result.text and len(result.token_ids) == 4
    elif output == "audio":
        assert result.text and result.audio is not None and result.audio.size > 0
    else:
        assert result.images and result.images[0].ndim == 3
