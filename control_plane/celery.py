"""The Celery app: `celery -A control_plane worker -Q cpu`.

Configuration comes from Django settings (CELERY_*), read lazily: a worker process never
sets Django up, and the tasks it runs (in `workers/`) never touch the database.
The control plane sends tasks by name and never imports `workers`.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "control_plane.settings")

app = Celery("omnistage", include=["workers.tasks"])
app.config_from_object("django.conf:settings", namespace="CELERY")
