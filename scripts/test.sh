#!/usr/bin/env bash
# Installs test dependencies into .venv and runs the whole test suite (CPU; Triton in interpreter mode).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then "$PY" -m venv .venv; fi
. .venv/bin/activate
python -m pip install -q --upgrade pip
# CPU torch from the pinned wheel first, so nothing pulls a multi-GB CUDA build.
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[test]"
bash scripts/install_arm_toolchain.sh || true  # ARM cross gcc + qemu; tests/cpu/test_cpu_neon_qemu.py fails if missing
export TRITON_INTERPRET=1 QT_QPA_PLATFORM=offscreen
ruff check runtime app tests
python -m pytest -q -m "not gpu" tests "$@"
