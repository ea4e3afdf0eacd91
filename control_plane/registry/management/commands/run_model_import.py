"""Run the download of one importing model to its end (started by the registry's import jobs)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from control_plane.registry.hub_import import hub_import_run
from control_plane.registry.models import Model


class Command(BaseCommand):
    requires_system_checks: list[str] = []
    help = "Download an importing model from the hub (the row says which repository) and mark it ready or failed."

    def add_arguments(self, parser):
        parser.add_argument("name")

    def handle(self, *args, name: str, **options):
        if not Model.objects.filter(name=name, status=Model.Status.IMPORTING).exists():
            raise CommandError(f"no model {name!r} is being imported")
        model = hub_import_run(name)
        self.stdout.write(f"{model.name}: {model.status} {model.status_reason}".rstrip())
