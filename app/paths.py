"""Where the app keeps its files: data (history, models), config (settings), logs.

Why one module: tests and portable installs must be able to move *everything* with one switch.
The locations come from the hub module's :class:`runtime.hub.paths.HubPaths`, so the app and the
hub agree: ``TERNARY_CHAT_HOME`` puts data, config and logs under one folder, otherwise
``platformdirs`` decides (``~/.local/share/ternary-chat`` etc. on Linux, ``%LOCALAPPDATA%`` on
Windows, ``~/Library`` on macOS).
"""

from __future__ import annotations

from pathlib import Path

from runtime.hub.paths import APP_NAME, HOME_ENV, HubPaths

__all__ = ["APP_NAME", "HOME_ENV", "config_dir", "data_dir", "default_models_dir", "log_dir"]


def _ensure(path: Path) -> Path:
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
