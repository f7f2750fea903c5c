"""scripts/check_qt_libs.py and scripts/start.sh: a fresh Linux desktop without the Qt xcb libraries is told
which ones are missing and the exact install command, before Qt dies (issue 26, item 11).

The machine's ``ldd`` and ``ldconfig`` are replaced by fakes on PATH that print recorded outputs, so
every distribution and every state can be tried here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check_qt_libs.py"
sys.path.insert(0, str(ROOT / "scripts"))

import check_qt_libs as cq  # noqa: E402

# the first start of issue 26: libxcb-cursor0 installed, the other two missing
LDD_MISSING = """\tlinux-vdso.so.1 (0x00007ffd5b7f2000)
\tlibQt6XcbQpa.so.6 => /venv/lib/python3.11/site-packages/PySide6/Qt/plugins/platforms/../../lib/libQt6XcbQpa.so.6 (0x7f)
\tlibxcb-icccm.so.4 => not found
\tlibxcb-keysyms.so.1 => not found
\tlibxcb-randr.so.0 => /lib/x86_64-linux-gnu/libxcb-randr.so.0 (0x00007f3c2b9e4000)
\tlibxcb-icccm.so.4 => not found
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f3c2b600000)
"""
LDD_OK = "\tlibxcb-icccm.so.4 => /lib/x86_64-linux-gnu/libxcb-icccm.so.4 (0x00007f)\n"
LDCONFIG_WITH_CURSOR = """1234 libs found in cache `/etc/ld.so.cache'
\tlibxcb-cursor.so.0 (libc6,x86-64) => /lib/x86_64-linux-gnu/libxcb-cursor.so.0
\tlibxcb.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libxcb.so.1
"""
LDCONFIG_WITHOUT_CURSOR = """1233 libs found in cache `/etc/ld.so.cache'
\tlibxcb.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libxcb.so.1
"""
OS_RELEASE = {
    "ubuntu": 'NAME="Ubuntu"\nID=ubuntu\nID_LIKE=debian\nVERSION_ID="24.04"\n',
    "mint": 'NAME="Linux Mint"\nID=linuxmint\nID_LIKE="ubuntu debian"\n',
    "fedora": 'NAME="Fedora Linux"\nID=fedora\nVERSION_ID=41\n',
    "rocky": 'ID="rocky"\nID_LIKE="rhel centos fedora"\n',
    "arch": 'NAME="Arch Linux"\nID=arch\n',
    "manjaro": 'ID=manjaro\nID_LIKE=arch\n',
    "gentoo": 'ID=gentoo\n',
}


def test_parsing_and_package_names():
    assert cq.missing_from_ldd(LDD_MISSING) == ["libxcb-icccm.so.4", "libxcb-keysyms.so.1"]
    assert cq.missing_from_ldd(LDD_OK) == []
    assert cq.in_ldconfig_cache("libxcb-cursor.so.0", LDCONFIG_WITH_CURSOR)
    assert not cq.in_ldconfig_cache("libxcb-cursor.so.0", LDCONFIG_WITHOUT_CURSOR)
    assert {k: cq.manager_for(v) for k, v in OS_RELEASE.items()} == {
        "ubuntu": "apt", "mint": "apt", "fedora": "dnf", "rocky": "dnf", "arch": "pacman", "manjaro": "pacman",
        "gentoo": None}
    libs = ["libxcb-icccm.so.4", "libxcb-keysyms.so.1", "libxcb-cursor.so.0", "libxcb-randr.so.0",
            "libxcb-shape.so.0", "libweird.so.9"]
    assert cq.packages_for(libs, "apt") == (["libxcb-icccm4", "libxcb-keysyms1", "libxcb-cursor0", "libxcb-randr0",
                                             "libxcb-shape0"], ["libweird.so.9"])
    assert cq.packages_for(libs, "dnf")[0] == ["xcb-util-wm", "xcb-util-keysyms", "xcb-util-cursor", "libxcb"]
    assert cq.packages_for(libs, "pacman")[0] == ["xcb-util-wm", "xcb-util-keysyms", "xcb-util-cursor", "libxcb"]
    assert all(len(packages) == 3 and all(packages) for packages in cq.PACKAGES.values())


def _fake_tools(tmp_path: Path, ldd_out: str, ldconfig_out: str) -> dict[str, str]:
    """A PATH whose ldd and ldconfig print the given texts (and a fake plugin file to point them at)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    for name, text in (("ldd", ldd_out), ("ldconfig", ldconfig_out)):
        data = tmp_path / f"{name}.txt"
        data.write_text(text)
        tool = bin_dir / name
        tool.write_text(f"#!/bin/sh\ncat '{data}'\n")
        tool.chmod(0o755)
    (tmp_path / "libqxcb.so").write_bytes(b"\x7fELF fake")
    env = {k: v for k, v in os.environ.items() if k != "QT_QPA_PLATFORM"}
    env["PATH"] = f"{bin_dir}{os.pathsep}{os.path.dirname(shutil.which('cat') or '/bin/cat')}"
    return env


