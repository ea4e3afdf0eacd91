"""The demo deployments `make run` creates on first start, on locally built tiny checkpoints."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from control_plane.deployments.models import Deployment, Pipeline
from control_plane.deployments.services import deployment_create

# The tiny checkpoints are random: their talkers never sample end-of-speech, so the demo
# caps the codec tokens a reply may take (150 codes = 3 s of speech at 50 codes/s).
DEMO_DEPLOY_CONFIGS = {
    "qwen2_5_omni": {"stages": {"talker": {"sampling": {"max_tokens": 150}}}},
    "qwen3_omni": {"stages": {"talker": {"sampling": {"max_tokens": 40}}}},
}


@dataclass(frozen=True)
class DemoDeployment:
    name: str
    pipeline: str
    checkpoint: str


def demo_deployments() -> list[DemoDeployment]:
    return [DemoDeployment(*item) for item in settings.DEMO_DEPLOYMENTS]


def build_checkpoints(names: list[str], out=sys.stdout) -> None:
    """Build the tiny checkpoints that are missing (in a subprocess: the control plane never imports torch)."""
    if not names:
        return
    argv = [sys.executable, "-m", "stages.tiny", str(settings.MODELS_DIR), "--only", *names]
    result = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"building tiny checkpoints {names} failed (exit {result.returncode})")


def create_demo_deployments(user, out=sys.stdout) -> list[Deployment]:
    demos = demo_deployments()
    build_checkpoints(sorted({demo.checkpoint for demo in demos}), out=out)
    created = []
    for demo in demos:
        if Deployment.objects.filter(name=demo.name).exists():
            continue
        pipeline = Pipeline.objects.get(name=demo.pipeline)
        model_dir = str(Path(settings.MODELS_DIR) / demo.checkpoint)
        created.append(
            deployment_create(
                name=demo.name,
                pipeline=pipeline,
                model_dir=model_dir,
                deploy_config=DEMO_DEPLOY_CONFIGS.get(demo.pipeline, {}),
                user=user,
            )
        )
    return created
