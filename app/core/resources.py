"""Finds the app's resource files (styles, icons, translations) in a checkout, an install or a
PyInstaller bundle.

Why: ``resources/`` sits beside the packages in the source tree; a wheel installs it as data
files under ``<prefix>/share/ternary-chat/resources`` and PyInstaller unpacks it under
``sys._MEIPASS``. ``TERNARY_CHAT_RESOURCES`` (shared with the hub's catalog lookup) wins.
"""

from __future__ import annotations

import sys
from pathlib import Path

from runtime import flags

RESOURCES_ENV = "TERNARY_CHAT_RESOURCES"


def resource_roots() -> list[Path]:
    roots = []
    if flags.value(RESOURCES_ENV):
        roots.append(Path(flags.value(RESOURCES_ENV)))
    if getattr(sys, "_MEIPASS", None):
        roots.append(Path(sys._MEIPASS) / "resources")
    roots.append(Path(__file__).resolve().parents[2] / "resources")
    for prefix in (sys.prefix, sys.base_prefix):
        roots.append(Path(prefix) / "share" / "ternary-chat" / "resources")
    return roots


def resource_path(relative: str) -> Path | None:
    """The first existing ``<root>/<relative>``, or None."""
    for root in resource_roots():
        candidate = root / relative
        if candidate.exists():
            return candidate
    return None
