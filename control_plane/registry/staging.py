"""Where an import assembles a checkpoint before it is listed: `<models dir>/.imports/<name>/`.

A dot-folder is never a checkpoint for discovery nor a choice of the deploy form, so nothing
half-written is ever listed as ready. An import that finished moves its folder into the models
folder in one rename (same file system); one that failed leaves it for the next attempt to continue.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from django.conf import settings

CHECKPOINT_FILES = ("config.json", "model_index.json")
STAGING = ".imports"
HUB_CACHE = ".cache"  # huggingface_hub's own metadata inside a local_dir download


class StagingInvalid(Exception):
    pass


def staging_dir(name: str) -> Path:
    return Path(settings.MODELS_DIR) / STAGING / name


def checkpoint_root(folder: Path) -> Path:
    """The checkpoint directory inside an assembled folder: itself, or its one subfolder (an
    archive of a directory rather than of its contents)."""
    if any((folder / f).is_file() for f in CHECKPOINT_FILES):
        return folder
    children = [child for child in folder.iterdir() if not child.name.startswith(".")]
    if len(children) == 1 and children[0].is_dir() and any((children[0] / f).is_file() for f in CHECKPOINT_FILES):
        return children[0]
    raise StagingInvalid("holds neither config.json nor model_index.json")


def promote(folder: Path, name: str) -> Path:
    """Move the checkpoint assembled in `folder` to `<models dir>/<name>` and drop the rest."""
    root = checkpoint_root(folder)
    shutil.rmtree(root / HUB_CACHE, ignore_errors=True)
    target = Path(settings.MODELS_DIR) / name
    if target.exists() or target.is_symlink():
        raise StagingInvalid(f"{target} exists already")
    root.rename(target)
    shutil.rmtree(folder, ignore_errors=True)
    return target


def discard(name: str) -> None:
    """Remove what an import of `name` left in the staging folder (files and its log)."""
    shutil.rmtree(staging_dir(name), ignore_errors=True)
    staging_dir(name).with_name(f"{name}.log").unlink(missing_ok=True)
