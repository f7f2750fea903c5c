"""Indexing knowledge bases in the background: one job per run, one runner that queues them.

Why a module of its own: the knowledge-base dialog and the chat's attachments bar both index, and
both must not freeze the window, index the same base twice at once, or leave a thread writing to
the database after the window has closed. Indexing reads files, extracts text and may run an
embedding model — minutes for a big folder — so it runs on a thread of its own, talks to the GUI
only through signals (always emitted on the GUI thread), and stops at the next file when
cancelled; what finished before is kept (:func:`app.knowledge.indexer.index_base` commits a file
whole or not at all).

A job opens its own :class:`app.knowledge.store.KnowledgeStore` (its own SQLite connection) on
the file the GUI's store uses, so the GUI's reads never queue behind the job on one connection's
lock (WAL lets them read while the job writes). A ``":memory:"`` store exists only inside its one
connection, so it cannot be indexed in the background: tests use a temporary file.

How to use it (the GUI thread owns the runner)::

    runner = IndexRunner(store.path, embedder=handle)  # one per window; handle: see ``EmbedderSource``
    store.add_paths(base.id, [Path(file)])             # the GUI's own store records what to index
    job = runner.index(base.id)                        # queued; starts when no other job runs
    job.progress.connect(on_progress)                  # IndexProgress, coalesced (latest only):
                                                       #   phase "files": done_files/total_files, current;
                                                       #   phase "embedding": embedded/to_embed
    job.finished.connect(on_finished)                  # IndexReport; report.cancelled after cancel()
    job.failed.connect(on_failed)                      # str: the whole run failed, in the user's language
    job.cancel()                                       # or runner.cancel(base.id)
    runner.shutdown()                                  # in closeEvent: cancels all, waits up to 5 s

Every job ends with exactly one of ``finished`` or ``failed``; ``runner.jobFinished(job)`` follows
either. A queued job cancelled before it started ends with ``failed("Cancelled before it started.")``.
``runner.index(id)`` for a base that is waiting returns its queued job; for a base being indexed
right now it queues one more run (files added meanwhile are picked up). After ``finished`` re-read the base through the GUI's store (``store.files(base_id)``):
the job wrote through its own connection and the GUI's connection sees the committed rows.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from PySide6.QtCore import QCoreApplication, QObject, Qt, Signal, Slot

from runtime.generation import CancelToken

# What a job embeds with: nothing (full-text search only), a ready embedder (``embed_documents``,
# ``model_id``, ``dim``: see ``app.knowledge.indexer.Embedder``), an object with ``get()`` returning
# one or None (a lazy handle: the model loads on the job's thread, not the GUI's), or a function
# returning one or None (an ``app.knowledge.embedder.EmbedderHandle`` is such a handle). A handle or
# function is asked once per job, on the job's thread.
EmbedderSource = Any


def resolve_embedder(source: EmbedderSource, cancel: CancelToken | None = None) -> Any:
    """The embedder ``source`` stands for (see :data:`EmbedderSource`); may load a model: call it off
    the GUI thread. A handle's ``get`` is given ``cancel`` (as :class:`app.knowledge.embedder.EmbedderHandle`
    takes it), so cancelling also stops a model load."""
    if source is None or hasattr(source, "embed_documents"):
        return source
    getter = getattr(source, "get", None)
    if callable(getter):
        return getter(cancel=cancel)
    if callable(source):
        return source()
    raise TypeError(f"not an embedder, a handle with get() or a function: {type(source).__name__}")


def failure_text(exc: BaseException) -> str:
    """A failed run in the interface's language (knowledge errors carry their own English line)."""
    from app.errors import describe, error_text

    return error_text(describe(exc))


class _Bridge(QObject):
    """Carries the worker thread's news to the job on the GUI thread (queued connections only)."""

    poke = Signal()
    done = Signal(object)
    crashed = Signal(object)


