"""`python manage.py bench serve ...`: the same client as `omnistage bench serve` (client/bench/),
for a checkout where manage.py is the entry point. It uses no database: only the flags."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from client.bench.options import OptionsError, ServeOptions, add_serve_arguments


class Command(BaseCommand):
    help = "Benchmarks against a running platform: `bench serve` measures a deployment through its API."
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser):
        parser.add_argument("benchmark", choices=["serve"], help="serve: measure a deployment through /v1")
        add_serve_arguments(parser)

    def handle(self, *args, **options):
        from client.bench.serve import run

        try:
            serve_options = ServeOptions.from_mapping(options)
        except OptionsError as error:
            raise CommandError(str(error), returncode=1) from None
        code = run(serve_options)  # prints to sys.stdout: its tables are the output
        if code:
            raise SystemExit(code)
