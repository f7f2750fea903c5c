#!/usr/bin/env bash
# Installs Ternary Chat into .venv (first run only) and starts the desktop app.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then "$PY" -m venv .venv; fi
. .venv/bin/activate
if ! python -c "import torch, PySide6, runtime" >/dev/null 2>&1; then
    python -m pip install -q --upgrade pip
    if command -v nvidia-smi >/dev/null 2>&1; then
        python -m pip install -q "torch>=2.4,<=2.14.1" "triton>=3.0" nvidia-ml-py   # CUDA build + kernels
    else
        python -m pip install -q "torch==2.13.0" || python -m pip install -q "torch>=2.4,<=2.14.1"
    fi
    python -m pip install -q -e ".[gui]"
fi
# Qt's X11 plugin needs system libraries pip cannot install: name the missing ones and the command
# that installs them, instead of Qt's "could not load the Qt platform plugin xcb" (skipped off Linux
# and when QT_QPA_PLATFORM is offscreen or wayland).
python scripts/check_qt_libs.py || exit 1
exec ternary-chat "$@"
