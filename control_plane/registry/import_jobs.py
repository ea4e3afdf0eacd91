"""Running an import off the request path: `manage.py run_model_import <name>` in a process of
its own, started in a session of its own so that it outlives a restart of the web process that
started it. The process writes its progress and its end on the Model row; if it dies without
saying (killed, out of memory), the thread that waits for it marks the import failed.

The process works on the same database and models folder as this one (passed explicitly, since
a test or a settings override may have changed them since the environment was read).
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from django.conf import settings
from django.db import connection

from control_plane.registry.models import Model


def database_url() -> str:
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    host, port = db.get("HOST") or "127.0.0.1", db.get("PORT") or 5432
    return f"postgres://{db.get('USER') or 'postgres'}{password}@{host}:{port}/{db['NAME']}"


def job_env() -> dict[str, str]:
    import os

    return {**os.environ, "DATABASE_URL": database_url(), "OMNISTAGE_MODELS_DIR": str(settings.MODELS_DIR),
            "DJANGO_SETTINGS_MODULE": "control_plane.settings", "PYTHONUNBUFFERED": "1"}  # fmt: skip


def log_path(name: str) -> Path:
    return Path(settings.MODELS_DIR) / ".imports" / f"{name}.log"


def launch(name: str) -> subprocess.Popen:
    """Start the import of `name` (an `importing` row) in its own process."""
    log = log_path(name)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "django", "run_model_import", name],
            cwd=settings.BASE_DIR, env=job_env(), stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    threading.Thread(target=_watch, args=(name, process), name=f"import-{name}", daemon=True).start()
    return process


def _watch(name: str, process: subprocess.Popen) -> None:
    code = process.wait()
    try:
        if code != 0:
            Model.objects.filter(name=name, status=Model.Status.IMPORTING).update(
                status=Model.Status.FAILED,
                status_reason=f"the import process exited with code {code} (log: {log_path(name)})",
            )
    finally:
        connection.close()
