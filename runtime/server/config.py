"""What a server instance may do: address, key, limits. Checked before anything listens."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from runtime.errors import TernaryError


class ServerError(TernaryError):
    """The server cannot start as asked (port taken, a public address without an API key, bad limits)."""


@dataclass
class ServerConfig:
    """Settings of one ``ternary serve`` / app server. Defaults are the safe ones: loopback, no CORS."""

    host: str = "127.0.0.1"
    port: int = 8731  # 0 = any free port (tests); ServerHandle.url says which
    api_key: str | None = None
    max_queue: int = 16  # requests waiting behind the running ones; one more gets 429
    max_batch: int = 1  # requests decoded at once when the engine batches (Engine.enable_batching)
    max_body_bytes: int = 4 * 1024 * 1024
    max_tokens_limit: int = 8192  # the largest max_tokens a request may ask for
    cors_origins: list[str] = field(default_factory=list)  # empty = CORS off
    model_id: str | None = None  # name in /v1/models (default: the EngineAccess's model_id)


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach (127.0.0.0/8, ::1, "localhost")."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_config(config: ServerConfig) -> None:
    """Raise :class:`ServerError` for a configuration that must not run (before binding anything)."""
    if not is_loopback(config.host) and not config.api_key:
        raise ServerError(f"refusing to listen on {config.host} without an API key: anyone on the network could "
                          "use the model; set one (ternary serve --api-key-env VAR) or bind 127.0.0.1")
    if config.api_key is not None and not config.api_key.strip():
        raise ServerError("the API key is empty")
    if not isinstance(config.port, int) or not 0 <= config.port <= 65535:
        raise ServerError(f"the port must be a whole number from 0 to 65535, got {config.port!r}")
    if not isinstance(config.max_batch, int) or not 1 <= config.max_batch <= 64:
        raise ServerError(f"max_batch must be a whole number from 1 to 64, got {config.max_batch!r}")
    if config.max_queue < 0:
        raise ServerError(f"max_queue must be 0 or more, got {config.max_queue}")
    if config.max_body_bytes < 1024:
        raise ServerError(f"max_body_bytes must be at least 1024, got {config.max_body_bytes}")
    if config.max_tokens_limit < 1:
        raise ServerError(f"max_tokens_limit must be at least 1, got {config.max_tokens_limit}")
    if "*" in config.cors_origins and config.api_key is None and not is_loopback(config.host):
        raise ServerError("CORS for every origin needs an API key")
