"""One way to run slow work off the GUI thread: :class:`Job`.

Why: reading a document, detecting hardware, downloading and converting a model each take seconds
to minutes and must not freeze the window. They all need the same few things — run a function on
Qt's global thread pool, report progress, be cancelled, and say how it ended — so they share this
one class instead of each writing its own ``QRunnable`` and signal holder.

The work function gets the job: it calls ``job.report(value)`` for progress and checks
``job.cancel_event`` (a :class:`runtime.generation.CancelToken`, the one cancellation type the engine,
the hub and the converter take) to stop early.
How it ended is exactly one of ``finished(result)``, ``failed(exception)`` or ``cancelled()``; a
:class:`runtime.errors.CancelledError`, or any failure after :meth:`Job.cancel`, counts as cancelled.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal

from runtime.errors import CancelledError
from runtime.generation import CancelToken


class Job(QObject):
    """``work(job)`` on the global thread pool, with progress, cancel and how it ended as signals."""

    progress = Signal(object)  # whatever the work passes to report()
    finished = Signal(object)  # the work's return value
    failed = Signal(object)  # the exception it raised
    cancelled = Signal()

    def __init__(self, work: Callable[[Job], Any], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.work = work
        self.cancel_event = CancelToken()
        self.done = threading.Event()  # set once the work has returned or raised, whatever the outcome
        self._runnable: _Runnable | None = None

    def start(self) -> Job:
        """Queue the work on the global pool; returns the job so a call site can keep it in one line."""
        if self._runnable is not None:
            raise RuntimeError("a Job runs once; make a new one to run the work again")
        self._runnable = _Runnable(self)
        QThreadPool.globalInstance().start(self._runnable)
        return self

    def report(self, value: Any) -> None:
        """Progress from the work (any thread); delivered to the GUI thread as ``progress``."""
        self._emit(self.progress, value)

    def cancel(self) -> None:
        """Ask the work to stop; it ends with ``cancelled`` once it notices (thread-safe)."""
        self.cancel_event.set()

    @property
    def is_cancelled(self) -> bool:
        return self.cancel_event.is_set()

    def _run(self) -> None:
        try:
            try:
                result = self.work(self)
            except CancelledError:
                self._emit(self.cancelled)
            except BaseException as exc:  # noqa: BLE001 - delivered to the GUI as a message
                if self.is_cancelled:
                    self._emit(self.cancelled)
                else:
                    self._emit(self.failed, exc)
            else:
                self._emit(self.finished, result)
        finally:
            self.done.set()

    @staticmethod
    def _emit(signal: Any, *args: Any) -> None:
        try:
            signal.emit(*args)
        except RuntimeError:  # the job's owner (a closed window) was deleted: nobody left to tell
            pass


class _Runnable(QRunnable):
    """The pool's handle on a job; holds it so the job outlives a caller that dropped it."""

    def __init__(self, job: Job) -> None:
        super().__init__()
        self.job = job

    def run(self) -> None:
        self.job._run()


def run_in_background(fn: Callable[[], Any], on_done: Callable[[Any], None],
                      on_error: Callable[[BaseException], None]) -> Job:
    """``fn()`` as a :class:`Job` that cannot be cancelled: ``on_done(result)`` or ``on_error(exc)``."""
    job = Job(lambda _job: fn())
    job.finished.connect(on_done)
    job.failed.connect(on_error)
    return job.start()
