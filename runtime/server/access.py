"""One engine, lent to one request at a time, or to several when it batches (the engine's single-sequence
path is not thread-safe; its continuous-batching path is)."""

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
        self._sharers = 0
        self._sharers_lock = threading.Lock()

    def set_engine(self, engine: Any) -> None:
        with self.lock:
            self.engine = engine

    @property
    def parallel(self) -> int:
        """Requests the engine decodes at once: its batch size with continuous batching on, else 1."""
        batch = self.engine.batch if self.engine is not None else None
        return batch.max_batch if batch is not None else 1

    @contextlib.contextmanager
    def lease(self, shared: bool = False) -> Iterator[Any]:
        """Block until the engine is free, then hold it for the ``with`` block. ``shared``: hold it together
        with other shared leases (a batching engine's requests); the first takes the lock, the last gives it
        back, so the app's chat waits until no request runs, as it does for one."""
        if not shared:
            with self.lock:
                yield self.engine
            return
        with self._sharers_lock:  # serialises the first taker against the last leaver
            if self._sharers == 0:
                self.lock.acquire()
            self._sharers += 1
        try:
            yield self.engine
        finally:
            with self._sharers_lock:
                self._sharers -= 1
                if self._sharers == 0:
                    self.lock.release()
