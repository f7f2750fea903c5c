"""Installer recipes: the Linux .desktop entry is valid and points at the real gui-script and icon;
the PyInstaller spec and the Inno Setup script reference files that exist and agree on names."""

import configparser
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INST = ROOT / "installers"


def _desktop() -> configparser.SectionProxy:
    cp = configparser.ConfigParser(interpolation=None, strict=True)
    cp.optionxform = str
    cp.read(INST / "linux" / "ternary-chat.desktop", encoding="utf-8")
    return cp["Desktop Entry"]


def test_desktop_entry_matches_the_package():
    d = _desktop()
    gui_scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["gui-scripts"]
    assert d["Type"] == "Application" and d["Version"] == "1.0" and d["Terminal"] == "false"
    assert d["Exec"].split()[0] in gui_scripts and d["TryExec"] == d["Exec"].split()[0]
    assert (ROOT / "resources" / "icons" / f"{d['Icon']}.svg").is_file()
    assert d["Categories"].endswith(";") and d["Name[zh_CN]"]
    if shutil.which("desktop-file-validate"):  # the real validator when present (CI image, dev boxes)
        r = subprocess.run(["desktop-file-validate", str(INST / "linux" / "ternary-chat.desktop")],
                           capture_output=True, text=True)
        assert r.returncode == 0 and "error" not in r.stdout, r.stdout


def test_install_script_is_valid_bash_and_installs_what_exists():
    script = INST / "linux" / "install.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    assert 'ternary-chat-$s.png' in text
    for size in (32, 48, 64, 128, 256):
        assert (ROOT / "resources" / "icons" / f"ternary-chat-{size}.png").is_file()
    assert "--uninstall" in text and "applications" in text


def test_pyinstaller_spec_and_inno_setup_agree():
    spec = (INST / "pyinstaller" / "ternary-chat.spec").read_text()
    compile(spec, "ternary-chat.spec", "exec")  # valid Python
    for rel in re.findall(r'ROOT / "([^"]+)" / "([^"]+)"(?: / "([^"]+)")?', spec):
        path = ROOT.joinpath(*[p for p in rel if p])
        assert path.exists(), path
    name = re.search(r'^NAME = "([^"]+)"', spec, re.M).group(1)
    iss = (INST / "windows" / "ternary-chat.iss").read_text()
    assert f'#define AppExe "{name}.exe"' in iss and f'dist\\{name}"' in iss
    assert "PrivilegesRequired=lowest" in iss
    icon = re.search(r"^SetupIconFile=(.+)$", iss, re.M).group(1)
    assert (INST / "windows" / icon).is_file()
    assert (INST / "windows" / icon).read_bytes()[:4] == b"\x00\x00\x01\x00"  # ICO header
    assert (INST / "macos" / "ternary-chat.icns").read_bytes()[:4] == b"icns"
