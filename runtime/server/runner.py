"""Run the app under uvicorn in a background thread: what ``ternary serve`` and the desktop app call.

The socket is bound here, before uvicorn starts, so a taken port is a :class:`ServerError` with a
clear message (not a log line in another thread) and port 0 gives a free port the handle reports.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

from runtime.server.app import build_app
from runtime.server.config import ServerConfig, ServerError, check_config
from runtime.server.gateway import Gateway
from runtime.server.scheduler import Scheduler, ServerStats

START_TIMEOUT_S = 30.0


class ServerHandle:
    """A running server: its URL, live counters, and stop."""

    def __init__(self, url: str, server: Any, thread: threading.Thread, scheduler: Scheduler) -> None:
        self.url = url
        self._server = server
        self._thread = thread
        self._scheduler = scheduler

    def stats(self) -> ServerStats:
        return self._scheduler.stats()

    def stop(self, timeout: float = 5.0) -> None:
        """Cancel running and queued requests, close connections, end the thread."""
        self._scheduler.stop(timeout)
        self._server.should_exit = True
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._server.force_exit = True
            self._thread.join(timeout)


def _bind(host: str, port: int) -> socket.socket:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ServerError(f"cannot resolve the host {host!r}: {exc}") from None
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise ServerError(f"cannot listen on {host}:{port}: {exc.strerror or exc} (is another server using the "
                          "port? pick another with --port)") from None
    sock.set_inheritable(True)
    return sock


def start_server(access: Any, config: ServerConfig) -> ServerHandle:
    """Start serving ``access``'s engine; returns once the server accepts connections."""
    import uvicorn

    check_config(config)
    sock = _bind(config.host, config.port)
    scheduler = Scheduler(access, config.max_queue, workers=config.max_batch)
    app = build_app(Gateway(access, config, scheduler))
    uv_config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="off", timeout_graceful_shutdown=2,
                               limit_concurrency=None, http="h11")
    server = uvicorn.Server(uv_config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="ternary-serve", daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            scheduler.stop(1.0)
            server.should_exit = True
            sock.close()
            raise ServerError(f"the server on {config.host}:{config.port} did not start")
        time.sleep(0.01)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return ServerHandle(f"http://{shown}:{port}", server, thread, scheduler)
