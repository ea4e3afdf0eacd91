from django.contrib.staticfiles.views import serve as serve_static
from django.urls import path, re_path

from console.views import (
    audit,
    auth,
    catalog,
    dashboard,
    deployments,
    devices,
    history,
    keys,
    models,
    playgrounds,
    voice,
)
from console.views import revisions as revision_views
from console.views.deployment_charts import deployment_charts_data

app_name = "console"
urlpatterns = [
    path("login/", auth.SignInView.as_view(), name="login"),
    path("logout/", auth.SignOutView.as_view(), name="logout"),
    path("", dashboard.dashboard, name="dashboard"),
    path("dashboard/panel/", dashboard.dashboard_panel, name="dashboard-panel"),
    path("catalog/", catalog.catalog, name="catalog"),
    path("catalog/<slug:pipeline>/deploy/", catalog.deploy, name="deploy"),
    path("models/", models.models, name="models"),
    path("deployments/", deployments.deployments, name="deployments"),
    path("deployments/panel/", deployments.deployments_panel, name="deployments-panel"),
    path("deployments/<slug:name>/", deployments.deployment_detail, name="deployment"),
    path("deployments/<slug:name>/panel/", deployments.deployment_panel, name="deployment-panel"),
    path("deployments/<slug:name>/charts/", deployment_charts_data, name="deployment-charts"),
    path("deployments/<slug:name>/scale/", deployments.deployment_scale_view, name="deployment-scale"),
    path("deployments/<slug:name>/stop/", deployments.deployment_stop_view, name="deployment-stop"),
    path("deployments/<slug:name>/start/", deployments.deployment_start_view, name="deployment-start"),
    path("deployments/<slug:name>/delete/", deployments.deployment_delete_view, name="deployment-delete"),
    path("deployments/<slug:name>/edit/", revision_views.deployment_edit, name="deployment-edit"),
    path("deployments/<slug:name>/rollback/", revision_views.deployment_rollback_view, name="deployment-rollback"),
    path("devices/", devices.devices, name="devices"),
    path("devices/panel/", devices.devices_panel, name="devices-panel"),
    path("playground/voice/", voice.voice_playground, name="voice"),
    path("playground/voice/code/", voice.voice_code, name="voice-code"),
    path("playground/video/api-jobs/", playgrounds.video_api_jobs, name="video-api-jobs"),
    path("playground/<slug:mode>/", playgrounds.playground, name="playground"),
    path("history/", history.history, name="history"),
    path("history/<str:request_id>/", history.history_detail, name="history-detail"),
    path("history/<str:request_id>/artifacts/<uuid:artifact_id>/", history.artifact_file, name="artifact"),
    path("keys/", keys.keys, name="keys"),
    path("keys/<int:key_id>/revoke/", keys.key_revoke, name="key-revoke"),
    path("usage/", keys.usage, name="usage"),
    path("audit/", audit.audit, name="audit"),
    # The console's own static files (htmx, CSS, ES modules), served by Django so that `make run`
    # needs no web server in front; a distributed install may serve STATIC_ROOT from a proxy instead.
    re_path(r"^static/(?P<path>.*)$", serve_static, {"insecure": True}),
]
