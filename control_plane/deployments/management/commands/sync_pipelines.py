"""Load the pipeline families from `stages.models` into the database (in a subprocess, so
this process never imports torch)."""

from __future__ import annotations

import json
import subprocess
import sys

from django.core.management.base import BaseCommand, CommandError

from control_plane.deployments.models import Pipeline
from control_plane.deployments.pipeline_revisions import pipeline_revision_record


def discover_pipelines() -> list[dict]:
    result = subprocess.run(
        [sys.executable, "-m", "stages.models"], capture_output=True, text=True, timeout=300, check=False
    )
    if result.returncode != 0:
        raise CommandError(f"could not list the pipeline families:\n{result.stderr.strip()}")
    return json.loads(result.stdout)


def pipeline_sync(found: list[dict]) -> tuple[int, int]:
    created = updated = 0
    for item in found:
        pipeline = Pipeline.objects.filter(name=item["name"]).first()
        if pipeline is None:
            pipeline = Pipeline.objects.create(
                name=item["name"],
                family=item["family"],
                variant=item["variant"],
                description=item["description"],
                config=item["config"],
            )
            pipeline_revision_record(pipeline, None, source="sync")
            created += 1
        elif pipeline.config != item["config"] or pipeline.description != item["description"]:
            previous = pipeline.config
            pipeline.config = item["config"]
            pipeline.description = item["description"]
            pipeline.version += 1
            pipeline.save()
            pipeline_revision_record(pipeline, previous, source="sync")
            updated += 1
    return created, updated


class Command(BaseCommand):
    help = "Sync pipeline definitions from the model families."

    def handle(self, *args, **options):
        created, updated = pipeline_sync(discover_pipelines())
        self.stdout.write(f"pipelines: {created} created, {updated} updated, {Pipeline.objects.count()} in all")
