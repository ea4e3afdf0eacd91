"""`load_format: "dummy"`: a stage's model built from its checkpoint's configs, on its device, with seeded
random weights, and no weight file read.

Every loader that reads weights (stages/models/omni_weights.py for the omni stages, the torch AR engine
for causal LMs, stages/diffusion/dummy_pipeline.py for diffusers pipelines) builds through
`build_random(factory, device=..., seed=...)`: the module's own constructor runs under
`torch.device(device)` with the RNG seeded, so the model's own initialisation (transformers'
`_init_weights`, torch's layer defaults: what the tiny builders in stages/tiny/ save) draws every
weight directly on the device, and buffers that are not weights (rotary `inv_freq`, positional tables,
normalisation statistics) are computed from the config as the constructor does. Two fixes follow, the
same the tiny builders apply: `*Experts` tensors, which transformers leaves uninitialised
(`torch.empty`), are drawn N(0, 0.02); and every parameter is checked finite.

A stage that needs rows of another stage's weights (the omni talkers read a few rows of the thinker's
embedding) draws them from the same distribution (`random_rows`). vLLM's own `load_format="dummy"`
serves the vllm backend.

With a weights meter active (stages/models/weights_meter.py), each module built counts its parameters'
bytes: announced from a build on the meta device before it is built, loaded once it is initialised.

`without_weights(src, dst)` copies a checkpoint directory minus its weight files (the test of a
config-only directory; or a real checkpoint's configs, to serve its shapes without its weights).
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stages.models.weights_meter import active_meter

if TYPE_CHECKING:
    from stages.config import StageDeployConfig

DUMMY = "dummy"
EXPERT_STD = 0.02
LARGEST_SANE_WEIGHT = 1e3
_parts = itertools.count(1)


def dummy_seed(stage_deploy: StageDeployConfig) -> int | None:
    """The seed of the stage's random weights, or None when it reads its checkpoint's weights."""
    if stage_deploy.load_format != DUMMY:
        return None
    return int(stage_deploy.options.get("dummy_seed", 0))


def build_random(factory: Callable[[], Any], *, device: str, seed: int, part: str | None = None):
    """`factory()` (a module constructor) run on `device` with the RNG seeded at `seed`, made finite.
    `part`: its name for the weights meter, when its caller announced it already."""
    import torch

    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    meter = active_meter()
    part = part or f"random weights #{next(_parts)}"
    if meter is not None:
        announced = meta_parameter_bytes(factory)
        if announced is not None:
            meter.expect(part, announced)
    with _seeded(device, seed), torch.device(device):
        module = factory()
    redraw_experts(module, torch.Generator(device).manual_seed(seed + 1))
    check_finite(module)
    if meter is not None:
        meter.done(part, parameter_bytes(module))
    return module.eval()


def parameter_bytes(module) -> int:
    return sum(param.numel() * param.element_size() for param in module.parameters())


def meta_parameter_bytes(factory: Callable[[], Any]) -> int | None:
    """The bytes of the parameters `factory()` builds, from a build on the meta device (no memory, no
    initialisation); None when the constructor cannot run there."""
    import torch

    try:
        with torch.device("meta"):
            return parameter_bytes(factory())
    except Exception:  # noqa: BLE001 - the total is then known once the module is built
        return None


@contextlib.contextmanager
def _seeded(device, seed: int) -> Iterator[None]:
    """The global RNG (which the constructors draw from) seeded, and restored afterwards."""
    import torch

    devices = [device.index] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.random.default_generator.manual_seed(seed)
        if devices:
            with torch.cuda.device(device):
                torch.cuda.manual_seed(seed)
        yield


def redraw_experts(module, generator) -> None:
    """transformers leaves `*Experts` tensors uninitialised (torch.empty): draw them N(0, 0.02), biases zero."""
    import torch

    with torch.no_grad():
        for _name, child in module.named_modules():
            if not type(child).__name__.endswith("Experts"):
                continue
            for param_name, param in child.named_parameters(recurse=False):
                if "bias" in param_name:
                    param.zero_()
                else:
                    drawn = torch.randn(param.shape, generator=generator, device=param.device, dtype=param.dtype)
                    param.copy_(drawn.mul_(EXPERT_STD))


def check_finite(module) -> None:
    """Fail on a parameter that is not finite or implausibly large (an uninitialised tensor slipped through)."""
    import torch

    with torch.no_grad():
        for name, param in module.named_parameters():
            if param.numel() == 0:
                continue
            low, high = torch.aminmax(param.detach())
            if not (-LARGEST_SANE_WEIGHT <= float(low) and float(high) <= LARGEST_SANE_WEIGHT):
                raise RuntimeError(f"random weight {name} is not finite or too large (min {low}, max {high})")


def random_rows(count: int, width: int, *, std: float, seed: int, device: str, dtype=None):
    """`count` rows of an embedding another stage owns, drawn as its initialisation draws them: N(0, std)."""
    import torch

    generator = torch.Generator(device).manual_seed(seed)
    return torch.randn(count, width, generator=generator, device=device, dtype=dtype) * std


def is_weight_file(path: Path) -> bool:
    name = path.name
    return name.endswith((".safetensors", ".safetensors.index.json")) or (
        name.startswith("pytorch_model") and name.endswith((".bin", ".bin.index.json"))
    )


def without_weights(src: str | Path, dst: str | Path) -> Path:
    """Copy checkpoint directory `src` to `dst` without its weight files (configs, tokenizer, processor,
    voices and other small files stay)."""
    src, dst = Path(src), Path(dst)
    shutil.copytree(src, dst, ignore=lambda folder, names: [n for n in names if is_weight_file(Path(folder, n))])
    return dst


def has_weights(model_dir: str | Path) -> bool:
    return any(is_weight_file(path) for path in Path(model_dir).rglob("*"))
