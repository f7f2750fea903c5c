"""One engine, lent to one request at a time (the engine is not thread-safe)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any


class EngineAccess:
    """Lends the one Engine to one request at a time; the app's chat worker shares the same lock.

    ``engine`` may be ``None`` while a model loads (``ternary serve`` listens first, so clients get
    503 "loading" instead of "connection refused"); :meth:`set_engine` fills it in.
    """

    def __init__(self, engine: Any, model_id: str, lock: threading.Lock | None = None) -> None:
        self.engine = engine
        self.model_id = model_id
        self.lock = lock if lock is not None else threading.Lock()

    def set_engine(self, engine: Any) -> None:
        with self.lock:
            self.engine = engine

    @contextlib.contextmanager
    def lease(self) -> Iterator[Any]:
        """Block until the engine is free, then hold it for the ``with`` block."""
        with self.lock:
            yield self.engine
