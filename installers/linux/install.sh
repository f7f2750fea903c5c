#!/usr/bin/env bash
# Install Ternary Chat for the current user (no root): a private virtual environment under the
# user's data folder, the `ternary-chat` launcher in ~/.local/bin, the icon in the hicolor theme
# and the .desktop entry in ~/.local/share/applications (so it appears in the application menu).
#
#   installers/linux/install.sh                 # CPU build of torch (works everywhere)
#   installers/linux/install.sh --gpu           # CUDA torch from PyPI + Triton (NVIDIA GPUs)
#   installers/linux/install.sh --uninstall     # remove everything this script installed
#
# Needs python3 >= 3.11 with the venv module. Chat history, settings and downloaded models live in
# ~/.local/share/ternary-chat and ~/.config/ternary-chat and are kept on uninstall.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/../.." && pwd)"
DATA="${XDG_DATA_HOME:-$HOME/.local/share}"
PREFIX="$DATA/ternary-chat/app"
VENV="$PREFIX/venv"
BIN="$HOME/.local/bin"
APPS="$DATA/applications"
ICONS="$DATA/icons/hicolor"
PY="${PYTHON:-python3}"
TORCH="${TORCH_SPEC:-torch}"  # e.g. TORCH_SPEC="torch==2.13.0" to pin the version
GPU=0

for arg in "$@"; do
  case "$arg" in
    --gpu) GPU=1 ;;
    --uninstall)
      rm -rf "$PREFIX" "$BIN/ternary-chat" "$BIN/ternary" "$APPS/ternary-chat.desktop" "$ICONS/scalable/apps/ternary-chat.svg"
      for s in 32 48 64 128 256; do rm -f "$ICONS/${s}x${s}/apps/ternary-chat.png"; done
      command -v update-desktop-database >/dev/null && update-desktop-database -q "$APPS" || true
      echo "Ternary Chat removed (your chats, settings and models in $DATA/ternary-chat were kept)."
      exit 0 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "unknown option: $arg" >&2; exit 2 ;;
  esac
done

"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
  || { echo "Ternary Chat needs Python 3.11 or newer ($PY is $("$PY" -V 2>&1))." >&2; exit 1; }

echo "Creating the environment in $VENV ..."
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
if [ "$GPU" = 1 ]; then
  "$VENV/bin/python" -m pip install -q "$TORCH"
  EXTRAS="gui,gpu"
else
  # The CPU wheel index is an *extra* index: dependencies still come from the normal index, and
  # where download.pytorch.org is unreachable pip carries on with the normal index alone.
  "$VENV/bin/python" -m pip install -q --retries 2 "$TORCH" --extra-index-url https://download.pytorch.org/whl/cpu
  EXTRAS="gui"
fi
"$VENV/bin/python" -m pip install -q "$REPO[$EXTRAS]"

mkdir -p "$BIN" "$APPS" "$ICONS/scalable/apps"
ln -sf "$VENV/bin/ternary-chat" "$BIN/ternary-chat"
ln -sf "$VENV/bin/ternary" "$BIN/ternary"
cp "$REPO/resources/icons/ternary-chat.svg" "$ICONS/scalable/apps/ternary-chat.svg"
for s in 32 48 64 128 256; do
  mkdir -p "$ICONS/${s}x${s}/apps"
  cp "$REPO/resources/icons/ternary-chat-$s.png" "$ICONS/${s}x${s}/apps/ternary-chat.png"
done
# Absolute Exec path: works even when ~/.local/bin is not on the desktop session's PATH.
sed -e "s|^Exec=ternary-chat|Exec=$VENV/bin/ternary-chat|" -e "s|^TryExec=ternary-chat|TryExec=$VENV/bin/ternary-chat|" \
  "$REPO/installers/linux/ternary-chat.desktop" > "$APPS/ternary-chat.desktop"
chmod 644 "$APPS/ternary-chat.desktop"
command -v desktop-file-validate >/dev/null && desktop-file-validate "$APPS/ternary-chat.desktop"
command -v update-desktop-database >/dev/null && update-desktop-database -q "$APPS" || true
command -v gtk-update-icon-cache >/dev/null && gtk-update-icon-cache -q -t "$ICONS" || true

"$VENV/bin/ternary-chat" --smoke-test >/dev/null 2>&1 && echo "Smoke test passed." \
  || echo "Note: the smoke test could not open a window here (no display?); the app is installed anyway."
echo "Installed. Start \"Ternary Chat\" from the application menu, or run: ternary-chat"
