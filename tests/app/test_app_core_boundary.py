"""The app's Qt-free core stays Qt-free: every module of ``app.core`` and ``app.knowledge`` imports
with PySide6 made unimportable.

Why a subprocess: this test process has PySide6 loaded already (pytest-qt), and a blocked import
must be the first one. The child installs a meta-path finder that raises on ``PySide6`` before it
imports anything of the app, so a core module that reaches Qt, directly or through another module,
fails with the name of the module that tried.
"""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import app.core
import app.knowledge

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import importlib, sys

class NoQt:
    def find_spec(self, name, path=None, target=None):
        if name == "PySide6" or name.startswith("PySide6."):
            raise ImportError(f"Qt imported by the Qt-free core: {name}")
        return None

sys.meta_path.insert(0, NoQt())
for name in sys.argv[1:]:
    importlib.import_module(name)
print("ok", len(sys.argv) - 1)
"""


def core_modules() -> list[str]:
    names = []
    for pkg in (app.core, app.knowledge):
        names.append(pkg.__name__)
        names += [m.name for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".")]
    return names


def _import_without_qt(names: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CHILD, *names], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_core_modules_import_without_qt() -> None:
    names = core_modules()
    assert {"app.core.settings_model", "app.core.history", "app.core.documents", "app.core.model_fit",
            "app.knowledge.store"} <= set(names)
    proc = _import_without_qt(names)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["ok", str(len(names))]


def test_the_guard_catches_a_qt_import() -> None:
    proc = _import_without_qt(["app.jobs"])  # a view module: it must be refused
    assert proc.returncode != 0 and "Qt imported by the Qt-free core: PySide6" in proc.stderr
