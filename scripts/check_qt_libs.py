"""Before the first window: are the system libraries Qt's X11 (xcb) platform plugin needs installed?

Why: on a fresh Linux desktop Qt dies with "Could not load the Qt platform plugin xcb" and, since
Qt 6.5, blames ``libxcb-cursor0`` even when that one is installed and the missing ones are others
(``libxcb-icccm4``, ``libxcb-keysyms1``, …). ``ldd`` on the plugin names exactly what is missing;
``libxcb-cursor.so.0`` is loaded with dlopen, so ``ldd`` cannot see it and ``ldconfig -p`` is asked.
This script prints the missing libraries and the one install command for the distribution
(apt, dnf or pacman, from /etc/os-release) and exits 1; ``scripts/start.sh`` runs it before
starting the app. It exits 0 (checking nothing) off Linux and when Qt will not use xcb
(``QT_QPA_PLATFORM`` offscreen, wayland, …).

Usage: ``python scripts/check_qt_libs.py [--plugin PATH] [--os-release PATH]``
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

# soname -> (apt package on Debian/Ubuntu, dnf package on Fedora, pacman package on Arch)
PACKAGES: dict[str, tuple[str, str, str]] = {
    "libxcb-icccm.so.4": ("libxcb-icccm4", "xcb-util-wm", "xcb-util-wm"),
    "libxcb-keysyms.so.1": ("libxcb-keysyms1", "xcb-util-keysyms", "xcb-util-keysyms"),
    "libxcb-image.so.0": ("libxcb-image0", "xcb-util-image", "xcb-util-image"),
    "libxcb-render-util.so.0": ("libxcb-render-util0", "xcb-util-renderutil", "xcb-util-renderutil"),
    "libxcb-cursor.so.0": ("libxcb-cursor0", "xcb-util-cursor", "xcb-util-cursor"),
    "libxcb-util.so.1": ("libxcb-util1", "xcb-util", "xcb-util"),
    "libxcb.so.1": ("libxcb1", "libxcb", "libxcb"),
    "libxcb-randr.so.0": ("libxcb-randr0", "libxcb", "libxcb"),
    "libxcb-shape.so.0": ("libxcb-shape0", "libxcb", "libxcb"),
    "libxcb-xfixes.so.0": ("libxcb-xfixes0", "libxcb", "libxcb"),
    "libxcb-sync.so.1": ("libxcb-sync1", "libxcb", "libxcb"),
    "libxcb-shm.so.0": ("libxcb-shm0", "libxcb", "libxcb"),
    "libxcb-render.so.0": ("libxcb-render0", "libxcb", "libxcb"),
    "libxcb-xkb.so.1": ("libxcb-xkb1", "libxcb", "libxcb"),
    "libxcb-xinerama.so.0": ("libxcb-xinerama0", "libxcb", "libxcb"),
    "libxcb-xinput.so.0": ("libxcb-xinput0", "libxcb", "libxcb"),
    "libxcb-glx.so.0": ("libxcb-glx0", "libxcb", "libxcb"),
    "libxcb-present.so.0": ("libxcb-present0", "libxcb", "libxcb"),
    "libxkbcommon-x11.so.0": ("libxkbcommon-x11-0", "libxkbcommon-x11", "libxkbcommon-x11"),
    "libxkbcommon.so.0": ("libxkbcommon0", "libxkbcommon", "libxkbcommon"),
    "libX11-xcb.so.1": ("libx11-xcb1", "libX11-xcb", "libx11"),
    "libX11.so.6": ("libx11-6", "libX11", "libx11"),
    "libXau.so.6": ("libxau6", "libXau", "libxau"),
    "libXdmcp.so.6": ("libxdmcp6", "libXdmcp", "libxdmcp"),
    "libSM.so.6": ("libsm6", "libSM", "libsm"),
    "libICE.so.6": ("libice6", "libICE", "libice"),
    "libfontconfig.so.1": ("libfontconfig1", "fontconfig", "fontconfig"),
    "libfreetype.so.6": ("libfreetype6", "freetype", "freetype2"),
    "libdbus-1.so.3": ("libdbus-1-3", "dbus-libs", "dbus"),
    "libglib-2.0.so.0": ("libglib2.0-0", "glib2", "glib2"),
    "libgthread-2.0.so.0": ("libglib2.0-0", "glib2", "glib2"),
    "libEGL.so.1": ("libegl1", "libglvnd-egl", "libglvnd"),
    "libGL.so.1": ("libgl1", "libglvnd-glx", "libglvnd"),
    "libGLX.so.0": ("libglx0", "libglvnd-glx", "libglvnd"),
    "libOpenGL.so.0": ("libopengl0", "libglvnd-opengl", "libglvnd"),
}
MANAGERS = ("apt", "dnf", "pacman")
INSTALL = {"apt": "sudo apt-get install -y", "dnf": "sudo dnf install -y", "pacman": "sudo pacman -S --needed"}
DLOPENED = ("libxcb-cursor.so.0",)  # loaded at run time by Qt >= 6.5, invisible to ldd
NON_XCB_PLATFORMS = ("offscreen", "wayland", "wayland-egl", "minimal", "vnc", "eglfs", "linuxfb")

_NOT_FOUND = re.compile(r"^\s*(\S+)\s+=>\s+not found", re.MULTILINE)


def missing_from_ldd(text: str) -> list[str]:
    """Sonames ``ldd`` reports as ``not found`` (each once, in order)."""
    return list(dict.fromkeys(_NOT_FOUND.findall(text)))


def in_ldconfig_cache(soname: str, ldconfig_text: str) -> bool:
    """Whether ``ldconfig -p`` output lists ``soname`` (``\tlibxcb-cursor.so.0 (libc6,x86-64) => /usr/lib/…``)."""
    return any(line.strip().startswith(soname + " ") for line in ldconfig_text.splitlines())


def manager_for(os_release: str) -> str | None:
    """apt, dnf or pacman from the text of /etc/os-release (ID, then ID_LIKE); None when unknown."""
    fields = dict(re.findall(r'^([A-Z_]+)="?([^"\n]*)"?$', os_release, re.MULTILINE))
    ids = [fields.get("ID", "")] + fields.get("ID_LIKE", "").split()
    for distro in ids:
        distro = distro.lower()
        if distro in ("debian", "ubuntu", "linuxmint", "pop", "raspbian", "elementary", "neon", "kali"):
            return "apt"
        if distro in ("fedora", "rhel", "centos", "rocky", "almalinux", "ol", "amzn", "nobara"):
            return "dnf"
        if distro in ("arch", "manjaro", "endeavouros", "garuda", "artix"):
            return "pacman"
    return None


def packages_for(libs: list[str], manager: str) -> tuple[list[str], list[str]]:
    """(packages to install, sonames with no known package) for ``manager``."""
    column = MANAGERS.index(manager)
    packages: list[str] = []
    unknown: list[str] = []
    for lib in libs:
        entry = PACKAGES.get(lib)
        if entry is None:
            unknown.append(lib)
        elif entry[column] not in packages:
            packages.append(entry[column])
    return packages, unknown


def install_lines(libs: list[str], manager: str | None) -> list[str]:
    """The install command for ``manager``, or one per manager when the distribution is not known."""
    lines = []
    for m in ([manager] if manager else MANAGERS):
        packages, _unknown = packages_for(libs, m)
        if packages:
            label = {"apt": "Debian/Ubuntu", "dnf": "Fedora", "pacman": "Arch"}[m]
            lines.append(f"  {INSTALL[m]} {' '.join(packages)}" + ("" if manager else f"    # {label}"))
    return lines


def report(libs: list[str], manager: str | None) -> str:
    """What the user reads: which libraries are missing and the command that installs them."""
    out = ["Ternary Chat cannot open its window yet: the Qt X11 (xcb) platform plugin needs these system "
           "libraries, which are missing:"]
    out += [f"  {lib}" for lib in libs]
    lines = install_lines(libs, manager)
    if lines:
        out.append("Install them with:" if manager else "Install them with the command for your distribution:")
        out += lines
    unknown = packages_for(libs, manager or "apt")[1]
    if unknown:
        out.append("No package name is known here for: " + ", ".join(unknown) + " — install the package of "
                   "your distribution that provides " + ("it." if len(unknown) == 1 else "them."))
    out.append("Then run bash scripts/start.sh again.")
    return "\n".join(out)


def find_plugin() -> Path | None:
    """PySide6's ``Qt/plugins/platforms/libqxcb.so``, found without importing Qt."""
    spec = importlib.util.find_spec("PySide6")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        plugin = Path(folder) / "Qt" / "plugins" / "platforms" / "libqxcb.so"
        if plugin.is_file():
            return plugin
    return None


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def skip_reason(platform: str, environ: dict[str, str]) -> str | None:
    """Why no check is needed here, or None."""
    if not platform.startswith("linux"):
        return "not Linux"
    qpa = environ.get("QT_QPA_PLATFORM", "").split(";")[0].split(":")[0].strip().lower()
    if qpa in NON_XCB_PLATFORMS:
        return f"QT_QPA_PLATFORM={qpa}: Qt does not use xcb"
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Check the system libraries of Qt's xcb platform plugin.")
    ap.add_argument("--plugin", type=Path, help="libqxcb.so to check (default: PySide6's)")
    ap.add_argument("--os-release", type=Path, default=Path("/etc/os-release"))
    args = ap.parse_args(argv)
    reason = skip_reason(sys.platform, dict(os.environ))
    if reason:
        return 0
    plugin = args.plugin or find_plugin()
    if plugin is None or not plugin.is_file():
        print("note: PySide6's xcb platform plugin (libqxcb.so) was not found; the system library check is "
              "skipped", file=sys.stderr)
        return 0
    ldd = shutil.which("ldd")
    if ldd is None:
        print("note: ldd is not installed; the system library check is skipped", file=sys.stderr)
        return 0
    missing = missing_from_ldd(_run([ldd, str(plugin)]))
    ldconfig = shutil.which("ldconfig") or next((p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig")
                                                 if os.access(p, os.X_OK)), None)
    if ldconfig is not None:
        cache = _run([ldconfig, "-p"])
        missing += [lib for lib in DLOPENED if lib not in missing and cache and not in_ldconfig_cache(lib, cache)]
    if not missing:
        return 0
    try:
        manager = manager_for(args.os_release.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        manager = None
    print(report(missing, manager), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
