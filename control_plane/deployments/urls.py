from django.urls import path

from control_plane.deployments import apis

urlpatterns = [
    path("pipelines/", apis.PipelineListApi.as_view(), name="pipeline-list"),
    path("pipelines/<slug:name>/", apis.PipelineDetailApi.as_view(), name="pipeline-detail"),
    path("deployments/", apis.DeploymentListApi.as_view(), name="deployment-list"),
    path("deployments/<slug:name>/", apis.DeploymentDetailApi.as_view(), name="deployment-detail"),
    path("deployments/<slug:name>/scale/", apis.DeploymentScaleApi.as_view(), name="deployment-scale"),
    path("deployments/<slug:name>/stop/", apis.DeploymentStopApi.as_view(), name="deployment-stop"),
    path("deployments/<slug:name>/start/", apis.DeploymentStartApi.as_view(), name="deployment-start"),
    path("replicas/", apis.ReplicaListApi.as_view(), name="replica-list"),
]
