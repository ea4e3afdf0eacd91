from django.contrib import messages
from django.db import transaction
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from console.access import can_deploy, can_manage_deployment, manages_deployment, signed_in
from console.deployment_rows import deployment_row
from console.graph import stage_graph
from console.load_phases import with_load_phases
from console.pages import render_page
from console.replica_logs import replica_log_tails
from console.scaling import scaling_notices, scaling_requested
from console.views.revisions import revision_history
from control_plane.audit.models import Action
from control_plane.audit.services import audit_record
from control_plane.deployments.queries import deployment_list
from control_plane.deployments.revisions import DeploymentBusy
from control_plane.deployments.services import (
    DeploymentInvalid,
    deployment_delete,
    deployment_scale,
    deployment_start,
    deployment_stop,
    pipeline_config_of,
)


def _deployment(name: str):
    return get_object_or_404(deployment_list(), name=name)


def _rows() -> list[dict]:
    return [deployment_row(deployment) for deployment in deployment_list().order_by("name")]


def _context(request, deployment) -> dict:
    replicas: dict[str, list] = {}
    for replica in deployment.replicas.all():
        replicas.setdefault(replica.stage, []).append(replica)
    with_load_phases(replica for stage_replicas in replicas.values() for replica in stage_replicas)
    config = pipeline_config_of(deployment.pipeline)
    stage_config = deployment.deploy_config.get("stages", {})
    stages = [
        {"name": stage.name, "kind": stage.kind, "replicas": replicas.get(stage.name, []),
         "desired": stage_config.get(stage.name, {}).get("replicas", 1)}
        for stage in config.stages
    ]  # fmt: skip
    return {
        "deployment": deployment,
        "graph": stage_graph(config, replicas),
        "stages": stages,
        "logs": replica_log_tails(replica for stage in stages for replica in stage["replicas"]),
        "can_manage": can_manage_deployment(request.user, deployment),
        "scaling": scaling_notices(request.session, deployment),
    }


@signed_in
def deployments(request):
    context = {"rows": _rows()}
    return render_page(request, "console/deployments.html", context, active="deployments")


@signed_in
def deployments_panel(request):
    """The live part of the deployments list, polled by htmx."""
    context = {"rows": _rows(), "can_deploy": can_deploy(request.user)}
    return render(request, "console/partials/deployments_table.html", context)


@signed_in
def deployment_detail(request, name: str):
    deployment = _deployment(name)
    context = {**_context(request, deployment), "revisions": revision_history(deployment)}
    return render_page(request, "console/deployment.html", context, active="deployments")


@signed_in
def deployment_panel(request, name: str):
    return render(request, "console/partials/deployment_panel.html", _context(request, _deployment(name)))


@require_POST
@manages_deployment
@transaction.atomic
def deployment_scale_view(request, name: str):
    deployment = _deployment(name)
    stage = request.POST.get("stage", "")
    try:
        replicas = int(request.POST.get("replicas", ""))
    except ValueError:
        messages.error(request, "Replicas: enter a whole number.")
        return redirect("console:deployment", name=name)
    try:
        deployment_scale(deployment=deployment, stage=stage, replicas=replicas, user=request.user)
    except DeploymentInvalid as error:
        messages.error(request, f"{error.field.rpartition('.')[2].capitalize()}: {error.message}")
    except DeploymentBusy as error:
        messages.error(request, f"{error}; wait for it to finish.")
    else:  # the panel shows the scale under way until it has landed
        audit_record(request, Action.DEPLOYMENT_SCALE, deployment, {"stage": stage, "replicas": replicas})
        scaling_requested(request.session, deployment.name, stage, replicas)
    return redirect("console:deployment", name=name)


@require_POST
@manages_deployment
@transaction.atomic
def deployment_stop_view(request, name: str):
    audit_record(request, Action.DEPLOYMENT_STOP, deployment_stop(deployment=_deployment(name)))
    messages.success(request, f"Stopping {name}.")
    return redirect("console:deployment", name=name)


@require_POST
@manages_deployment
@transaction.atomic
def deployment_start_view(request, name: str):
    audit_record(request, Action.DEPLOYMENT_START, deployment_start(deployment=_deployment(name)))
    messages.success(request, f"Starting {name}.")
    return redirect("console:deployment", name=name)


@require_POST
@manages_deployment
@transaction.atomic
def deployment_delete_view(request, name: str):
    deployment = _deployment(name)
    audit_record(request, Action.DEPLOYMENT_DELETE, deployment)  # while it still has its id
    deployment_delete(deployment=deployment)
    messages.success(request, f"Deleted {name}.")
    return redirect("console:dashboard")
