"""The weights meter counts what each loader reads from a tiny checkpoint: the total it announces is
the weight files' size (an omni stage: its own tensors' bytes in them; dummy weights: the parameters'
bytes), the loaded count climbs as tensors are read and ends at the total; the library hooks are gone
after the load, and a load without a meter counts nothing."""

from __future__ import annotations

import subprocess

import pytest
import torch

from stages.config import StageDeployConfig
from stages.models.weight_reads import checkpoint_files, prefix_bytes
from stages.models.weights_meter import WeightsMeter, active_meter, metering

DUMMY = StageDeployConfig(load_format="dummy", options={"dummy_seed": 3})


@pytest.fixture(scope="module", autouse=True)
def _threads():
    torch.set_num_threads(2)


@pytest.fixture(scope="module")
def tiny(repo_tiny_models):
    return repo_tiny_models


@pytest.fixture(scope="module")
def sd3(tiny):
    from procs import PYTHON, REPO

    subprocess.run([PYTHON, "-m", "stages.tiny", str(tiny), "--only", "sd3"], cwd=REPO, check=True, capture_output=True)
    return tiny / "sd3"


def files_size(folder) -> int:
    return sum(path.stat().st_size for path in checkpoint_files(folder))


def loaded_in_steps(heard: list[tuple[int, int]]) -> list[int]:
    return [loaded for loaded, _ in heard]


def test_a_causal_lm_counts_its_file_tensor_by_tensor(tiny):
    import transformers.modeling_utils

    from stages.ar.torch_engine import load_causal_lm

    original = transformers.modeling_utils.safe_open
    heard: list[tuple[int, int]] = []
    with metering(lambda loaded, total: heard.append((loaded, total))) as meter:
        model = load_causal_lm(tiny / "qwen2", StageDeployConfig(), "cpu")
    size = files_size(tiny / "qwen2")
    assert size == (tiny / "qwen2" / "model.safetensors").stat().st_size
    assert meter.total == size and meter.loaded == size
    assert heard[-1] == (size, size)
    steps = loaded_in_steps(heard)
    assert steps == sorted(steps) and len(set(steps)) > len(list(model.parameters())) // 2  # per tensor
    assert transformers.modeling_utils.safe_open is original and active_meter() is None


def test_dummy_weights_count_the_parameters_bytes(tiny):
    from stages.ar.torch_engine import load_causal_lm

    heard: list[tuple[int, int]] = []
    with metering(lambda loaded, total: heard.append((loaded, total))) as meter:
        model = load_causal_lm(tiny / "qwen2", DUMMY, "cpu")
    parameters = sum(param.numel() * param.element_size() for param in model.parameters())
    assert meter.total == parameters and meter.loaded == parameters
    assert heard[0] == (0, parameters)  # announced before it was built
    assert heard[-1] == (parameters, parameters)


def test_an_omni_stage_counts_its_own_tensors_only(tiny):
    from stages.models.omni_weights import load_state, weight_files

    with metering() as meter:
        state = load_state(tiny / "qwen2_5_omni", "talker.")
    read = sum(tensor.nbytes for tensor in state.values())
    (path,) = weight_files(tiny / "qwen2_5_omni")
    assert meter.total == read == prefix_bytes(path, "talker.") and meter.loaded == read
    assert read < path.stat().st_size  # the thinker's and token2wav's tensors are not its own


def test_a_diffusers_pipeline_counts_every_components_files(sd3):
    from stages.diffusion.engine import load_pipeline
    from stages.diffusion.options import DiffusionOptions

    folder = sd3
    with metering() as meter:
        load_pipeline(folder, StageDeployConfig(), DiffusionOptions())
    components = [path for path in folder.iterdir() if path.is_dir() and checkpoint_files(path)]
    size = sum(files_size(path) for path in components)
    assert len(components) == 5  # transformer, three text encoders, the VAE
    assert meter.total == size and meter.loaded == size


def test_without_a_meter_nothing_is_counted_and_parts_never_overflow(tiny):
    from stages.ar.torch_engine import load_causal_lm

    assert load_causal_lm(tiny / "qwen2", StageDeployConfig(), "cpu") is not None
    meter = WeightsMeter()
    meter.expect("part", 10)
    meter.read("part", 7)
    meter.read("part", 7)  # a second hook seeing the same bytes
    meter.read("unannounced", 5)
    assert (meter.loaded, meter.total) == (10, 10)
    meter.file_done(tiny / "qwen2" / "model.safetensors")  # a file nobody announced counts with its size
    assert meter.total == meter.loaded == 10 + files_size(tiny / "qwen2")


def test_a_dummy_pipeline_announces_every_models_parameters_before_building_the_first(sd3):
    from stages.diffusion.engine import load_pipeline
    from stages.diffusion.options import DiffusionOptions

    heard: list[tuple[int, int]] = []
    with metering(lambda loaded, total: heard.append((loaded, total))) as meter:
        pipe = load_pipeline(sd3, DUMMY, DiffusionOptions())
    models = [pipe.transformer, pipe.vae, pipe.text_encoder, pipe.text_encoder_2, pipe.text_encoder_3]
    parameters = sum(param.numel() * param.element_size() for model in models for param in model.parameters())
    assert meter.total == meter.loaded == parameters
    first_built = next(total for loaded, total in heard if loaded > 0)
    assert first_built == parameters  # the whole total was known before any model was built
