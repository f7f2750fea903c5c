"""Fixtures for the hub tests: isolated dirs, an in-memory keyring, the fake hub server."""

from __future__ import annotations

import keyring
import keyring.backend
import pytest
from hub_fake_server import FAST_RETRY, FakeHub

from runtime.hub.download import RetryPolicy
from runtime.hub.fetch import ModelFetcher
from runtime.hub.paths import HubPaths
from runtime.hub.settings import HubSettings
from runtime.hub.tokens import TokenStore, _session_tokens


class MemoryKeyring(keyring.backend.KeyringBackend):
    """Dict-backed keyring. Negative priority: keyring's auto-detection can never pick it."""

    priority = -1

    def __init__(self) -> None:
        super().__init__()
        self.store: dict[tuple[str, str], str] = {}

    def get_password(self, service, username):
        return self.store.get((service, username))

    def set_password(self, service, username, password):
        self.store[(service, username)] = password

    def delete_password(self, service, username):
        from keyring.errors import PasswordDeleteError

        if (service, username) not in self.store:
            raise PasswordDeleteError("not found")
        del self.store[(service, username)]


@pytest.fixture(autouse=True)
def hub_env(monkeypatch):
    """No real tokens, endpoints, proxies or home dirs leak into a test."""
    for var in ("HF_TOKEN", "MODELSCOPE_API_TOKEN", "HF_ENDPOINT", "MODELSCOPE_ENDPOINT", "TERNARY_CHAT_HOME",
                "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    _session_tokens.clear()
    yield
    _session_tokens.clear()


@pytest.fixture(autouse=True)
def memory_keyring():
    previous = keyring.get_keyring()
    backend = MemoryKeyring()
    keyring.set_keyring(backend)
    yield backend
    keyring.set_keyring(previous)


@pytest.fixture
def hub():
    with FakeHub() as h:
        yield h


@pytest.fixture
def paths(tmp_path) -> HubPaths:
    return HubPaths.resolve(tmp_path / "home").ensure()


@pytest.fixture
def make_fetcher(paths, hub):
    def make(source: str = "auto", hf_endpoint: str | None = None, ms_endpoint: str | None = None,
             retry: RetryPolicy = FAST_RETRY, stall_timeout_s: float = 10.0) -> ModelFetcher:
        settings = HubSettings(source=source, hf_endpoint=hf_endpoint or hub.url,
                               modelscope_endpoint=ms_endpoint or hub.url)
        return ModelFetcher(paths, settings, TokenStore(), retry=retry, stall_timeout_s=stall_timeout_s)

    return make
