"""The request queue: as many generations at once as the engine decodes together, a bounded line behind.

An engine decodes one sequence, or, with continuous batching on (``ternary serve --max-batch N`` on a GPU,
:mod:`runtime.batching`), up to N; :attr:`~runtime.server.access.EngineAccess.parallel` says which. Worker
threads take jobs in arrival order, lease the engine (shared among them when it batches; the app's chat
shares the same lock) and hand every event to the request's asyncio queue. A job cancelled while waiting
leaves the line at once; a running one stops at the engine's next per-token check of its CancelToken, so
its slot is free within one decode step.
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


@dataclass(eq=False)  # a job is itself (it sits in a set while it runs)
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
    """Bounded FIFO in front of the engine, run by ``workers`` threads (at most ``access.parallel`` busy)."""

    def __init__(self, access: Any, max_queue: int, workers: int = 1) -> None:
        self.access = access
        self.max_queue = max_queue
        self._waiting: collections.deque[Job] = collections.deque()
        self._cond = threading.Condition()
        self._running: set[Job] = set()
        self._stopping = False
        self._stats = ServerStats()
        self._durations: collections.deque[float] = collections.deque(maxlen=16)
        self._threads = [threading.Thread(target=self._work, name=f"ternary-serve-worker-{i}", daemon=True)
                         for i in range(max(1, workers))]
        for t in self._threads:
            t.start()

    @property
    def parallel(self) -> int:
        """Requests that run at once now (the rest wait)."""
        return max(1, min(len(self._threads), self.access.parallel))

    # -- requests
    def submit(self, run: Callable[[Any, CancelToken], Iterator[Any]], loop: asyncio.AbstractEventLoop) -> Job:
        """Queue a job; raise 429 when ``max_queue`` requests already wait, 503 while stopping."""
        with self._cond:
            if self._stopping:
                raise APIError(503, "the server is stopping", retry_after=5)
            busy = len(self._running) >= self.parallel
            if len(self._waiting) >= self.max_queue and (busy or self._waiting):
                raise APIError(429, f"the queue is full ({self.max_queue} requests wait for the model, which "
                                    f"runs {self.parallel} at a time); retry later", code="queue_full",
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
            return ServerStats(**{**self._stats.__dict__, "active": len(self._running),
                                  "queued": len(self._waiting)})

    def stop(self, timeout: float = 5.0) -> None:
        """Cancel everything (waiting and running) and end the worker."""
        with self._cond:
            self._stopping = True
            waiting, self._waiting = list(self._waiting), collections.deque()
            for job in self._running:
                job.cancel.cancel()
            self._cond.notify_all()
        for job in waiting:
            job.cancel.cancel()
            job.put(END)
        for t in self._threads:
            t.join(timeout)

    def scheduling(self) -> str:
        """How requests run, in words (``/health``, ``/v1/models``)."""
        n = self.parallel
        if n > 1:
            return f"continuous batching: up to {n} requests share each decode step, others queue"
        return "one request at a time, others queue"

    @property
    def stopping(self) -> bool:
        return self._stopping

    def _retry_after(self) -> int:
        mean = sum(self._durations) / len(self._durations) if self._durations else 1.0
        return max(1, min(600, round(mean * (len(self._waiting) + 1) / self.parallel)))

    # -- the worker
    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and not (self._waiting and len(self._running) < self.parallel):
                    self._cond.wait(0.5)  # also re-reads parallel, which changes when a model loads
                if self._stopping:
                    return
                job = self._waiting.popleft()
                self._running.add(job)
            started = time.perf_counter()
            try:
                self._run(job)
            finally:
                with self._cond:
                    self._running.discard(job)
                    self._durations.append(time.perf_counter() - started)
                    self._cond.notify_all()
                job.put(END)

    def _run(self, job: Job) -> None:
        try:
            with self.access.lease(shared=self.parallel > 1) as engine:
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
