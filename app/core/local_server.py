"""Settings → Local server: serve the app's loaded model over the OpenAI/Anthropic APIs.

Why a separate controller: the window decides *when* (a model is loaded, the user switched the
server on, the app closes), this decides *how* — the engine lent through
:class:`runtime.server.EngineAccess` with the chat worker's own lock, so an API request and the
user's chat never run the engine at the same time — and turns every failure into one sentence.
Qt-free; the key comes from the keyring (:mod:`app.core.secrets`) and is never stored or logged here.
"""

from __future__ import annotations

import logging
from typing import Any

from app.core.secrets import SERVER_KEY, get_key
from app.core.settings_model import ServerSettings

log = logging.getLogger(__name__)


class LocalServerError(Exception):
    """The server could not start; the message is for the user."""


class LocalServer:
    """At most one running server; :meth:`start` replaces a running one."""

    def __init__(self) -> None:
        self.handle: Any = None
        self.model_id = ""

    @property
    def running(self) -> bool:
        return self.handle is not None

    @property
    def url(self) -> str:
        return str(self.handle.url) if self.handle is not None else ""

    def start(self, engine: Any, model_id: str, lock: Any, settings: ServerSettings) -> str:
        """Listen on ``settings.host:port`` serving ``engine``; returns the URL. Raises LocalServerError."""
        from runtime.server import EngineAccess, ServerConfig, ServerError, start_server

        self.stop()
        key = get_key(SERVER_KEY)
        if not settings.loopback and key is None:
            raise LocalServerError(f"Set an API key first: a server on {settings.host} can be reached from other "
                                   "computers, so it needs one.")
        config = ServerConfig(host=settings.host.strip(), port=int(settings.port),
                              api_key=key.reveal() if key is not None else None, model_id=model_id)
        try:
            self.handle = start_server(EngineAccess(engine, model_id, lock), config)
        except ServerError as exc:
            raise LocalServerError(str(exc)) from None
        except OSError as exc:
            raise LocalServerError(f"cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc}") from None
        self.model_id = model_id
        log.info("local API server serving %s on %s", model_id, self.handle.url)
        return self.url

    def stop(self) -> None:
        """Stop listening; a running API request is cut off at its next token (the server's own stop)."""
        handle, self.handle = self.handle, None
        if handle is not None:
            try:
                handle.stop()
            except Exception as exc:  # noqa: BLE001 - closing the app must not fail here
                log.warning("stopping the local server failed: %s", type(exc).__name__)

    def stats(self) -> dict[str, Any] | None:
        """``ServerStats`` as a dict (requests served, tokens/s, …) or None when not running."""
        if self.handle is None:
            return None
        import dataclasses

        try:
            return dataclasses.asdict(self.handle.stats())
        except Exception as exc:  # noqa: BLE001 - the gauges must never break the app
            log.debug("server stats failed: %s", exc)
            return None
