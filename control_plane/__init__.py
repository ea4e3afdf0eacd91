"""The Omnistage control plane: the Django project and its apps."""

from control_plane.celery import app as celery_app

__all__ = ["celery_app"]
