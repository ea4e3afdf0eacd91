"""Importing a checkpoint from an uploaded archive (tar, tar.gz/bz2/xz or zip) of its directory.

Every member is checked before anything is written: an absolute name, a `..` component or a
backslash (a path for another system) is refused as path traversal, and so is any link (a
symlink or hard link could point outside the models folder), device or FIFO. The archive is
unpacked into the staging folder and moved into the models folder only once it holds a
checkpoint (its files at the top, or in one top folder).
"""

from __future__ import annotations

import shutil
import stat
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

from control_plane.registry.discovery import discover_models
from control_plane.registry.imports import NAME_PATTERN, ImportInvalid, name_free
from control_plane.registry.models import Model
from control_plane.registry.services import models_sync
from control_plane.registry.staging import StagingInvalid, discard, promote, staging_dir

SUFFIXES = (".tar.gz", ".tar.bz2", ".tar.xz", ".tgz", ".tar", ".zip")
CHUNK = 1024 * 1024


class ArchiveInvalid(Exception):
    pass


def archive_stem(filename: str) -> str:
    base = Path(filename or "").name
    for suffix in SUFFIXES:
        if base.lower().endswith(suffix):
            return base[: -len(suffix)]
    return base


def model_import_archive(*, upload, name: str = "", user=None) -> Model:
    """Unpack `upload` (a file object with a `name`) into the models folder as `name`."""
    name = name or archive_stem(getattr(upload, "name", ""))
    if not NAME_PATTERN.match(name):
        raise ImportInvalid("name", "letters, digits, '.', '_' and '-' only (and not starting with '.', '_' or '-')")
    name_free(name)
    discard(name)
    folder = staging_dir(name)
    folder.mkdir(parents=True)
    received = folder.with_name(f"{name}.upload")
    try:
        with received.open("wb") as out:
            for chunk in iter(lambda: upload.read(CHUNK), b""):
                out.write(chunk)
        unpack(received, folder)
        promote(folder, name)
    except (ArchiveInvalid, StagingInvalid) as error:
        discard(name)
        raise ImportInvalid("archive", str(error)) from None
    finally:
        received.unlink(missing_ok=True)
    models_sync(discover_models())
    Model.objects.filter(name=name).update(created_by=user)
    return Model.objects.get(name=name)


def unpack(archive: Path, folder: Path) -> None:
    if zipfile.is_zipfile(archive):
        _unzip(archive, folder)
    elif tarfile.is_tarfile(archive):
        _untar(archive, folder)
    else:
        raise ArchiveInvalid("is neither a tar nor a zip archive")


def member_path(folder: Path, member: str) -> Path:
    """Where `member` lands under `folder`; ArchiveInvalid if it would land anywhere else."""
    pure = PurePosixPath(member)
    if not member or "\\" in member or pure.is_absolute() or ".." in pure.parts or "\x00" in member:
        raise ArchiveInvalid(f"member {member!r} points outside the checkpoint's folder (path traversal): refused")
    target = (folder / pure).resolve()
    if not target.is_relative_to(folder.resolve()):
        raise ArchiveInvalid(f"member {member!r} points outside the checkpoint's folder (path traversal): refused")
    return target


def _check_room(folder: Path, total: int) -> None:
    free = shutil.disk_usage(folder).free
    if total > free:
        raise ArchiveInvalid(f"unpacks to {total} bytes, more than the {free} bytes free in the models folder")


def _untar(archive: Path, folder: Path) -> None:
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = tar.getmembers()
            for member in members:
                member_path(folder, member.name)
                if not (member.isfile() or member.isdir()):
                    raise ArchiveInvalid(f"member {member.name!r} is a link or special file: refused")
            _check_room(folder, sum(member.size for member in members))
            tar.extractall(folder, members=members, filter="data")
    except (tarfile.TarError, EOFError, OSError) as error:
        raise ArchiveInvalid(f"could not be unpacked: {error}") from None


def _unzip(archive: Path, folder: Path) -> None:
    try:
        with zipfile.ZipFile(archive) as zipped:
            infos = zipped.infolist()
            for info in infos:
                member_path(folder, info.filename)
                if stat.S_ISLNK(info.external_attr >> 16):
                    raise ArchiveInvalid(f"member {info.filename!r} is a link: refused")
            _check_room(folder, sum(info.file_size for info in infos))
            for info in infos:
                target = member_path(folder, info.filename)
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with zipped.open(info) as source, target.open("wb") as out:
                    shutil.copyfileobj(source, out, CHUNK)
    except (zipfile.BadZipFile, EOFError, OSError) as error:
        raise ArchiveInvalid(f"could not be unpacked: {error}") from None
