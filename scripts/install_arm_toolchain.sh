#!/usr/bin/env bash
# Installs the aarch64 cross compiler and the qemu user-mode emulator that tests/cpu/test_cpu_neon_qemu.py
# needs to build and run the NEON kernel on an x86 machine (issue 28: the ARM path is tested in CI even
# though no one here has ARM hardware). Uses only the distribution's packages:
#   1. already installed (or already unpacked in the cache below): nothing to do;
#   2. root, or password-less sudo: apt-get install;
#   3. otherwise: apt-get download the .debs and unpack them with dpkg-deb -x into
#      .venv/arm-toolchain (ignored by git; TERNARY_ARM_TOOLCHAIN overrides), which the test then
#      prefers to the system (the cache holds the whole toolchain, so a partial install does not matter).
# Idempotent and quiet; exits non-zero with a message saying what to install when nothing works.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static)
CACHE=${TERNARY_ARM_TOOLCHAIN:-$PWD/.venv/arm-toolchain}

have_system_tools() {
    command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 &&
        [ -e /usr/aarch64-linux-gnu/include/stdio.h ] &&
        { command -v qemu-aarch64-static >/dev/null 2>&1 || command -v qemu-aarch64 >/dev/null 2>&1; }
}
have_cached_tools() {
    [ -x "$CACHE/usr/bin/aarch64-linux-gnu-gcc" ] &&
        { [ -x "$CACHE/usr/bin/qemu-aarch64-static" ] || [ -x "$CACHE/usr/bin/qemu-aarch64" ]; } &&
        [ -e "$CACHE/usr/aarch64-linux-gnu/include/stdio.h" ] && [ -e "$CACHE/.complete" ]
}
have_system_tools && exit 0
have_cached_tools && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install_arm_toolchain: no apt-get on this machine; install an aarch64 cross gcc" \
         "(aarch64-linux-gnu-gcc) and qemu-aarch64 yourself: ${PKGS[*]}" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then SUDO=(sudo -n); else SUDO=(none); fi
fi

if [ "${SUDO[*]}" != none ]; then
    apt_install() { "${SUDO[@]}" apt-get install -y -qq -o DPkg::Lock::Timeout=120 --no-install-recommends \
                      "${PKGS[@]}" >/dev/null; }
    # A fresh CI image often has empty package lists: update only when the first try fails.
    if apt_install 2>/dev/null || { "${SUDO[@]}" apt-get update -qq >/dev/null && apt_install; }; then
        have_system_tools && exit 0
    fi
    echo "install_arm_toolchain: apt-get install failed; unpacking the packages without installing" >&2
fi

# No root: download the packages (and those of their dependencies this machine lacks) and unpack them.
# If the package lists are empty too, read them into a private folder first (no root needed for that).
APT_OPTS=()
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if ! apt-cache show "${PKGS[0]}" >/dev/null 2>&1; then
    mkdir -p "$CACHE/apt/lists/partial" "$CACHE/apt/cache/archives/partial"
    APT_OPTS=(-o "Dir::State::Lists=$CACHE/apt/lists" -o "Dir::Cache=$CACHE/apt/cache"
              -o "Debug::NoLocking=1" -o "APT::Sandbox::User=$(id -un)")
    apt-get "${APT_OPTS[@]}" update -qq >/dev/null 2>&1 || true
fi
deps=$(apt-cache "${APT_OPTS[@]}" depends --recurse --no-recommends --no-suggests --no-conflicts \
           --no-breaks --no-replaces --no-enhances "${PKGS[@]}" 2>/dev/null | grep -E '^[a-z0-9]' | sort -u || true)
need=()
for p in $deps; do
    case $p in  # the toolchain itself always, so the cache is complete even beside a partial install
        *aarch64*|*arm64-cross*|qemu-user*) need+=("$p"); continue ;;
    esac
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [ "$status" = "install ok installed" ] || need+=("$p")  # host libraries (libmpc, zlib...) if missing
done
if [ ${#need[@]} -eq 0 ] ||
   ! (cd "$work" && apt-get "${APT_OPTS[@]}" download -qq "${need[@]}" >/dev/null 2>&1); then
    echo "install_arm_toolchain: could not install or download ${PKGS[*]}." >&2
    echo "  Install them as root: apt-get install --no-install-recommends ${PKGS[*]}" >&2
    exit 1
fi
rm -rf "$CACHE/usr" "$CACHE/.complete"
mkdir -p "$CACHE"
for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$CACHE"; done
# keep only what the test runs: the other 30 qemu targets and the docs are 400 MiB
find "$CACHE/usr/bin" -name 'qemu-*' ! -name qemu-aarch64-static ! -name qemu-aarch64 -delete
rm -rf "$CACHE/usr/share/doc" "$CACHE/usr/share/man" "$CACHE/usr/share/locale" "$CACHE/apt"
# The cross gcc finds cc1, as, ld, headers and libraries relative to its own path; the test adds
# --sysroot (so the host's /usr/include is never searched) and LD_LIBRARY_PATH for binutils' own .so files.
if [ ! -x "$CACHE/usr/bin/aarch64-linux-gnu-gcc" ]; then
    ln -sf "$(basename "$(ls "$CACHE"/usr/bin/aarch64-linux-gnu-gcc-[0-9]* | head -1)")" \
        "$CACHE/usr/bin/aarch64-linux-gnu-gcc"
fi
touch "$CACHE/.complete"
have_cached_tools || { echo "install_arm_toolchain: unpacked packages lack the tools in $CACHE" >&2; exit 1; }
