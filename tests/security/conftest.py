"""The live platforms of the /v1 serving tests and the realtime tests
(tests/control_plane/openai_compat/conftest.py, tests/control_plane/realtime/conftest.py), shared
here so the security tests hit the real ASGI server, worker pool and orchestrator."""

from __future__ import annotations

import importlib.util

from procs import REPO


def _load(name: str, area: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "tests" / "control_plane" / area / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_serving = _load("serving_conftest", "openai_compat")
_realtime = _load("realtime_conftest", "realtime")

serving_pipeline_definitions = _serving.serving_pipeline_definitions
serving_users = _serving.serving_users
serving_platform = _serving.serving_platform
serving_stack = _serving.serving_stack
echo_stack = _serving.echo_stack
realtime_users = _realtime.realtime_users
realtime_platform = _realtime.realtime_platform
realtime_stack = _realtime.realtime_stack
voice_stack = _realtime.voice_stack
