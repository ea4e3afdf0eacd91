"""Sync the model registry with the checkpoints under OMNISTAGE_MODELS_DIR."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from control_plane.registry.discovery import DiscoveryFailed, discover_models
from control_plane.registry.models import Model
from control_plane.registry.services import models_sync


class Command(BaseCommand):
    help = "Record every checkpoint under the models folder as a Model row (and drop rows of vanished ones)."

    def handle(self, *args, **options):
        try:
            result = models_sync(discover_models())
        except DiscoveryFailed as error:
            raise CommandError(str(error)) from None
        self.stdout.write(
            f"models: {result.created} created, {result.updated} updated, {result.removed} removed, "
            f"{Model.objects.count()} in all"
        )
