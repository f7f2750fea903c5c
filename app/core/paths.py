"""Where the app keeps its files: data (history, models), config (settings), logs.

Why one module: tests and portable installs must be able to move *everything* with one switch.
The locations come from the hub module's :class:`runtime.hub.paths.HubPaths`, so the app and the
hub agree: ``TERNARY_CHAT_HOME`` puts data, config and logs under one folder, otherwise
``platformdirs`` decides (``~/.local/share/ternary-chat`` etc. on Linux, ``%LOCALAPPDATA%`` on
Windows, ``~/Library`` on macOS).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from runtime.hub.paths import APP_NAME, HOME_ENV, HubPaths

__all__ = ["APP_NAME", "HOME_ENV", "config_dir", "data_dir", "default_models_dir", "free_sibling", "log_dir",
           "moved_aside"]

# (where a folder was expected, where the file found there was moved): the app tells the user.
moved_aside: list[tuple[Path, Path]] = []


def free_sibling(path: Path, tag: str) -> Path:
    """``<name>.<tag>-<timestamp>`` beside ``path``, not yet taken: where a damaged or superseded file
    is kept (history, settings, a file in a folder's place), so nothing is ever overwritten."""
    base = f"{path.name}.{tag}-{time.strftime('%Y%m%d-%H%M%S')}"
    candidate, n = path.with_name(base), 2
    while candidate.exists() or candidate.is_symlink():
        candidate, n = path.with_name(f"{base}-{n}"), n + 1
    return candidate


def _ensure(path: Path) -> Path:
    """Create the folder; a file (or anything else) in its place is moved aside, never deleted.

    Why: the app must start even when something else sits where its folder belongs; the user
    is told where the thing was moved (see :data:`moved_aside`).
    """
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocker = next((p for p in (path, *path.parents) if (p.exists() or p.is_symlink()) and not p.is_dir()), None)
        if blocker is None:
            raise
        target = free_sibling(blocker, "damaged")
        os.replace(blocker, target)
        moved_aside.append((blocker, target))
        path.mkdir(parents=True, exist_ok=True)
    return path


def data_dir() -> Path:
    """History database and other user data."""
    return _ensure(HubPaths.resolve().data_dir)


def config_dir() -> Path:
    """settings.json (the hub keeps hub_settings.json next to it)."""
    return _ensure(HubPaths.resolve().config_dir)


def log_dir() -> Path:
    """Rotating log files (never contain tokens or chat text)."""
    return _ensure(HubPaths.resolve().log_dir)


def default_models_dir() -> Path:
    """Default storage folder for downloaded and imported models (the hub's models folder)."""
    return _ensure(HubPaths.resolve().models_dir)
