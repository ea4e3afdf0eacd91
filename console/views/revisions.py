"""The deployment pages' edit form and revision history (rollback)."""

from django.contrib import messages
from django.db import transaction
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from console.access import manages_deployment
from console.edit_form import EditForm
from console.pages import render_page
from control_plane.audit.models import Action
from control_plane.audit.services import audit_record
from control_plane.deployments.queries import deployment_list
from control_plane.deployments.revisions import DeploymentBusy, deployment_change, deployment_rollback
from control_plane.deployments.services import DeploymentInvalid, pipeline_config_of


def _deployment(name: str):
    return get_object_or_404(deployment_list(), name=name)


def _audit_change(request, deployment, revision) -> None:
    details = {"revision": revision.number, "diff": revision.diff}
    if revision.rollback_of is not None:
        details["rollback_of"] = revision.rollback_of
    audit_record(request, Action.DEPLOYMENT_CHANGE, deployment, details)


def revision_history(deployment) -> list:
    return list(deployment.revisions.select_related("created_by").order_by("-number"))


@manages_deployment
@transaction.atomic
def deployment_edit(request, name: str):
    deployment = _deployment(name)
    config = pipeline_config_of(deployment.pipeline)
    form = EditForm(
        request.POST or None, pipeline=config, family=deployment.pipeline.family, current=deployment.deploy_config
    )
    if request.method == "POST" and form.is_valid():
        try:
            revision = deployment_change(deployment=deployment, deploy_config=form.deploy_config(), user=request.user)
        except DeploymentInvalid as error:
            form.add_service_error(error)
        except DeploymentBusy as error:
            form.add_error(None, f"{error}; wait for it to finish.")
        else:
            _audit_change(request, deployment, revision)
            messages.success(request, f"Revision {revision.number} saved: {_summary(revision)}.")
            return redirect("console:deployment", name=name)
    context = {"deployment": deployment, "form": form, "revisions": revision_history(deployment), "can_manage": True}
    status = 400 if request.method == "POST" else 200
    return render_page(request, "console/deployment_edit.html", context, active="deployments", status=status)


@require_POST
@manages_deployment
@transaction.atomic
def deployment_rollback_view(request, name: str):
    deployment = _deployment(name)
    try:
        number = int(request.POST.get("revision", ""))
        revision = deployment_rollback(deployment=deployment, number=number, user=request.user)
    except ValueError:
        messages.error(request, "Revision: enter a revision number.")
    except DeploymentInvalid as error:
        messages.error(request, f"{error.field.rpartition('.')[2].capitalize()}: {error.message}")
    except DeploymentBusy as error:
        messages.error(request, f"{error}; wait for it to finish.")
    else:
        _audit_change(request, deployment, revision)
        messages.success(request, f"Rolling back to revision {number} (as revision {revision.number}).")
    return redirect("console:deployment", name=name)


def _summary(revision) -> str:
    paths = [change["path"] for change in revision.diff]
    return ", ".join(paths[:4]) + (f" and {len(paths) - 4} more" if len(paths) > 4 else "")
