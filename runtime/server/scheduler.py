"""The request queue: one generation at a time on the engine, a bounded line of waiting requests.

Why one at a time: the engine decodes one sequence (batched decoding is not built), and the app's
chat shares the same engine through :class:`~runtime.server.access.EngineAccess`'s lock. One worker
thread takes jobs in arrival order, leases the engine, and hands every event to the request's
asyncio queue. A job cancelled while waiting leaves the line at once; a running one stops at the
engine's next per-token check of its CancelToken, so the slot is free within one decode step.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from runtime.generation import CancelToken, DoneEvent
from runtime.server.errors import APIError

END = object()  # the last item of every job's queue


@dataclass
class JobFailed:
    """The engine raised: the request ends with this error (the server goes on)."""

    error: BaseException


@dataclass
class Job:
    run: Callable[[Any, CancelToken], Iterator[Any]]  # engine, cancel -> events; called in the worker
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    cancel: CancelToken = field(default_factory=CancelToken)
    submitted: float = field(default_factory=time.perf_counter)

    def put(self, item: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, item)
        except RuntimeError:  # the event loop is gone (server stopping): nobody listens any more
            self.cancel.cancel()


@dataclass
class ServerStats:
    requests_served: int = 0
    requests_failed: int = 0
    requests_cancelled: int = 0  # the client went away (or the server stopped) before the answer ended
    tokens_generated: int = 0
    tokens_per_s: float = 0.0  # the last request's decode tok/s
    active: int = 0
    queued: int = 0


class Scheduler:
    """Bounded FIFO in front of the engine, run by one worker thread."""

    def __init__(self, access: Any, max_queue: int) -> None:
        self.access = access
        self.max_queue = max_queue
        self._waiting: collections.deque[Job] = collections.deque()
        self._cond = threading.Condition()
        self._running: Job | None = None
        self._stopping = False
        self._stats = ServerStats()
        self._durations: collections.deque[float] = collections.deque(maxlen=16)
        self._thread = threading.Thread(target=self._work, name="ternary-serve-scheduler", daemon=True)
        self._thread.start()

    # -- requests
    def submit(self, run: Callable[[Any, CancelToken], Iterator[Any]], loop: asyncio.AbstractEventLoop) -> Job:
        """Queue a job; raise 429 when ``max_queue`` requests already wait, 503 while stopping."""
        with self._cond:
            if self._stopping:
                raise APIError(503, "the server is stopping", retry_after=5)
            if len(self._waiting) >= self.max_queue and (self._running is not None or self._waiting):
                raise APIError(429, f"the queue is full ({self.max_queue} requests wait for the model, which "
                                    "runs one request at a time); retry later", code="queue_full",
                               retry_after=self._retry_after())
            job = Job(run, loop)
            self._waiting.append(job)
            self._cond.notify()
            return job

    def cancel(self, job: Job) -> None:
        """The client went away: drop the job from the line, or stop it at the next token."""
        job.cancel.cancel()
        with self._cond:
            if job in self._waiting:
                self._waiting.remove(job)
                self._stats.requests_cancelled += 1
                job.put(END)

    def record_failure(self) -> None:
        with self._cond:
            self._stats.requests_failed += 1

    def stats(self) -> ServerStats:
        with self._cond:
            return ServerStats(**{**self._stats.__dict__, "active": int(self._running is not None),
                                  "queued": len(self._waiting)})

    def stop(self, timeout: float = 5.0) -> None:
        """Cancel everything (waiting and running) and end the worker."""
        with self._cond:
            self._stopping = True
            waiting, self._waiting = list(self._waiting), collections.deque()
            if self._running is not None:
                self._running.cancel.cancel()
            self._cond.notify_all()
        for job in waiting:
            job.cancel.cancel()
            job.put(END)
        self._thread.join(timeout)

    @property
    def stopping(self) -> bool:
        return self._stopping

    def _retry_after(self) -> int:
        mean = sum(self._durations) / len(self._durations) if self._durations else 1.0
        return max(1, min(600, round(mean * (len(self._waiting) + 1))))

    # -- the worker
    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                job = self._waiting.popleft()
                self._running = job
            started = time.perf_counter()
            try:
                self._run(job)
            finally:
                with self._cond:
                    self._running = None
                    self._durations.append(time.perf_counter() - started)
                job.put(END)

    def _run(self, job: Job) -> None:
        try:
            with self.access.lease() as engine:
                if job.cancel.cancelled:
                    with self._cond:
                        self._stats.requests_cancelled += 1
                    return
                if engine is None:
                    raise APIError(503, "the model is loading; retry in a moment", retry_after=5)
                done = None
                for event in job.run(engine, job.cancel):
                    if isinstance(event, DoneEvent):
                        done = event
                    job.put(event)
        except BaseException as exc:  # noqa: BLE001 - any engine failure ends this request, not the server
            with self._cond:
                self._stats.requests_failed += 1
            job.put(JobFailed(exc))
            return
        with self._cond:
            if done is not None and done.stats.finish_reason != "cancelled":
                self._stats.requests_served += 1
            else:
                self._stats.requests_cancelled += 1
            if done is not None:
                self._stats.tokens_generated += done.stats.generated_tokens
                if done.stats.decode_tok_s > 0:
                    self._stats.tokens_per_s = done.stats.decode_tok_s
