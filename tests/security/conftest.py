"""The live platform of the /v1 serving tests (tests/control_plane/serving/conftest.py), shared
here so the security tests hit the real ASGI server, worker pool and orchestrator."""

from __future__ import annotations

import importlib.util

from procs import REPO

_spec = importlib.util.spec_from_file_location(
    "serving_conftest", REPO / "tests" / "control_plane" / "serving" / "conftest.py"
)
_serving = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_serving)

serving_pipeline_definitions = _serving.serving_pipeline_definitions
serving_users = _serving.serving_users
serving_stack = _serving.serving_stack
echo_stack = _serving.echo_stack
