"""The deploy form: a name, a checkpoint, and per stage its placement and engine knobs.

Field names follow the dotted paths the deployments service reports errors on
(`stages.<stage>.<knob>`), so a `DeploymentInvalid` lands on the field it names.
"""

from __future__ import annotations

import json
from pathlib import Path

from django import forms
from django.conf import settings

from control_plane.deployments.services import DeploymentInvalid
from stages.audio_cap import BASE_S, CEILING_S, PER_TEXT_TOKEN_S
from stages.config import PipelineConfig, StageDeployConfig

BACKENDS = ["torch", "vllm", "generation", "diffusers", "echo"]
DTYPES = ["float32", "bfloat16", "float16"]
ENGINE_KNOBS = ("max_batch", "max_length", "dtype", "async_chunk_size")


def checkpoint_choices() -> list[str]:
    """Checkpoint directories under OMNISTAGE_MODELS_DIR (a bare name in the form refers to one)."""
    root = Path(settings.MODELS_DIR)
    if not root.is_dir():
        return []
    return sorted(child.name for child in root.iterdir() if child.is_dir() and not child.name.startswith("."))


def default_checkpoint(family: str) -> str:
    if family == "echo":
        return "-"
    guesses = {"text_to_image": "sd3", "text_to_video": "wan", "llm": "smollm2-135m-instruct", "ar_to_dit": "ar_to_dit"}
    return guesses.get(family, family)


class DeployForm(forms.Form):
    name = forms.SlugField(max_length=100, help_text="Also the `model` name in API calls.")
    model_dir = forms.CharField(
        max_length=500, label="Checkpoint", help_text="A directory, or a name under the models dir."
    )
    max_queue = forms.IntegerField(min_value=1, initial=64, label="Max queued requests")
    request_timeout_s = forms.FloatField(min_value=0.1, initial=300.0, label="Request timeout (s)")
    max_audio_seconds = forms.FloatField(
        required=False,
        min_value=0.1,
        label="Max audio per request (s)",
        help_text=f"Empty: {BASE_S:g} s + {PER_TEXT_TOKEN_S:g} s per text token, at most {CEILING_S:g} s.",
    )

    def __init__(self, *args, pipeline: PipelineConfig, family: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.pipeline = pipeline
        self.fields["name"].initial = pipeline.name.replace("_", "-")
        self.fields["model_dir"].initial = default_checkpoint(family)
        if "audio" not in pipeline.output_modalities:
            del self.fields["max_audio_seconds"]
        defaults = StageDeployConfig()
        pools = [(pool, pool) for pool in settings.KNOWN_POOLS]
        for stage in pipeline.stages:
            prefix = f"stages.{stage.name}"
            self.fields[f"{prefix}.pool"] = forms.ChoiceField(choices=pools, initial=defaults.pool, label="Pool")
            self.fields[f"{prefix}.replicas"] = forms.IntegerField(initial=defaults.replicas, label="Replicas")
            self.fields[f"{prefix}.device"] = forms.CharField(max_length=32, initial=defaults.device, label="Device")
            self.fields[f"{prefix}.backend"] = forms.ChoiceField(
                choices=[(b, b) for b in BACKENDS], initial=stage.default_backend, label="Backend"
            )
            self.fields[f"{prefix}.max_batch"] = forms.IntegerField(initial=defaults.max_batch, label="Max batch")
            self.fields[f"{prefix}.max_length"] = forms.IntegerField(initial=defaults.max_length, label="Max length")
            self.fields[f"{prefix}.dtype"] = forms.ChoiceField(
                choices=[(d, d) for d in DTYPES], initial=defaults.dtype, label="Dtype"
            )
            self.fields[f"{prefix}.async_chunk_size"] = forms.IntegerField(
                initial=defaults.async_chunk_size, label="Async chunk"
            )
            self.fields[f"{prefix}.options"] = forms.CharField(
                required=False, initial="{}", label="Options (JSON)", widget=forms.TextInput()
            )
            self.fields[f"{prefix}.sampling"] = forms.CharField(
                required=False,
                initial="{}",
                label="Default sampling (JSON)",
                help_text='Used when a request gives none, e.g. {"max_tokens": 150} for a talker.',
                widget=forms.TextInput(),
            )

    def stage_sections(self) -> list[dict]:
        """The bound fields grouped by stage, for the template."""
        sections = []
        for stage in self.pipeline.stages:
            prefix = f"stages.{stage.name}"
            placement = [self[f"{prefix}.{knob}"] for knob in ("pool", "replicas", "device", "backend")]
            engine = [self[f"{prefix}.{knob}"] for knob in (*ENGINE_KNOBS, "options", "sampling")]
            engine_errors = any(field.errors for field in engine)
            sections.append({"stage": stage, "placement": placement, "engine": engine, "engine_errors": engine_errors})
        return sections

    def clean(self):
        cleaned = super().clean()
        for stage in self.pipeline.stages:
            for knob in ("options", "sampling"):
                field = f"stages.{stage.name}.{knob}"
                raw = cleaned.get(field)
                if raw is None:
                    continue
                try:
                    value = json.loads(raw or "{}")
                except json.JSONDecodeError as error:
                    self.add_error(field, f"Not valid JSON: {error.msg}.")
                    continue
                if not isinstance(value, dict):
                    self.add_error(field, 'Must be a JSON object, e.g. {"delay_s": 0.02}.')
                    continue
                cleaned[field] = value
        return cleaned

    def deploy_config(self) -> dict:
        data = self.cleaned_data
        stages = {}
        for stage in self.pipeline.stages:
            prefix = f"stages.{stage.name}"
            stages[stage.name] = {
                knob: data[f"{prefix}.{knob}"]
                for knob in ("pool", "replicas", "device", "backend", *ENGINE_KNOBS, "options", "sampling")
            }
        config = {"stages": stages, "max_queue": data["max_queue"], "request_timeout_s": data["request_timeout_s"]}
        if data.get("max_audio_seconds") is not None:
            config["max_audio_seconds"] = data["max_audio_seconds"]
        return config

    def add_service_error(self, error: DeploymentInvalid) -> None:
        """Put the service's error on the field it names (the form-wide list if none matches)."""
        field = error.field.removeprefix("deploy_config.")
        while field and field not in self.fields:
            field = field.rpartition(".")[0]
        self.add_error(field or None, error.message)
