#!/usr/bin/env bash
# Creates .venv and installs Omnistage with the extras for this machine. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    EXTRAS="${OMNISTAGE_EXTRAS:-gpu,dev,demo}"
else
    EXTRAS="${OMNISTAGE_EXTRAS:-cpu,dev,demo}"
fi

if [ ! -x .venv/bin/python ]; then
    echo "==> creating .venv with $($PYTHON --version)"
    "$PYTHON" -m venv .venv
fi
bash scripts/install.sh --python .venv/bin/python --extras "$EXTRAS" --editable

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
