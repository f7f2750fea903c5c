"""Where the hub keeps things: models (user data dir), settings and user catalog (config dir), logs.

Why platformdirs: each OS has a place users expect (``~/.local/share``, ``~/Library/Application
Support``, ``%LOCALAPPDATA%``). ``TERNARY_CHAT_HOME`` (or an explicit ``home`` argument) puts
everything under one folder instead (portable installs, tests). Models live in the *data* dir, not
the cache dir, because cache cleaners may purge caches and a re-download is gigabytes.

Inside the data dir: ``models/`` (verified files only), ``partial/`` (resumable downloads, their
sidecars and lock files) and ``quarantine/`` (files that failed verification; never loadable).
All three sit on one filesystem so the final ``os.replace`` is atomic.

A user-chosen models folder (``models_dir`` in ``hub_settings.json``, set from the GUI's
Settings → Downloads) replaces ``models/``; then ``partial/`` and ``quarantine/`` become the
hidden ``.partial/`` and ``.quarantine/`` *inside* that folder, so they stay on its filesystem
and ``os.replace`` stays atomic (the store lists only ``*.verified.json`` manifests, which those
folders never hold).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

from runtime import flags

APP_NAME = "ternary-chat"
HOME_ENV = "TERNARY_CHAT_HOME"


@dataclass(frozen=True)
class HubPaths:
    data_dir: Path
    config_dir: Path
    log_dir: Path
    models_override: Path | None = None  # the user's models folder, from hub_settings.json

    @classmethod
    def resolve(cls, home: str | os.PathLike[str] | None = None) -> HubPaths:
        """``home`` argument > ``$TERNARY_CHAT_HOME`` > platformdirs defaults."""
        root = home if home is not None else flags.value(HOME_ENV) or None
        if root is not None:
            base = Path(root).expanduser().resolve()
            paths = cls(data_dir=base / "data", config_dir=base / "config", log_dir=base / "logs")
        else:
            import platformdirs

            dirs = platformdirs.PlatformDirs(APP_NAME, appauthor=False)
            paths = cls(data_dir=Path(dirs.user_data_dir), config_dir=Path(dirs.user_config_dir),
                        log_dir=Path(dirs.user_log_dir))
        override = stored_models_dir(paths.settings_file)
        return replace(paths, models_override=override) if override is not None else paths

    @property
    def default_models_dir(self) -> Path:
        """Where models go when the user chose no folder."""
        return self.data_dir / "models"

    @property
    def models_dir(self) -> Path:
        return self.models_override if self.models_override is not None else self.default_models_dir

    @property
    def partial_dir(self) -> Path:
        return self.models_override / ".partial" if self.models_override is not None else self.data_dir / "partial"

    @property
    def quarantine_dir(self) -> Path:
        if self.models_override is not None:
            return self.models_override / ".quarantine"
        return self.data_dir / "quarantine"

    @property
    def user_catalog_file(self) -> Path:
        return self.config_dir / "user_catalog.json"

    @property
    def settings_file(self) -> Path:
        return self.config_dir / "hub_settings.json"

    @property
    def log_file(self) -> Path:
        return self.log_dir / "hub.log"

    def ensure(self) -> HubPaths:
        for d in (self.models_dir, self.partial_dir, self.quarantine_dir, self.config_dir, self.log_dir):
            d.mkdir(parents=True, exist_ok=True)
        return self


def stored_models_dir(settings_file: Path) -> Path | None:
    """The ``models_dir`` saved in ``hub_settings.json`` (absolute path), or ``None`` for the default.

    Read here (not through :class:`runtime.hub.settings.HubSettings`) because settings.py imports
    this module; an unreadable file or a relative/empty value means "the default folder".
    """
    try:
        data = json.loads(settings_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = data.get("models_dir") if isinstance(data, dict) else None
    if not isinstance(value, str) or not value.strip():
        return None
    path = Path(value.strip()).expanduser()
    return path.resolve() if path.is_absolute() else None
