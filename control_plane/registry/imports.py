"""Importing a checkpoint from a local path into the models folder, copied or linked (the hub and
archives: hub_import.py, archive_import.py)."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from django.conf import settings

from control_plane.registry.discovery import discover_models
from control_plane.registry.models import Model
from control_plane.registry.services import models_sync

CHECKPOINT_FILES = ("config.json", "model_index.json")
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


class ImportInvalid(Exception):
    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field
        self.message = message


def name_free(name: str) -> None:
    """Raise ImportInvalid on `name` unless no model and no entry of the models folder has it."""
    target = Path(settings.MODELS_DIR) / name
    if target.exists() or target.is_symlink() or Model.objects.filter(name=name).exists():
        raise ImportInvalid("name", f"a model named {name!r} exists already")


def model_import_local(*, path: str, name: str = "", link: bool = False, user=None) -> Model:
    """Copy (or symlink) a checkpoint directory into the models folder and record it."""
    source = Path(path).expanduser()
    if not source.is_absolute():
        raise ImportInvalid("path", "must be an absolute path on the server")
    if not source.is_dir():
        raise ImportInvalid("path", f"{source} is not a directory")
    if not any((source / f).is_file() for f in CHECKPOINT_FILES):
        raise ImportInvalid("path", f"{source} holds neither config.json nor model_index.json")
    name = name or source.name
    if not NAME_PATTERN.match(name):
        raise ImportInvalid("name", "letters, digits, '.', '_' and '-' only (and not starting with '.', '_' or '-')")
    name_free(name)
    target = Path(settings.MODELS_DIR) / name
    target.parent.mkdir(parents=True, exist_ok=True)
    if link:
        os.symlink(source.resolve(), target, target_is_directory=True)
    else:
        shutil.copytree(source, target, symlinks=False)
    models_sync(discover_models())
    Model.objects.filter(name=name).update(created_by=user)
    return Model.objects.get(name=name)
