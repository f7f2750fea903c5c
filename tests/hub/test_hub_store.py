"""Model store: only verified, unmodified files are offered; quarantine and paths are safe."""

from __future__ import annotations

import hashlib

import pytest

from runtime.hub.paths import HubPaths
from runtime.hub.store import ModelStore, repo_slug, safe_relative


def test_install_lists_only_verified_files(paths, tmp_path):
    store = ModelStore(paths)
    src = tmp_path / "dl.part"
    src.write_bytes(b"GGUF-model")
    item = store.install(src, "a--b", "m.gguf", size=10, sha256=hashlib.sha256(b"GGUF-model").hexdigest(),
                         record={"source": "hf"})
    assert not src.exists() and item.path.read_bytes() == b"GGUF-model"
    assert [i.filename for i in store.installed()] == ["m.gguf"]
    # a file dropped in by hand (no manifest) is never offered
    (paths.models_dir / "a--b" / "dropped.gguf").write_bytes(b"GGUF")
    assert [i.filename for i in store.installed()] == ["m.gguf"]
    # a file modified after install is flagged, not offered
    item.path.write_bytes(b"GGUF-model-changed")
    assert store.installed() == []
    assert store.installed(include_unloadable=True)[0].state == "modified"
    item.path.unlink()
    assert store.installed(include_unloadable=True)[0].state == "missing"


def test_quarantine_is_never_listed(paths, tmp_path):
    store = ModelStore(paths)
    bad = tmp_path / "bad.part"
    bad.write_bytes(b"<html>")
    q = store.quarantine(bad, "m.gguf", ["magic: expected GGUF header, got HTML"])
    assert q.parent == paths.quarantine_dir and q.exists() and not bad.exists()
    assert store.installed(include_unloadable=True) == []
    assert store.quarantined()[0]["problems"] == ["magic: expected GGUF header, got HTML"]


def test_unsafe_names_are_refused():
    for bad in ("../x.gguf", "/etc/passwd", "a/../../b", ""):
        with pytest.raises(ValueError):
            safe_relative(bad)
    assert str(safe_relative("sub/dir/m.gguf")) == "sub/dir/m.gguf"
    assert repo_slug("prism-ml/Ternary-Bonsai-8B-gguf") == "prism-ml--Ternary-Bonsai-8B-gguf"
    for bad in ("noslash", "a/b/c", "../x", "a/.."):
        with pytest.raises(ValueError):
            repo_slug(bad)


def test_paths_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("TERNARY_CHAT_HOME", str(tmp_path / "env"))
    assert HubPaths.resolve().data_dir == (tmp_path / "env" / "data").resolve()
    assert HubPaths.resolve(tmp_path / "arg").config_dir == (tmp_path / "arg" / "config").resolve()
    monkeypatch.delenv("TERNARY_CHAT_HOME")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    import sys

    if sys.platform.startswith("linux"):
        assert HubPaths.resolve().data_dir == tmp_path / "xdg" / "ternary-chat"
