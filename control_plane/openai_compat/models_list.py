"""GET /v1/models and GET /v1/models/{model}: the RUNNING deployments the caller may use."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.http import JsonResponse

from control_plane.accounts.permissions import deployment_allowed
from control_plane.deployments.queries import running_deployments
from control_plane.openai_compat.access import authenticate, served_deployment
from control_plane.openai_compat.errors import openai_endpoint


def model_object(deployment) -> dict:
    config = deployment.pipeline.config or {}
    outputs = [stage.get("output") for stage in config.get("stages", []) if stage.get("output")]
    return {
        "id": deployment.name,
        "object": "model",
        "created": int(deployment.created_at.timestamp()),
        "owned_by": "omnistage",
        "pipeline": deployment.pipeline.name,
        "modalities": list(dict.fromkeys(outputs)),
    }


def _running() -> list:
    return list(running_deployments())


@openai_endpoint("GET")
async def model_list(request):
    caller = await authenticate(request)
    deployments = await sync_to_async(_running)()
    data = [model_object(d) for d in deployments if deployment_allowed(caller.api_key, d)]
    return JsonResponse({"object": "list", "data": data})


@openai_endpoint("GET")
async def model_detail(request, model: str):
    caller = await authenticate(request)
    served = await served_deployment(caller, model)
    return JsonResponse(model_object(served.deployment))
