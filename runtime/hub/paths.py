"""Where the hub keeps things: models (user data dir), settings and user catalog (config dir), logs.

Why platformdirs: each OS has a place users expect (``~/.local/share``, ``~/Library/Application
Support``, ``%LOCALAPPDATA%``). ``TERNARY_CHAT_HOME`` (or an explicit ``home`` argument) puts
everything under one folder instead (portable installs, tests). Models live in the *data* dir, not
the cache dir, because cache cleaners may purge caches and a re-download is gigabytes.

Inside the data dir: ``models/`` (verified files only), ``partial/`` (resumable downloads, their
sidecars and lock files) and ``quarantine/`` (files that failed verification; never loadable).
All three sit on one filesystem so the final ``os.replace`` is atomic.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

APP_NAME = "ternary-chat"
HOME_ENV = "TERNARY_CHAT_HOME"


@dataclass(frozen=True)
class HubPaths:
    data_dir: Path
    config_dir: Path
    log_dir: Path

    @classmethod
    def resolve(cls, home: str | os.PathLike[str] | None = None) -> HubPaths:
        """``home`` argument > ``$TERNARY_CHAT_HOME`` > platformdirs defaults."""
        root = home if home is not None else os.environ.get(HOME_ENV) or None
        if root is not None:
            base = Path(root).expanduser().resolve()
            return cls(data_dir=base / "data", config_dir=base / "config", log_dir=base / "logs")
        import platformdirs

        dirs = platformdirs.PlatformDirs(APP_NAME, appauthor=False)
        return cls(data_dir=Path(dirs.user_data_dir), config_dir=Path(dirs.user_config_dir),
                   log_dir=Path(dirs.user_log_dir))

    @property
    def models_dir(self) -> Path:
        return self.data_dir / "models"

    @property
    def partial_dir(self) -> Path:
        return self.data_dir / "partial"

    @property
    def quarantine_dir(self) -> Path:
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
