"""A user-chosen models folder: the hub honours ``models_dir`` and the app's folder check."""

from __future__ import annotations

from app.core.settings_model import DownloadSettings, check_models_folder
from runtime.hub.paths import HubPaths
from runtime.hub.settings import HubSettings


def test_hub_paths_honour_models_dir_and_keep_partial_inside(tmp_path, monkeypatch):
    monkeypatch.setenv("TERNARY_CHAT_HOME", str(tmp_path / "home"))
    default = HubPaths.resolve()
    assert default.models_dir == default.data_dir / "models" and default.models_override is None
    chosen = tmp_path / "disk2" / "models"
    HubSettings(models_dir=str(chosen)).save()
    paths = HubPaths.resolve()
    assert paths.models_dir == chosen and paths.default_models_dir == default.models_dir
    assert paths.partial_dir == chosen / ".partial" and paths.quarantine_dir == chosen / ".quarantine"
    assert HubSettings.load().models_dir == str(chosen)  # a CLI load+save keeps the user's folder
    HubSettings(models_dir="relative/folder").save()
    assert HubPaths.resolve().models_dir == default.models_dir  # only absolute paths are honoured


def test_check_models_folder(tmp_path):
    assert check_models_folder(str(tmp_path)).reason == "" and check_models_folder(str(tmp_path)).free_bytes > 0
    new = check_models_folder(str(tmp_path / "a" / "b"))
    assert new.reason == "" and not new.exists
    (tmp_path / "f").write_text("x")
    assert check_models_folder(str(tmp_path / "f")).reason == "not_dir"
    assert check_models_folder(str(tmp_path / "f" / "sub")).reason == "not_creatable"
    assert check_models_folder("models").reason == "relative"
    assert check_models_folder("  ").reason == "empty"
    assert DownloadSettings(models_dir="rel").validate() and not DownloadSettings(models_dir=str(tmp_path)).validate()
