"""Who calls, and which deployment (`model`) they may call."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from asgiref.sync import sync_to_async

from control_plane.accounts.permissions import check_access, deployment_allowed
from control_plane.accounts.principal import arequest_principal
from control_plane.deployments.models import Deployment, DeploymentState
from control_plane.openai_compat.errors import ApiError
from stages.config import DeployConfig, PipelineConfig, load_deploy_config, load_pipeline_config
from stages.errors import ConfigError

INFERENCE = "inference"


@dataclass(frozen=True)
class Caller:
    user: object
    api_key: object | None


@dataclass(frozen=True)
class Served:
    deployment: Deployment
    pipeline: PipelineConfig

    @property
    def name(self) -> str:
        return self.deployment.name

    @cached_property
    def deploy(self) -> DeployConfig:
        return load_deploy_config(self.deployment.deploy_config or {}, self.pipeline)

    @property
    def output_modalities(self) -> list[str]:
        return self.pipeline.output_modalities


async def authenticate(request) -> Caller:
    """The caller holding the inference scope; AccessDenied (401/403) otherwise."""
    user, api_key = await arequest_principal(request)
    check_access(user, api_key, INFERENCE)
    return Caller(user, api_key)


def _deployment_named(name: str) -> Deployment | None:
    return Deployment.objects.select_related("pipeline").filter(name=name).first()


async def served_deployment(caller: Caller, model: str, check: Callable[[Served], None] | None = None) -> Served:
    """The RUNNING deployment named `model` that the caller may use.

    404 when it does not exist (or the key may not see it: a key's allow-list hides the
    others), 503 with Retry-After when it exists but is not RUNNING. `check` runs before the
    state check, so an endpoint the pipeline can never serve answers 400 whatever its state.
    """
    deployment = await sync_to_async(_deployment_named)(model)
    if deployment is None or not deployment_allowed(caller.api_key, deployment):
        raise ApiError(
            404,
            f"The model '{model}' does not exist or you do not have access to it.",
            param="model",
            code="model_not_found",
        )
    check_access(caller.user, caller.api_key, INFERENCE, deployment)
    try:
        pipeline = load_pipeline_config(deployment.pipeline.config)
    except ConfigError as error:
        raise ApiError(500, f"The model's pipeline configuration is invalid: {error}", code="bad_pipeline") from None
    served = Served(deployment, pipeline)
    if check is not None:
        check(served)
    if deployment.state != DeploymentState.RUNNING:
        retry = "10" if deployment.state in (DeploymentState.PENDING, DeploymentState.SCHEDULED) else "5"
        raise ApiError(
            503,
            f"The model '{model}' is not running (state {deployment.state}"
            + (f": {deployment.state_reason}" if deployment.state_reason else "")
            + "). Retry later.",
            param="model",
            code="model_not_ready",
            headers={"Retry-After": retry},
        )
    return served
