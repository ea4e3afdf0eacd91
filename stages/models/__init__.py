"""Model families: a pipeline graph plus how to build each stage's engine from one checkpoint.

A family is an object (usually a module-level `family = MyFamily()`) with:

- `name`: the registry key, e.g. "llm", "qwen2_5_omni".
- `pipelines`: variants by name ("default", "thinker-only", ...); `.pipeline` is the default.
- `model_types`: the `config.json` `model_type`s (or diffusers `_class_name`s in
  `model_index.json`) it serves, for auto-detection from a checkpoint directory.
- `uses_torch` (default True): False for a family whose engines never touch torch (echo), so its
  replica hosts start without importing it.
- `build_engine(stage_name, model_dir, stage_deploy) -> StageEngine`: loads one stage on
  the receiving host. Heavy imports (torch, transformers) happen here, never at import.
- `prepare_request(request, model_dir, stage_deploy) -> StageRequest` (optional): the entry stage's
  input processing on the receiving host, with that stage's deploy config — chat template, multimodal processor — turning
  `messages` / `prompt` into what the engine consumes. The default returns it unchanged.

Drivers (the in-process orchestrator, the replica host) build engines with
`load_stage_engine(...)`, which wraps the entry stage's engine so that `prepare_request`
runs off the step loop (stages/models/preparing_engine.py). Importing this module imports no torch: the registry holds
"module:attr" strings resolved on first use.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

from stages.engine import StageEngine
from stages.errors import ConfigError
from stages.models.preparing_engine import PreparingEngine
from stages.protocol import StageRequest

if TYPE_CHECKING:
    from stages.config import PipelineConfig, StageDeployConfig

DEFAULT_VARIANT = "default"

FAMILIES: dict[str, str] = {
    "llm": "stages.models.llm:family",
    "echo": "stages.echo:family",
    "qwen2_5_omni": "stages.models.qwen2_5_omni:family",
    "qwen3_omni": "stages.models.qwen3_omni:family",
    "text_to_image": "stages.models.text_to_image:family",
    "text_to_video": "stages.models.text_to_video:family",
    "ar_to_dit": "stages.models.ar_to_dit:family",
}
"""Family name -> "module:attr" of the family object. Each area adds its own line."""

MODEL_TYPES: dict[str, str] = {
    "qwen2": "llm",
    "qwen3": "llm",
    "llama": "llm",
    "mistral": "llm",
    "qwen2_5_omni": "qwen2_5_omni",
    "qwen3_omni_moe": "qwen3_omni",
}
"""Checkpoint `model_type` (or diffusers `_class_name`) -> family, used when a family
object is not imported yet. Families may also list theirs in `model_types`."""


class ModelFamily:
    """Base class for families. Subclasses set `name`, `pipelines` and implement `build_engine`."""

    name: str = ""
    pipelines: dict[str, PipelineConfig] = {}
    model_types: tuple[str, ...] = ()
    uses_torch: bool = True
    """Whether its engines run on torch: a replica host imports it (seconds of CPU) and sets its
    threads only then."""

    @property
    def pipeline(self) -> PipelineConfig:
        return self.pipelines[DEFAULT_VARIANT]

    def pipeline_named(self, variant: str | None = None) -> PipelineConfig:
        """The pipeline variant by name (None: the default); the PipelineConfig's own name works too."""
        if variant is None:
            return self.pipeline
        if variant in self.pipelines:
            return self.pipelines[variant]
        for pipeline in self.pipelines.values():
            if pipeline.name == variant:
                return pipeline
        raise ConfigError(
            "pipeline", f"family {self.name!r} has no pipeline {variant!r} (has {sorted(self.pipelines)})"
        )

    def build_engine(self, stage_name: str, model_dir: str | Path, stage_deploy: StageDeployConfig) -> StageEngine:
        raise NotImplementedError

    def prepare_request(
        self, request: StageRequest, model_dir: str | Path, stage_deploy: StageDeployConfig
    ) -> StageRequest:
        return request

    default_voice: str | None = None
    """The voice a request that names none speaks with."""

    def voices(self, model_dir: str | Path) -> list[str]:
        """The named voices (speakers) of this checkpoint's audio stages; none when it does not speak
        (`python -m stages.models.voices` publishes them to the control plane)."""
        return []

    takes_voice_reference: bool = False
    """Whether a custom voice can be made from a reference clip (`voice_reference`)."""

    def voice_reference(self, model_dir: str | Path, samples, sample_rate: int):
        """The `stages.voice_conditioning.VoiceConditioning` a clip (mono float32 samples) gives on this
        checkpoint (`python -m stages.models.voice_reference` runs it for the control plane)."""
        raise ConfigError("voice", f"the {self.name} family cannot make a voice from a reference clip")

    def voice_reference_min_s(self, model_dir: str | Path) -> float:
        """The shortest reference clip this checkpoint takes, in seconds."""
        return 0.0


def get_family(name: str) -> ModelFamily:
    """The family registered under `name` (imports its module on first use)."""
    if name not in FAMILIES:
        raise ConfigError("family", f"unknown model family {name!r} (known: {sorted(FAMILIES)})")
    module_name, _, attr = FAMILIES[name].partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name and module_name.startswith(error.name):
            raise ConfigError(
                "family", f"model family {name!r} is registered but {module_name} does not exist yet"
            ) from None
        raise
    return getattr(module, attr)


def detect_family(model_dir: str | Path) -> str:
    """Which family serves a checkpoint directory, from its config.json / model_index.json."""
    model_dir = Path(model_dir)
    kind = _checkpoint_kind(model_dir)
    if kind in MODEL_TYPES:
        return MODEL_TYPES[kind]
    for name in FAMILIES:
        try:
            family = get_family(name)
        except (ConfigError, ImportError):  # one family that cannot load must not hide the others
            continue
        if kind in family.model_types:
            return name
    raise ConfigError("family", f"no model family serves {kind!r} checkpoints ({model_dir}); pass family=...")


def _checkpoint_kind(model_dir: Path) -> str:
    config_path = model_dir / "config.json"
    index_path = model_dir / "model_index.json"
    if config_path.is_file():
        config = json.loads(config_path.read_text())
        if "omnistage_family" in config:
            return config["omnistage_family"]
        return config.get("model_type", "")
    if index_path.is_file():
        return json.loads(index_path.read_text()).get("_class_name", "")
    raise ConfigError("model", f"{model_dir} has neither config.json nor model_index.json")


def load_stage_engine(
    family: ModelFamily | str,
    stage_name: str,
    model_dir: str | Path,
    stage_deploy: StageDeployConfig,
    pipeline: PipelineConfig | None = None,
) -> StageEngine:
    """Build one stage's engine; the entry stage's engine also runs `family.prepare_request`."""
    if isinstance(family, str):
        family = get_family(family)
    pipeline = pipeline or family.pipeline
    engine = family.build_engine(stage_name, model_dir, stage_deploy)
    needs_preparing = type(family).prepare_request is not ModelFamily.prepare_request
    if pipeline.entry_stage.name == stage_name and needs_preparing:
        return PreparingEngine(engine, family, model_dir, stage_deploy)
    return engine