class IndexJob(QObject):
    """One indexing run of one base: ``progress(IndexProgress)``, then ``finished(IndexReport)`` or
    ``failed(str)``, all emitted on the GUI thread. Usually made by :meth:`IndexRunner.index`;
    alone: ``IndexJob(store_path, base_id, embedder=...)`` then :meth:`start`.

    Attributes after the end: ``report`` (the IndexReport, or None) and ``error`` ("" or the message).
    """

    started = Signal()
    progress = Signal(object)  # app.knowledge.indexer.IndexProgress
    finished = Signal(object)  # app.knowledge.indexer.IndexReport
    failed = Signal(str)

    def __init__(self, store_path: str | Path, base_id: int, *, embedder: EmbedderSource = None,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        if str(store_path) == ":memory:":
            raise ValueError("an in-memory knowledge store cannot be indexed on another thread; use a file")
        self.store_path = Path(store_path)
        self.base_id = int(base_id)
        self.embedder_source = embedder
        self.cancel_token = CancelToken()
        self.report: Any = None
        self.error = ""
        self.last_progress: Any = None
        self._thread: threading.Thread | None = None
        self._ended = False
        self._lock = threading.Lock()
        self._pending: Any = None
        self._bridge = _Bridge()
        queued = Qt.ConnectionType.QueuedConnection
        self._bridge.poke.connect(self._deliver_progress, queued)
        self._bridge.done.connect(self._on_done, queued)
        self._bridge.crashed.connect(self._on_crashed, queued)

    # -------------------------------------------------------------- GUI thread
    def start(self) -> None:
        """Start the run on a thread of its own (once)."""
        if self._thread is not None:
            raise RuntimeError("this index job was already started")
        self._thread = threading.Thread(target=self._run, name=f"index-base-{self.base_id}", daemon=True)
        self._thread.start()
        self.started.emit()

    def cancel(self) -> None:
        """Stop after the file being indexed; the files done so far stay indexed."""
        self.cancel_token.cancel()

    @property
    def cancelled(self) -> bool:
        return self.cancel_token.cancelled

    def is_running(self) -> bool:
        return self._thread is not None and not self._ended

    def has_ended(self) -> bool:
        return self._ended

    def wait(self, timeout_s: float) -> bool:
        """Block until the thread has stopped (not until the signals were delivered); True if it did."""
        if self._thread is None:
            return True
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    @Slot()
    def _deliver_progress(self) -> None:
        with self._lock:
            p, self._pending = self._pending, None
        if p is not None and not self._ended:
            self.last_progress = p
            self.progress.emit(p)

    @Slot(object)
    def _on_done(self, report: Any) -> None:
        self._deliver_progress()  # the last step before the end, never after it
        self._ended = True
        self.report = report
        self.wait(1.0)
        self.finished.emit(report)

    @Slot(object)
    def _on_crashed(self, exc: BaseException) -> None:
        self._ended = True
        self.error = failure_text(exc)
        self.wait(1.0)
        self.failed.emit(self.error)

    # -------------------------------------------------------------- job thread
    def _on_progress(self, p: Any) -> None:
        """Keep only the newest step; post at most one delivery at a time (a folder of 10,000 small
        files must not flood the GUI's event queue)."""
        with self._lock:
            first = self._pending is None
            self._pending = p
        if first:
            self._bridge.poke.emit()

    def _run(self) -> None:
        from app.knowledge.indexer import index_base
        from app.knowledge.store import KnowledgeStore

        store = None
        try:
            store = KnowledgeStore(self.store_path)
            embedder = resolve_embedder(self.embedder_source, self.cancel_token)
            report = index_base(store, self.base_id, embedder=embedder, progress=self._on_progress,
                                cancel=self.cancel_token)
        except BaseException as exc:  # noqa: BLE001 - shown to the user as the run's failure
            self._bridge.crashed.emit(exc)
        else:
            self._bridge.done.emit(report)
        finally:
            if store is not None:
                store.close()


class IndexRunner(QObject):
    """Runs index jobs one after another (the database has one writer, the CPU few cores).

    ``index(base_id)`` returns the job that will index that base: the queued one if the base is
    already waiting, otherwise a new one queued behind the others. A base being indexed right now
    gets one more run queued after it, so files added meanwhile are picked up (re-indexing is
    incremental, so that run is cheap). Closing the application cancels everything
    (``aboutToQuit``); a window should call :meth:`shutdown` in its ``closeEvent`` itself.
    """

    jobStarted = Signal(object)  # IndexJob
    jobFinished = Signal(object)  # IndexJob, after its finished or failed
    idle = Signal()  # nothing running and nothing queued

    def __init__(self, store_path: str | Path, *, embedder: EmbedderSource = None,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        if str(store_path) == ":memory:":
            raise ValueError("an in-memory knowledge store cannot be indexed on another thread; use a file")
        self.store_path = Path(store_path)
        self.embedder: EmbedderSource = embedder
        self.current: IndexJob | None = None
        self.queue: list[IndexJob] = []
        self._closed = False
        app = QCoreApplication.instance()
        if app is not None:
            app.aboutToQuit.connect(self.shutdown)

    def set_embedder(self, embedder: EmbedderSource) -> None:
        """Use this embedder for jobs started from now on (an installed or removed embedding model)."""
        self.embedder = embedder

    def index(self, base_id: int) -> IndexJob:
        """The job that will (re-)index ``base_id``; connect to its signals right away."""
        if self._closed:
            raise RuntimeError("the index runner was shut down")
        for job in self.queue:
            if job.base_id == base_id:
                return job
        job = IndexJob(self.store_path, base_id, embedder=self.embedder, parent=self)
        self.queue.append(job)
        if self.current is None:
            # after the caller has connected its slots: the event loop starts it, not this call
            from PySide6.QtCore import QTimer

            QTimer.singleShot(0, self._next)
        return job

    def job_for(self, base_id: int) -> IndexJob | None:
        """The running job of this base, else its queued one, else None."""
        if self.current is not None and self.current.base_id == base_id:
            return self.current
        return next((j for j in self.queue if j.base_id == base_id), None)

    def busy(self) -> bool:
        return self.current is not None or bool(self.queue)

    def cancel(self, base_id: int) -> None:
        """Cancel this base's running job (keeping what finished) and drop its queued one."""
        for job in [j for j in self.queue if j.base_id == base_id]:
            self._drop(job)
        if self.current is not None and self.current.base_id == base_id:
            self.current.cancel()

    def cancel_all(self) -> None:
        for job in list(self.queue):
            self._drop(job)
        if self.current is not None:
            self.current.cancel()

    def shutdown(self, timeout_s: float = 5.0) -> bool:
        """Cancel everything and wait up to ``timeout_s`` for the running job's thread; True if it stopped.
        A job stuck in a slow file is left behind (its thread is a daemon and holds no transaction open
        for long); the next start re-indexes incrementally."""
        self._closed = True
        self.cancel_all()
        job = self.current
        return True if job is None else job.wait(timeout_s)

    def wait_idle(self, timeout_s: float) -> bool:
        """Process events until nothing runs or is queued (tests, the CLI-like paths); True if idle."""
        deadline = time.monotonic() + timeout_s
        app = QCoreApplication.instance()
        while self.busy() and time.monotonic() < deadline:
            if app is not None:
                app.processEvents()
            time.sleep(0.01)
        return not self.busy()

    def _drop(self, job: IndexJob) -> None:
        """A queued job that never runs still ends: ``finished`` would lie, so it ends ``failed``."""
        self.queue.remove(job)
        job.cancel()
        job._ended = True
        job.error = self.tr("Cancelled before it started.")
        job.failed.emit(job.error)
        self.jobFinished.emit(job)

    @Slot()
    def _next(self) -> None:
        if self.current is not None:
            return
        if not self.queue:
            self.idle.emit()
            return
        job = self.queue.pop(0)
        self.current = job
        job.finished.connect(lambda _r, j=job: self._job_ended(j))
        job.failed.connect(lambda _m, j=job: self._job_ended(j))
        self.jobStarted.emit(job)
        job.start()

    def _job_ended(self, job: IndexJob) -> None:
        if self.current is job:
            self.current = None
        self.jobFinished.emit(job)
        if self._closed:
            self.queue.clear()
        self._next()
