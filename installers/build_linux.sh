#!/usr/bin/env bash
# Build the PyInstaller one-folder app on Linux and smoke-test it offscreen.
#
#   installers/build_linux.sh                          # uses .venv (pip install -e .[gui] first)
#   SMOKE_MODEL=path/to/model installers/build_linux.sh   # also load that model and generate a reply
#   CLEAN=0 installers/build_linux.sh                  # reuse PyInstaller's cache (faster rebuilds)
#
# Writes dist/ternary-chat/ and prints the build time, folder size and the smoke-test results.
# Too slow and large for every CI run (torch + Triton are ~1.6 GB unpacked), so it is a script;
# the result of the last run is recorded in installers/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
"$PY" -m pip install -q "pyinstaller>=6.10"  # = the "packaging" extra
CLEAN_FLAG=--clean
[ "${CLEAN:-1}" = 0 ] && CLEAN_FLAG=
start=$(date +%s)
"$PY" -m PyInstaller --noconfirm $CLEAN_FLAG --log-level WARN \
  --distpath "$ROOT/dist" --workpath "$ROOT/build/pyinstaller" installers/pyinstaller/ternary-chat.spec
end=$(date +%s)
echo "build: $((end - start)) s, size: $(du -sh dist/ternary-chat | cut -f1)"
home="$(mktemp -d)"
export TERNARY_CHAT_HOME="$home" QT_QPA_PLATFORM=offscreen
timeout 120 dist/ternary-chat/ternary-chat --smoke-test
if [ -n "${SMOKE_MODEL:-}" ]; then
  timeout 600 dist/ternary-chat/ternary-chat --smoke-test "$SMOKE_MODEL"
fi
echo "smoke tests passed (log: $home/logs/ternary-chat.log)"
