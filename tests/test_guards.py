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


# What the control plane and the console may use of the engine library: configuration, the wire
# protocol, the streams' names, the in-process orchestrator core and the torch-free request
# bounds (audio cap, context truncation), a checkpoint's provenance file (plain JSON, which the
# registry writes for a model it imports), and the request traces. A new entry is a decision.
CONTROL_PLANE_USES_OF_STAGES = {
    "stages.audio_cap",
    "stages.config",
    "stages.context_truncation",
    "stages.diffusion_knobs",
    "stages.errors",
    "stages.groups",
    "stages.heartbeat",
    "stages.orchestrator",
    "stages.protocol",
    "stages.provenance",
    "stages.replica_stats",
    "stages.resampling",
    "stages.sampling_merge",
    "stages.streams",
    "stages.tracing",
    "stages.voice_conditioning",
}


def test_the_control_plane_uses_only_the_allowed_parts_of_stages():
    import grimp

    graph = grimp.build_graph("control_plane", "console", "stages", cache_dir=None)
    used = {
        imported
        for module in graph.modules
        if module.split(".")[0] in ("control_plane", "console")
        for imported in graph.find_modules_directly_imported_by(module)
        if imported.split(".")[0] == "stages"
    }
    allowed = {
        name for name in used if any(name == a or name.startswith(a + ".") for a in CONTROL_PLANE_USES_OF_STAGES)
    }
    assert used == allowed, f"not in CONTROL_PLANE_USES_OF_STAGES: {sorted(used - allowed)}"


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
