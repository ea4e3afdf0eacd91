"""Where a deployment's checkpoint may be: only inside the model roots (OMNISTAGE_MODELS_DIR and
any OMNISTAGE_MODEL_DIR_ROOTS), so a user allowed to create deployments cannot point a worker
host's loader at an arbitrary path and read its errors back as a file-system probe.

A relative `model_dir` names a checkpoint under OMNISTAGE_MODELS_DIR (`qwen2_5_omni`,
`Qwen/Qwen2.5-Omni-7B`); an absolute one must lie inside a root. `..` components are refused
outright, and the path is resolved (symlinks followed) before the check, so a link inside a
root that points elsewhere is refused too, with one exception: an entry of a root that links
to a checkpoint directory (one with config.json or model_index.json), which is how an admin
imports a checkpoint by link. `-` means "no checkpoint" (pipelines that need none, such as
the echo pipelines).

Loader errors shown to users who are not staff have their paths redacted (`redact_paths`).
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

from django.conf import settings

from control_plane.deployments.services import DeploymentInvalid

NO_CHECKPOINT = "-"
CHECKPOINT_FILES = ("config.json", "model_index.json")
_ABSOLUTE_PATH = re.compile(r"(?<![\w.:/])/(?:[^\s'\"():,]+)")


def model_roots() -> list[Path]:
    roots = [Path(settings.MODELS_DIR), *(Path(root) for root in getattr(settings, "MODEL_DIR_ROOTS", []))]
    return [root.resolve() for root in roots]


def resolve_model_dir(value: str) -> str:
    """The checkpoint directory `value` names, as an absolute path inside a model root;
    DeploymentInvalid (a 400 on `model_dir`) otherwise."""
    value = value.strip()
    if value == NO_CHECKPOINT:
        return value
    if not value or "\x00" in value:
        raise DeploymentInvalid("model_dir", "must name a checkpoint directory")
    if ".." in PurePosixPath(value).parts:
        raise DeploymentInvalid("model_dir", "must not contain '..'")
    roots = model_roots()
    candidate = Path(value) if Path(value).is_absolute() else Path(settings.MODELS_DIR) / value
    resolved = candidate.resolve()
    inside = any(resolved == root or resolved.is_relative_to(root) for root in roots)
    if not inside and not _linked_checkpoint(candidate, roots):
        raise DeploymentInvalid(
            "model_dir",
            "must be a checkpoint inside the model directory (OMNISTAGE_MODELS_DIR or OMNISTAGE_MODEL_DIR_ROOTS); "
            "give its name relative to the model directory",
        )
    return str(candidate if candidate == resolved or not inside else resolved)


def _linked_checkpoint(candidate: Path, roots: list[Path]) -> bool:
    """Whether `candidate` is a root's own entry that links to a checkpoint directory."""
    if not candidate.is_symlink() or candidate.parent.resolve() not in roots:
        return False
    return any((candidate / name).is_file() for name in CHECKPOINT_FILES)


def redact_paths(text: str) -> str:
    """`text` with every absolute path replaced by `<path>`."""
    return _ABSOLUTE_PATH.sub("<path>", text)
