#!/usr/bin/env bash
# Build the PyInstaller one-folder app on Linux and smoke-test it offscreen.
#
#   installers/build_linux.sh            # uses .venv (run scripts/test.sh or pip install -e .[gui] first)
#
# Writes dist/ternary-chat/ and prints the build time, folder size and the smoke-test result.
# Too slow and large for every CI run (torch alone is ~1 GB unpacked), so it is a script; the
# result of the last run is recorded in installers/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
"$PY" -m pip install -q "pyinstaller>=6.10"  # = the "packaging" extra
start=$(date +%s)
"$PY" -m PyInstaller --noconfirm --clean --log-level WARN \
  --distpath "$ROOT/dist" --workpath "$ROOT/build/pyinstaller" installers/pyinstaller/ternary-chat.spec
end=$(date +%s)
echo "build: $((end - start)) s, size: $(du -sh dist/ternary-chat | cut -f1)"
home="$(mktemp -d)"
TERNARY_CHAT_HOME="$home" QT_QPA_PLATFORM=offscreen timeout 120 dist/ternary-chat/ternary-chat --smoke-test
echo "smoke test: exit $? (log: $home/logs/ternary-chat.log)"
