"""Loading one stage's submodule (and only its weights) from a whole omni checkpoint.

The checkpoint directory holds one `model.safetensors` (or shards with an index) for the
whole `...ForConditionalGeneration`; each stage builds its own submodule from the matching
sub-config and loads the tensors under its prefix (`thinker.`, `talker.`, `token2wav.`,
`code2wav.`). A few rows of another stage's embedding (speaker / tts tokens the talker
needs from the thinker's vocabulary) are read by slicing, never the whole matrix.

With `dummy_seed` set (the stage's `load_format` is "dummy"), nothing is read: the submodule is
built on its device with seeded random weights (stages/models/dummy_weights.py) and the rows are
drawn as the thinker's embedding is initialised.

The weights meter (stages/models/weights_meter.py) hears the bytes of the stage's tensors, from the
files' headers, then each tensor as it is read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stages.errors import ConfigError
from stages.models.dummy_weights import build_random, random_rows
from stages.models.weight_reads import prefix_bytes
from stages.models.weights_meter import active_meter, file_part


def weight_files(model_dir: str | Path) -> list[Path]:
    model_dir = Path(model_dir)
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [model_dir / shard for shard in shards]
    single = model_dir / "model.safetensors"
    if not single.is_file():
        raise ConfigError(
            "model", f"{model_dir} has no model.safetensors (a directory of configs only serves with load_format dummy)"
        )
    return [single]


def load_state(model_dir: str | Path, prefix: str, device: str = "cpu") -> dict[str, Any]:
    """Every tensor under `prefix` (the prefix stripped)."""
    from safetensors import safe_open

    files = weight_files(model_dir)
    meter = active_meter()
    if meter is not None:  # the stage reads its own tensors only: those are its total
        for path in files:
            meter.expect(_prefix_part(path, prefix), prefix_bytes(path, prefix))
    state = {}
    for path in files:
        with safe_open(str(path), framework="pt", device=device) as handle:
            for key in handle.keys():
                if key.startswith(prefix):
                    state[key[len(prefix) :]] = tensor = handle.get_tensor(key)
                    if meter is not None:
                        meter.read(_prefix_part(path, prefix), tensor.nbytes)
    if not state:
        raise ConfigError("model", f"{model_dir} holds no weights under {prefix!r}")
    return state


def _prefix_part(path: Path, prefix: str) -> str:
    return f"{file_part(path)}::{prefix}"


def load_submodule(
    model_dir: str | Path,
    module_class: type,
    config: Any,
    prefix: str,
    *,
    device: str,
    dtype: Any,
    dummy_seed: int | None = None,
):
    """Build `module_class(config)` on `device` and load its weights from the checkpoint (with
    `dummy_seed`: fill them with random values drawn from that seed instead)."""
    import torch

    if dummy_seed is not None:
        module = build_random(lambda: module_class._from_config(config, dtype=dtype), device=device, seed=dummy_seed)
        return module.to(dtype)
    with torch.device(device):
        module = module_class._from_config(config, dtype=dtype)
    state = fuse_experts(load_state(model_dir, prefix, device=device), module.state_dict().keys())
    missing, unexpected = module.load_state_dict(state, strict=False)
    if unexpected or [key for key in missing if not key.endswith("inv_freq")]:
        raise ConfigError("model", f"{prefix} weights do not fit: missing {missing[:5]}, unexpected {unexpected[:5]}")
    return module.to(dtype).eval()


def thinker_embedding_rows(model_dir: str | Path, text_config: Any, ids: list[int], *, device: str, dummy_seed=None):
    """Rows `ids` of the thinker's input embedding (the talkers read a few), without loading the thinker:
    sliced from the checkpoint, or with `dummy_seed` drawn as the thinker's embedding is initialised."""
    if dummy_seed is not None:
        std = text_config.initializer_range
        return random_rows(len(ids), text_config.hidden_size, std=std, seed=dummy_seed, device=device)
    return load_rows(model_dir, "thinker.model.embed_tokens.weight", ids, device)


def load_rows(model_dir: str | Path, key: str, rows: list[int], device: str = "cpu"):
    """Rows `rows` of the tensor `key` (e.g. a few thinker embedding rows), read by slicing."""
    import torch
    from safetensors import safe_open

    for path in weight_files(model_dir):
        with safe_open(str(path), framework="pt", device="cpu") as handle:
            if key in handle.keys():
                tensor_slice = handle.get_slice(key)
                return torch.stack([tensor_slice[row : row + 1][0] for row in rows]).to(device)
    raise ConfigError("model", f"{model_dir} has no tensor {key!r}")


def fuse_experts(state: dict[str, Any], wanted) -> dict[str, Any]:
    """Checkpoints store MoE experts one by one (`experts.{e}.gate_proj.weight` ...); transformers'
    modules hold them fused (`experts.gate_up_proj` [E, 2I, H], `experts.down_proj` [E, H, I])."""
    import re

    import torch

    pattern = re.compile(r"(.*\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")
    grouped: dict[str, dict[int, dict[str, Any]]] = {}
    for key in list(state):
        match = pattern.match(key)
        if match and f"{match.group(1)}.gate_up_proj" in wanted:
            grouped.setdefault(match.group(1), {}).setdefault(int(match.group(2)), {})[match.group(3)] = state.pop(key)
    for base, experts in grouped.items():
        order = sorted(experts)
        state[f"{base}.gate_up_proj"] = torch.stack(
            [torch.cat([experts[e]["gate_proj"], experts[e]["up_proj"]]) for e in order]
        )
        state[f"{base}.down_proj"] = torch.stack([experts[e]["down_proj"] for e in order])
    return state
