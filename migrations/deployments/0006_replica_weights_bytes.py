from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("deployments", "0005_revisions"),
    ]

    operations = [
        migrations.AddField(
            model_name="replica",
            name="weights_loaded_bytes",
            field=models.BigIntegerField(
                blank=True, help_text="Bytes of weights its host last reported read (null: not counted).", null=True
            ),
        ),
        migrations.AddField(
            model_name="replica",
            name="weights_total_bytes",
            field=models.BigIntegerField(
                blank=True, help_text="Bytes of weights its host reads in all (null: not counted).", null=True
            ),
        ),
    ]
