"""Counting what transformers' and diffusers' `from_pretrained` read, for the active weights meter
(stages/models/weights_meter.py), without changing what they load.

Inside `counted_reads("transformers", ...)` (only while a meter is active):

- transformers opens each `.safetensors` file with `safe_open` and materialises each tensor from a
  lazy slice when it loads it into the model: the file's header counts when it is opened, each tensor's
  bytes when its slice is read.
- A loader that reads a whole file per call (transformers' `load_state_dict` for `.bin` files,
  diffusers' `load_state_dict` for its models' files) counts that file once the call returns.

`checkpoint_files(folder)` names the files such a loader reads in one model folder (the total to
announce before it starts); `prefix_bytes(file, prefix)` the bytes of a file's tensors under a prefix,
from its header, for a loader that reads only those.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import os
import struct
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from stages.models.weights_meter import active_meter

SAFETENSORS_NAMES = ("model.safetensors", "diffusion_pytorch_model.safetensors")
BIN_NAMES = ("pytorch_model.bin", "diffusion_pytorch_model.bin")


def checkpoint_files(folder: str | Path) -> list[Path]:
    """The weight files a `from_pretrained` of this folder reads: the shards of its index, else its
    single file; safetensors before `.bin`, as transformers and diffusers choose."""
    folder = Path(folder)
    for names in (SAFETENSORS_NAMES, BIN_NAMES):
        for name in names:
            index = folder / f"{name}.index.json"
            if index.is_file():
                shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
                return [folder / shard for shard in shards]
            if (folder / name).is_file():
                return [folder / name]
    return []


def announce_checkpoint(folder: str | Path) -> None:
    """Tell the active meter (if any) the files a `from_pretrained` of `folder` will read."""
    meter = active_meter()
    if meter is not None and Path(folder).is_dir():
        meter.expect_files(checkpoint_files(folder))


def announce_pipeline(folder: str | Path) -> None:
    """Tell the active meter (if any) the files a diffusers pipeline directory's models will read: each
    component of `model_index.json`, from its own folder."""
    meter = active_meter()
    index = Path(folder) / "model_index.json"
    if meter is None or not index.is_file():
        return
    for name, value in json.loads(index.read_text()).items():
        if not name.startswith("_") and isinstance(value, list) and (Path(folder) / name).is_dir():
            meter.expect_files(checkpoint_files(Path(folder) / name))


def header_bytes(path: str | Path) -> int:
    """The length of a safetensors file's header (its size field included)."""
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
    return 8 + length


def safetensors_header(path: str | Path) -> dict:
    """A safetensors file's header: each tensor's dtype, shape and data offsets (and `__metadata__`)."""
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        return json.loads(handle.read(length))


def tensor_spans(path: str | Path) -> dict[str, int]:
    """Each tensor's size in bytes, from a safetensors file's header."""
    return {key: entry["data_offsets"][1] - entry["data_offsets"][0]
            for key, entry in safetensors_header(path).items() if key != "__metadata__"}  # fmt: skip


def prefix_bytes(path: str | Path, prefix: str) -> int:
    return sum(size for key, size in tensor_spans(path).items() if key.startswith(prefix))


class _CountedSlice:
    def __init__(self, inner, path: str):
        self._inner, self._path = inner, path

    def __getitem__(self, index):
        tensor = self._inner[index]
        _count(self._path, tensor)
        return tensor

    def __getattr__(self, name):
        return getattr(self._inner, name)


class _CountedFile:
    """A `safe_open` handle whose tensors count as they are read."""

    def __init__(self, inner, path: str):
        self._inner, self._path = inner, path

    def __enter__(self):
        self._inner.__enter__()
        return self

    def __exit__(self, *exc_info):
        return self._inner.__exit__(*exc_info)

    def get_slice(self, key):
        return _CountedSlice(self._inner.get_slice(key), self._path)

    def get_tensor(self, key):
        tensor = self._inner.get_tensor(key)
        _count(self._path, tensor)
        return tensor

    def __getattr__(self, name):
        return getattr(self._inner, name)


def _count(path: str, tensor) -> None:
    meter = active_meter()
    if meter is not None and hasattr(tensor, "nbytes"):
        meter.file_read(path, int(tensor.nbytes))


def _counted_open(safe_open):
    @functools.wraps(safe_open)
    def opened(filename, *args, **kwargs):
        handle = safe_open(filename, *args, **kwargs)
        meter = active_meter()
        if meter is None:
            return handle
        path = os.fspath(filename)
        meter.file_read(path, header_bytes(path))
        return _CountedFile(handle, path)

    return opened


def _counted_file_loader(load):
    """`load(path, ...)` reads a whole file: it counts once the call returns."""

    @functools.wraps(load)
    def loaded(checkpoint_file, *args, **kwargs):
        result = load(checkpoint_file, *args, **kwargs)
        meter = active_meter()
        if meter is not None and isinstance(checkpoint_file, str | os.PathLike):
            meter.file_done(checkpoint_file)
        return result

    return loaded


PATCHES = (
    ("transformers.modeling_utils", "safe_open", _counted_open),
    ("transformers.modeling_utils", "load_state_dict", _counted_file_loader),
    ("diffusers.models.model_loading_utils", "load_state_dict", _counted_file_loader),
    ("diffusers.models.modeling_utils", "load_state_dict", _counted_file_loader),
)

_lock = threading.Lock()
_depth = 0
_originals: dict[tuple[str, str], object] = {}


@contextlib.contextmanager
def counted_reads(*libraries: str) -> Iterator[None]:
    """Count the reads of `libraries` ("transformers", "diffusers") inside this block (nothing happens
    without an active meter)."""
    global _depth
    if active_meter() is None:
        yield
        return
    with _lock:
        _install(libraries)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                _uninstall()


def _install(libraries: tuple[str, ...]) -> None:
    for module_name, attr, wrap in PATCHES:
        if module_name.split(".")[0] not in libraries or (module_name, attr) in _originals:
            continue
        module = importlib.import_module(module_name)
        if not hasattr(module, attr):
            continue
        original = getattr(module, attr)
        _originals[(module_name, attr)] = original
        setattr(module, attr, wrap(original))


def _uninstall() -> None:
    for (module_name, attr), original in _originals.items():
        setattr(sys.modules[module_name], attr, original)
    _originals.clear()
