"""Delete request history (and artifact files) older than the retention setting."""

from django.core.management.base import BaseCommand

from control_plane.inference.retention import cleanup, retention_days


class Command(BaseCommand):
    help = "Delete InferenceRequests and their artifacts older than HISTORY_RETENTION_DAYS."

    def add_arguments(self, parser):
        parser.add_argument("--days", type=float, default=None, help="Override the retention (days).")

    def handle(self, *args, days=None, **options):
        removed = cleanup(older_than_days=days)
        self.stdout.write(
            f"deleted {removed} requests older than {days if days is not None else retention_days()} days"
        )
