"""The edit form of a deployed deployment: the deploy form's config fields (no name, no checkpoint),
filled in with the config of the revision serving. Knobs the form does not show keep their values."""

from __future__ import annotations

import copy
import json

from console.deploy_form import ENGINE_KNOBS, DeployForm
from stages.config import PipelineConfig

STAGE_KNOBS = ("pool", "replicas", "device", "backend", *ENGINE_KNOBS, "options", "sampling")
DEPLOYMENT_KNOBS = ("max_queue", "request_timeout_s", "max_audio_seconds")


class EditForm(DeployForm):
    def __init__(self, *args, pipeline: PipelineConfig, family: str, current: dict, **kwargs):
        super().__init__(*args, pipeline=pipeline, family=family, **kwargs)
        del self.fields["name"], self.fields["model_dir"]
        self.current = current
        for knob in DEPLOYMENT_KNOBS:
            if knob in self.fields and current.get(knob) is not None:
                self.fields[knob].initial = current[knob]
        for stage in pipeline.stages:
            stage_config = current.get("stages", {}).get(stage.name, {})
            for knob in STAGE_KNOBS:
                if knob not in stage_config or stage_config[knob] is None:
                    continue
                value = stage_config[knob]
                self.fields[f"stages.{stage.name}.{knob}"].initial = (
                    json.dumps(value) if knob in ("options", "sampling") else value
                )

    def deploy_config(self) -> dict:
        """The current config with the form's knobs over it (options and sampling replaced whole)."""
        edited = copy.deepcopy(self.current)
        form_config = super().deploy_config()
        for knob in DEPLOYMENT_KNOBS:
            if knob in form_config:
                edited[knob] = form_config[knob]
            elif knob in self.fields:
                edited[knob] = None  # left empty: the default
        stages = edited.setdefault("stages", {})
        for stage in self.pipeline.stages:
            knobs = dict(form_config["stages"][stage.name])
            if stages.get(stage.name, {}).get("backend") is None and knobs["backend"] == stage.default_backend:
                knobs["backend"] = None  # the stage's default, as it was: not a change
            stages[stage.name] = {**stages.get(stage.name, {}), **knobs}
        return edited
