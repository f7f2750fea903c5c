"""Qt-free parts of Settings → Local server and remote backends: what is saved, what is refused."""

from __future__ import annotations

import json
import threading

import keyring
import keyring.backends.fail
import pytest

from app.core.local_server import LocalServer, LocalServerError
from app.core.secrets import SERVER_KEY, clear_key, get_key, set_key
from app.core.settings_model import AppSettings, ServerSettings


@pytest.fixture(autouse=True)
def _no_real_keyring():
    previous = keyring.get_keyring()
    keyring.set_keyring(keyring.backends.fail.Keyring())  # keys fall back to this process's memory
    yield
    keyring.set_keyring(previous)
    clear_key(SERVER_KEY)


def test_server_and_remotes_round_trip_and_bad_values_reset(tmp_path) -> None:
    s = AppSettings()
    s.server = ServerSettings(enabled=True, host="0.0.0.0", port=9001)
    s.remotes = {"lab": "http://10.0.0.2:8000/v1"}
    path = s.save(tmp_path / "settings.json")
    again = AppSettings.load(path)
    assert again.server == s.server and again.remotes == s.remotes
    data = json.loads(path.read_text())
    data["server"]["port"] = 70000
    data["remotes"]["bad"] = "not a url"
    fixed = AppSettings.from_dict(data)
    assert fixed.server.port == 8731 and fixed.server.host == "0.0.0.0"  # only the bad value falls back
    assert fixed.remotes == {"lab": "http://10.0.0.2:8000/v1"}
    assert ServerSettings(host="::1", port=5).url == "http://[::1]:5" and ServerSettings(host="::1").loopback


def test_public_address_needs_a_key_and_the_key_never_reaches_the_settings(tmp_path) -> None:
    server = LocalServer()
    with pytest.raises(LocalServerError, match="Set an API key first"):
        server.start(None, "m", threading.Lock(), ServerSettings(enabled=True, host="0.0.0.0", port=8731))
    assert not server.running
    assert set_key(SERVER_KEY, "  sk-local-1  ") is False  # no secure keyring here: memory only, and said so
    assert get_key(SERVER_KEY).reveal() == "sk-local-1" and "sk-local-1" not in repr(get_key(SERVER_KEY))
    s = AppSettings()
    s.server.enabled = True
    text = s.save(tmp_path / "settings.json").read_text()
    assert "sk-local-1" not in text
    clear_key(SERVER_KEY)
    assert get_key(SERVER_KEY) is None
