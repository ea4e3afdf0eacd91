"""Serve the web tier alone: OMNISTAGE_WEB_PROCESSES daphne processes on one port, supervised
like `omni_up`'s components (a process that exits stops the others, and the command exits
non-zero for the container's restart policy). The distributed mode's web nodes run this."""

from __future__ import annotations

import signal
import sys

from django.conf import settings
from django.core.management.base import BaseCommand

from control_plane.system.supervisor import StartupError, Supervisor
from control_plane.system.web_tier import listening_socket, web_components


class Command(BaseCommand):
    help = "Serve HTTP and WebSockets from N processes sharing one port, until Ctrl-C or SIGTERM."

    def add_arguments(self, parser):
        parser.add_argument("--host", default=settings.WEB_HOST)
        parser.add_argument("--port", type=int, default=settings.WEB_PORT)
        parser.add_argument("--processes", type=int, default=settings.WEB_PROCESSES)

    def handle(self, *args, **options):
        supervisor = Supervisor(out=self.stdout)
        signal.signal(signal.SIGINT, supervisor.request_stop)
        signal.signal(signal.SIGTERM, supervisor.request_stop)
        code = 0
        web_socket = None
        try:
            web_socket = listening_socket(options["host"], options["port"])
            supervisor.start_group(
                web_components(web_socket, options["processes"], env={"PYTHONUNBUFFERED": "1"},
                               access_log=settings.WEB_ACCESS_LOG)
            )  # fmt: skip
            supervisor.say("supervisor", f"serving on {options['host']}:{options['port']}")
            code = supervisor.watch()
        except OSError as error:
            supervisor.say(
                "supervisor", f"start-up failed: cannot listen on {options['host']}:{options['port']}: {error}"
            )
            code = 1
        except StartupError as error:
            supervisor.say("supervisor", f"start-up failed: {error}")
            code = 1
        finally:
            supervisor.stop_all()
            if web_socket is not None:
                web_socket.close()
        if code:
            sys.exit(code)
