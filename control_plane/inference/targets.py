"""Who calls, and which deployment (`model`) they may call: the first check of every request run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from control_plane.accounts.permissions import check_access, deployment_allowed
from control_plane.deployments.model_paths import redact_paths
from control_plane.deployments.models import Deployment, DeploymentState
from control_plane.deployments.served_cache import served_cache
from control_plane.inference.errors import ApiError
from control_plane.orm_threads import orm_in_thread
from stages.config import DeployConfig, PipelineConfig, load_deploy_config, load_pipeline_config
from stages.errors import ConfigError

INFERENCE = "inference"


@dataclass(frozen=True)
class Caller:
    """A signed-in user (console, realtime) or an API key's owner and key."""

    user: object
    api_key: object | None = None
    trace: str = ""
    """The client's W3C `traceparent`, if it sent one: the request's trace continues it."""


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

    @property
    def audio_token_stages(self) -> list[str]:
        """Stages whose output tokens are audio tokens: every non-entry stage that emits no text,
        image or video (a talker's codec tokens, a vocoder's)."""
        entry = self.pipeline.entry_stage.id
        return [s.name for s in self.pipeline.stages if s.id != entry and s.output not in ("text", "image", "video")]


@dataclass(frozen=True)
class Lookup:
    """A deployment by name as the database has it, with its pipeline parsed (or why not)."""

    deployment: Deployment | None
    pipeline: PipelineConfig | None = None
    pipeline_error: str = ""

    @property
    def servable(self) -> bool:
        return self.pipeline is not None and self.deployment.state == DeploymentState.RUNNING

    @cached_property
    def served(self) -> Served:
        return Served(self.deployment, self.pipeline)  # kept with the lookup: its deploy config is parsed once


def _lookup(name: str) -> Lookup:
    deployment = Deployment.objects.select_related("pipeline").filter(name=name).first()
    if deployment is None:
        return Lookup(None)
    try:
        return Lookup(deployment, load_pipeline_config(deployment.pipeline.config))
    except ConfigError as error:
        return Lookup(deployment, pipeline_error=str(error))


async def lookup_deployment(name: str) -> Lookup:
    """From this process's cache when the deployment is RUNNING (deployments/served_cache.py)."""
    return served_cache.get(name) or await orm_in_thread(served_cache.load)(name, _lookup, Lookup.servable.fget)


async def served_deployment(caller: Caller, model: str, check: Callable[[Served], None] | None = None) -> Served:
    """The RUNNING deployment named `model` that the caller may use.

    404 when it does not exist (or the key may not see it: a key's allow-list hides the
    others) and when it is stopped on purpose (as OpenAI answers for a model that is not
    available: clients do not retry), 503 with Retry-After when it exists but is not RUNNING
    yet (loading, restarting, no replica). `check` runs before the
    state check, so an endpoint the pipeline can never serve answers 400 whatever its state.
    """
    found = await lookup_deployment(model)
    deployment = found.deployment
    if deployment is None or not deployment_allowed(caller.api_key, deployment):
        raise ApiError(
            404,
            f"The model '{model}' does not exist or you do not have access to it.",
            param="model",
            code="model_not_found",
        )
    check_access(caller.user, caller.api_key, INFERENCE, deployment)
    if found.pipeline is None:
        message = f"The model's pipeline configuration is invalid: {found.pipeline_error}"
        raise ApiError(500, message, code="bad_pipeline")
    served = found.served
    if check is not None:
        check(served)
    if deployment.desired_state == Deployment.Desired.STOPPED:
        raise ApiError(
            404,
            f"The model '{model}' is stopped; an operator must start it before it serves requests.",
            param="model",
            code="model_not_found",
        )
    if deployment.state != DeploymentState.RUNNING:
        retry = "10" if deployment.state in (DeploymentState.PENDING, DeploymentState.SCHEDULED) else "5"
        raise ApiError(
            503,
            f"The model '{model}' is not running (state {deployment.state}"
            + (f": {redact_paths(deployment.state_reason)}" if deployment.state_reason else "")
            + "). Retry later.",
            param="model",
            code="model_not_ready",
            headers={"Retry-After": retry},
        )
    return served
