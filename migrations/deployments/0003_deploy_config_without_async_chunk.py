"""Every edge of a pipeline streams; the deploy config's `async_chunk` switch read nowhere is gone,
so stored configs drop it (they would otherwise fail the config's unknown-field check)."""

from django.db import migrations


def drop_async_chunk(apps, schema_editor):
    Deployment = apps.get_model("deployments", "Deployment")
    for deployment in Deployment.objects.filter(deploy_config__has_key="async_chunk"):
        deployment.deploy_config.pop("async_chunk")
        deployment.save(update_fields=["deploy_config"])


class Migration(migrations.Migration):
    dependencies = [
        ("deployments", "0002_replica_transfers"),
    ]

    operations = [
        migrations.RunPython(drop_async_chunk, migrations.RunPython.noop),
    ]
