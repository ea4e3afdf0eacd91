from django.shortcuts import get_object_or_404, redirect

from console.access import manages_deployments, signed_in
from console.deploy_form import DeployForm, checkpoint_choices
from console.graph import stage_graph
from console.pages import render_page
from control_plane.deployments.apis import resolve_model_dir
from control_plane.deployments.models import Pipeline
from control_plane.deployments.queries import pipeline_list
from control_plane.deployments.services import DeploymentInvalid, deployment_create, pipeline_config_of
from control_plane.registry.queries import models_by_family


@signed_in
def catalog(request):
    families: dict[str, list] = {}
    models = models_by_family()
    for pipeline in pipeline_list():
        config = pipeline_config_of(pipeline)
        families.setdefault(pipeline.family, []).append(
            {
                "pipeline": pipeline,
                "config": config,
                "graph": stage_graph(config),
                "models": models.get(pipeline.family, []),
            }
        )
    return render_page(request, "console/catalog.html", {"families": families}, active="catalog")


@manages_deployments
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
            return redirect("console:deployment", name=deployment.name)
    context = {"pipeline": pipeline, "config": config, "graph": stage_graph(config), "form": form}
    context["checkpoints"] = checkpoint_choices()
    status = 400 if request.method == "POST" else 200
    return render_page(request, "console/deploy.html", context, active="catalog", status=status)
