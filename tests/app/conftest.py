"""Isolate every app test from the real user directories."""

import pytest


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    monkeypatch.setenv("TERNARY_CHAT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"