def _check(tmp_path: Path, env: dict[str, str], distro: str) -> subprocess.CompletedProcess:
    release = tmp_path / f"os-release-{distro}"
    release.write_text(OS_RELEASE[distro])
    return subprocess.run([sys.executable, str(SCRIPT), "--plugin", str(tmp_path / "libqxcb.so"),
                           "--os-release", str(release)], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the check runs on Linux only")
def test_missing_libraries_give_the_exact_install_command_per_distribution(tmp_path):
    env = _fake_tools(tmp_path, LDD_MISSING, LDCONFIG_WITH_CURSOR)
    r = _check(tmp_path, env, "ubuntu")
    assert r.returncode == 1
    assert "  libxcb-icccm.so.4\n  libxcb-keysyms.so.1\n" in r.stderr and "cursor" not in r.stderr
    assert "\n  sudo apt-get install -y libxcb-icccm4 libxcb-keysyms1\n" in r.stderr
    assert "\n  sudo dnf install -y xcb-util-wm xcb-util-keysyms\n" in _check(tmp_path, env, "fedora").stderr
    assert "\n  sudo pacman -S --needed xcb-util-wm xcb-util-keysyms\n" in _check(tmp_path, env, "arch").stderr
    unknown = _check(tmp_path, env, "gentoo").stderr  # no known manager: every command, labelled
    assert "apt-get install -y libxcb-icccm4 libxcb-keysyms1    # Debian/Ubuntu" in unknown
    assert "# Fedora" in unknown and "# Arch" in unknown

    # libxcb-cursor is dlopened: ldd cannot see it, the ldconfig cache can
    env = _fake_tools(tmp_path / "cursor", LDD_OK, LDCONFIG_WITHOUT_CURSOR)
    r = _check(tmp_path / "cursor", env, "ubuntu")
    assert r.returncode == 1 and "\n  sudo apt-get install -y libxcb-cursor0\n" in r.stderr

    env = _fake_tools(tmp_path / "ok", LDD_OK, LDCONFIG_WITH_CURSOR)
    r = _check(tmp_path / "ok", env, "ubuntu")
    assert (r.returncode, r.stderr) == (0, "")
    # offscreen or wayland: Qt will not load xcb, nothing to check even with libraries missing
    env = _fake_tools(tmp_path / "skip", LDD_MISSING, LDCONFIG_WITHOUT_CURSOR)
    for qpa in ("offscreen", "wayland", "wayland;xcb"):
        r = _check(tmp_path / "skip", {**env, "QT_QPA_PLATFORM": qpa}, "ubuntu")
        assert (r.returncode, r.stderr) == (0, ""), qpa
    assert cq.skip_reason("darwin", {}) == "not Linux" and cq.skip_reason("win32", {}) == "not Linux"
    assert cq.skip_reason("linux", {"QT_QPA_PLATFORM": "xcb"}) is None


def _start_sh(tmp_path: Path, ldd_out: str) -> subprocess.CompletedProcess:
    """Run the real scripts/start.sh in a copy of the repo whose .venv is a stand-in: python is the test's
    interpreter (and says every package is installed), ternary-chat only prints "app started", ldd is fake."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    for name in ("start.sh", "check_qt_libs.py"):
        shutil.copy(ROOT / "scripts" / name, repo / "scripts" / name)
    env = _fake_tools(tmp_path, ldd_out, LDCONFIG_WITH_CURSOR)
    venv_bin = repo / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "activate").write_text(f'PATH="{venv_bin}:$PATH"\n')
    (venv_bin / "python").write_text(f'#!/bin/sh\n[ "$1" = "-c" ] && exit 0\nexec "{sys.executable}" "$@"\n')
    (venv_bin / "ternary-chat").write_text("#!/bin/sh\necho app started\n")
    for tool in ("python", "ternary-chat"):
        (venv_bin / tool).chmod(0o755)
    env["PATH"] += os.pathsep + os.environ.get("PATH", "/usr/bin:/bin")
    return subprocess.run(["bash", str(repo / "scripts" / "start.sh")], env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the check runs on Linux only")
def test_start_script_stops_with_the_install_command_before_starting_the_app(tmp_path):
    r = _start_sh(tmp_path / "missing", LDD_MISSING)
    assert r.returncode == 1 and "app started" not in r.stdout
    assert "libxcb-icccm.so.4" in r.stderr and "libxcb-keysyms.so.1" in r.stderr and "install" in r.stderr
    r = _start_sh(tmp_path / "ok", LDD_OK)
    assert (r.returncode, r.stdout) == (0, "app started\n"), r.stderr


def test_readme_lists_the_libraries():
    readme = (ROOT / "README.md").read_text()
    for package in ("libxcb-icccm4", "libxcb-keysyms1", "libxcb-cursor0", "xcb-util-wm", "xcb-util-keysyms"):
        assert package in readme
