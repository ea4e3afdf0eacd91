"""GET /v1/models and GET /v1/models/{model}: the RUNNING deployments the caller may use.

Beside OpenAI's fields: the pipeline, its output modalities, and its stages in the order
`sampling_params_list` takes them (name, kind, output), so a client can address one stage."""

from __future__ import annotations

from django.http import JsonResponse

from control_plane import invalidation
from control_plane.accounts.permissions import deployment_allowed
from control_plane.deployments.queries import running_deployments
from control_plane.deployments.served_cache import TOPIC, ttl_s
from control_plane.inference.errors import openai_endpoint
from control_plane.inference.targets import served_deployment
from control_plane.openai_compat.access import authenticate
from control_plane.orm_threads import orm_in_thread

RUNNING = "running"
running_cache = invalidation.InvalidatedCache(TOPIC, ttl_s)  # one entry: the running deployments' model objects


def model_object(deployment) -> dict:
    config = deployment.pipeline.config or {}
    stages = sorted(config.get("stages", []), key=lambda stage: stage.get("id", 0))
    outputs = [stage.get("output") for stage in stages if stage.get("output")]
    return {
        "id": deployment.name,
        "object": "model",
        "created": int(deployment.created_at.timestamp()),
        "owned_by": "omnistage",
        "pipeline": deployment.pipeline.name,
        "modalities": list(dict.fromkeys(outputs)),
        "stages": [{key: stage.get(key) for key in ("name", "kind", "output")} for stage in stages],
    }


def _running(_name: str) -> list[dict]:
    return [model_object(deployment) for deployment in running_deployments()]


@openai_endpoint("GET")
async def model_list(request):
    caller = await authenticate(request)
    models = running_cache.get(RUNNING) or await orm_in_thread(running_cache.load)(RUNNING, _running, lambda _: True)
    data = [model for model in models if deployment_allowed(caller.api_key, model["id"])]
    return JsonResponse({"object": "list", "data": data})


@openai_endpoint("GET")
async def model_detail(request, model: str):
    caller = await authenticate(request)
    served = await served_deployment(caller, model)
    return JsonResponse(model_object(served.deployment))
