from django.db import transaction
from django.shortcuts import get_object_or_404, redirect

from console.access import signed_in
from console.catalog import MODALITIES, CatalogQuery, catalog_families
from console.deploy_form import DeployForm, checkpoint_choices
from console.graph import stage_graph
from console.pages import render_page
from control_plane.audit.models import Action
from control_plane.audit.services import audit_record
from control_plane.deployments.apis import resolve_model_dir
from control_plane.deployments.models import Pipeline
from control_plane.deployments.services import DeploymentInvalid, deployment_create, pipeline_config_of


@signed_in
def catalog(request):
    query = CatalogQuery.from_params(request.GET)
    context = {"families": catalog_families(query), "query": query, "modalities": MODALITIES}
    return render_page(request, "console/catalog.html", context, active="catalog")


@signed_in
@transaction.atomic
def deploy(request, pipeline: str):
    pipeline = get_object_or_404(Pipeline, name=pipeline)
    config = pipeline_config_of(pipeline)
    form = DeployForm(request.POST or None, pipeline=config, family=pipeline.family)
    if request.method == "POST" and form.is_valid():
        try:
            deployment = deployment_create(
                name=form.cleaned_data["name"],
                pipeline=pipeline,
                model_dir=resolve_model_dir(form.cleaned_data["model_dir"]),
                deploy_config=form.deploy_config(),
                user=request.user,
            )
        except DeploymentInvalid as error:
            form.add_service_error(error)
        else:
            audit_record(request, Action.DEPLOYMENT_CREATE, deployment, {"deploy_config": deployment.deploy_config})
            return redirect("console:deployment", name=deployment.name)
    context = {"pipeline": pipeline, "config": config, "graph": stage_graph(config), "form": form}
    context["checkpoints"] = checkpoint_choices()
    status = 400 if request.method == "POST" else 200
    return render_page(request, "console/deploy.html", context, active="catalog", status=status)
