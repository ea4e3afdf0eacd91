from django.urls import path

from control_plane.deployments import apis, revision_apis

urlpatterns = [
    path("pipelines/", apis.PipelineListApi.as_view(), name="pipeline-list"),
    path("pipelines/<slug:name>/", apis.PipelineDetailApi.as_view(), name="pipeline-detail"),
    path(
        "pipelines/<slug:name>/revisions/",
        revision_apis.PipelineRevisionListApi.as_view(),
        name="pipeline-revision-list",
    ),
    path("deployments/", apis.DeploymentListApi.as_view(), name="deployment-list"),
    path("deployments/<slug:name>/", apis.DeploymentDetailApi.as_view(), name="deployment-detail"),
    path("deployments/<slug:name>/scale/", apis.DeploymentScaleApi.as_view(), name="deployment-scale"),
    path("deployments/<slug:name>/stop/", apis.DeploymentStopApi.as_view(), name="deployment-stop"),
    path("deployments/<slug:name>/start/", apis.DeploymentStartApi.as_view(), name="deployment-start"),
    path(
        "deployments/<slug:name>/revisions/",
        revision_apis.DeploymentRevisionListApi.as_view(),
        name="deployment-revision-list",
    ),
    path(
        "deployments/<slug:name>/rollback/", revision_apis.DeploymentRollbackApi.as_view(), name="deployment-rollback"
    ),
    path("replicas/", apis.ReplicaListApi.as_view(), name="replica-list"),
]
