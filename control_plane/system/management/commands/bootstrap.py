"""Create the admin user and one API key on first run; print secrets once."""

from __future__ import annotations

import os
import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from control_plane.accounts.services import api_key_create


class Command(BaseCommand):
    help = "Create the admin user and a first API key if they do not exist (secrets are printed once)."

    def add_arguments(self, parser):
        parser.add_argument("--no-demo", action="store_true", help="create no demo deployments")

    def handle(self, *args, **options):
        from django.core.management import call_command

        from control_plane.deployments.demo import create_demo_deployments

        call_command("sync_pipelines", stdout=self.stdout)
        User = get_user_model()
        username = os.environ.get("OMNISTAGE_ADMIN_USER", "admin")
        admin = User.objects.filter(username=username).first()
        if admin is None:
            password = os.environ.get("OMNISTAGE_ADMIN_PASSWORD") or secrets.token_urlsafe(12)
            admin = User.objects.create_superuser(username=username, email="", password=password)
            self.stdout.write(self.style.SUCCESS(f"Created admin user '{username}' with password: {password}"))
            self.stdout.write("  (shown once; change it in the admin)")
        else:
            self.stdout.write(f"Admin user '{username}' exists.")
        if not admin.api_keys.exists():
            key, secret = api_key_create(
                user=admin, name="default", scopes=["inference", "deployments:read", "deployments:write", "admin"]
            )
            self.stdout.write(self.style.SUCCESS(f"Created API key '{key.name}': {secret}"))
            self.stdout.write("  (shown once, stored hashed; create more in the console or admin)")
        else:
            self.stdout.write(f"Admin has {admin.api_keys.count()} API key(s); secrets are never shown again.")
        if not options["no_demo"]:
            for deployment in create_demo_deployments(admin, out=self.stdout):
                self.stdout.write(
                    self.style.SUCCESS(f"Created demo deployment '{deployment.name}' ({deployment.pipeline.name})")
                )
        call_command("sync_models", stdout=self.stdout)
