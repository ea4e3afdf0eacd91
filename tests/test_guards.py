"""Guards that keep the layout honest: lint, layering contracts, stdlib shadowing, compose file."""

import re
import subprocess
import sys
from pathlib import Path

from procs import REPO

BIN = Path(sys.executable).parent


def run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300)


def test_ruff_passes_with_stdlib_shadowing_rule_on():
    result = run([str(BIN / "ruff"), "check", "--extend-select", "A005", "."])
    assert result.returncode == 0, result.stdout + result.stderr


def test_layering_contracts_hold():
    result = run([str(BIN / "lint-imports"), "--no-cache"])
    assert result.returncode == 0, result.stdout + result.stderr
    summary = re.search(r"Contracts: (\d+) kept, (\d+) broken", result.stdout)
    assert summary and int(summary.group(1)) >= 4 and summary.group(2) == "0", result.stdout


def test_stdlib_platform_and_uuid_import_from_the_repository_root():
    code = "import platform, uuid; print(platform.system(), uuid.uuid4().version)"
    result = run([sys.executable, "-c", code])
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["Linux", "4"]


def test_no_package_of_ours_shadows_the_standard_library():
    ours = {path.name for path in REPO.iterdir() if (path / "__init__.py").exists()}
    assert not ours & set(sys.stdlib_module_names)


def test_compose_file_follows_the_compose_specification():
    result = run([str(BIN / "check-jsonschema"), "--builtin-schema", "vendor.compose-spec", "docker-compose.yml"])
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_file_has_every_role_and_a_gpu_reservation():
    import yaml

    services = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    assert {"postgres", "redis", "web", "orchestrator", "worker-cpu", "worker-gpu"} <= set(services)
    devices = services["worker-gpu"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
