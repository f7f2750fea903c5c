"""The background worker: one QObject on its own QThread that owns the engine.

Why: the engine is not thread-safe and loading, prefill and decoding take seconds; the GUI thread
must never run them. The GUI talks to the worker only through queued signals (requests in,
events out). Tokens are batched: the worker collects decoded pieces and emits at most every
``flush_interval_s`` (40 ms), so a 200 tok/s stream costs the GUI ~25 repaints per second, not
200. Stop is a :class:`runtime.generation.CancelToken` the GUI cancels directly (thread-safe);
the engine checks it every token. Every exception becomes a readable message signal; the worker
and its thread stay alive, so the next request works.

The engine may be shared with the app's local API server (Settings → Local server): both take
:attr:`EngineWorker.lock` for each use, so an API request waits while the user's chat generates and
the chat waits (``waiting`` tells the GUI, Stop still works) while an API request runs. A remote
backend (``remote:<name>#<model>``, :mod:`app.core.remote`) is "loaded" here like a local model.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from PySide6.QtCore import QObject, QThread, Signal, Slot

from app.errors import describe, readable_error
from app.errors import simple as simple_error
from runtime.errors import OutOfMemoryError, TernaryError
from runtime.generation import CancelToken, DoneEvent, GenerationStats, NoticeEvent, TextEvent

log = logging.getLogger(__name__)

FLUSH_INTERVAL_S = 0.04
MEMORY_INTERVAL_S = 0.5


def _accepts_started_at(engine: Any) -> bool:
    """Whether ``engine.generate`` takes the Send timestamp (the runtime's does; a stand-in may not)."""
    try:
        return "started_at" in inspect.signature(engine.generate).parameters
    except (TypeError, ValueError):
        return False


def as_dict(obj: Any) -> dict[str, Any]:
    """Engine result objects (dataclasses, objects with to_dict, dicts) as a plain dict."""
    if obj is None:
        return {}
    if isinstance(obj, dict):
        return dict(obj)
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if dataclasses.is_dataclass(obj):
        return dataclasses.asdict(obj)
    return {k: v for k, v in vars(obj).items() if not k.startswith("_")}


def load_engine(path: str, options: dict[str, Any], progress: Callable[[str, float], None] | None,
                cancel: CancelToken | None) -> Any:
    """``Engine.load`` with the app's load options (:meth:`MainWindow.load_options`); None means its default.

    The options are ``Engine.load``'s own keyword arguments by name (``kv_dtype`` as a name from
    :data:`runtime.kv_cache.KV_CACHE_CHOICES`), so they are passed as they are: an unknown one is a
    bug to surface, not to drop silently.
    """
    from runtime.engine import Engine

    kwargs = {k: v for k, v in options.items() if v is not None}
    return Engine.load(path, progress=progress, cancel=cancel, **kwargs)


def kv_cache_costs(engine: Any) -> dict[str, int]:
    """KV-cache bytes per context token of the loaded model for each cache type, from the planner.

    Shown by the settings dialog before the user reloads with another precision. Empty for a
    stand-in engine without a ``config``.
    """
    config = getattr(engine, "config", None)
    if config is None:
        return {}
    from runtime import planner

    return {name: planner.kv_bytes_per_token(config, name) for name in planner.KV_DTYPES}


def open_remote(ref: str, options: dict[str, Any]) -> Any:
    """A :class:`app.core.remote.RemoteEngine` for ``remote:<name>#<model>``; its key from the keyring.

    Checks the server answers and serves the model, so a wrong address or key fails at "load".
    """
    from app.core.remote import RemoteEngine, parse_remote_ref
    from app.core.secrets import get_key, remote_key_name

    parsed = parse_remote_ref(ref)
    if parsed is None or not options.get("remote_url"):
        raise ValueError(f"not a known remote model: {ref}")
    key = get_key(remote_key_name(parsed.name))
    engine = RemoteEngine(parsed.name, str(options["remote_url"]), parsed.model, key.reveal() if key else None)
    try:
        engine.check()
    except BaseException:
        engine.close()
        raise
    return engine


class Cancelled(Exception):
    """The user pressed Stop while the chat was waiting for the engine (an API request held it)."""


class EngineWorker(QObject):
    """Lives on the worker thread. Slots are invoked through queued connections only."""

    loadProgress = Signal(str, float)
    loaded = Signal(dict)  # engine info + default settings
    loadFailed = Signal(str, object)  # path, app.errors.UserError (translated when shown)
    unloaded = Signal()
    tokens = Signal(int, list)  # request id, [(channel, text), ...]
    notice = Signal(int, str)
    finished = Signal(int, dict)  # request id, {"text", "thinking", "stats"}
    failed = Signal(int, object)  # request id, app.errors.UserError
    memory = Signal(dict)  # engine.memory_stats() as a dict (+ "time")
    tokenCount = Signal(int, int)  # request id, prompt tokens
    summaryProgress = Signal(int, object)  # request id, SummaryProgress
    summaryStep = Signal(int, object)  # request id, SummaryStep (a generation starts / ends)
    summaryTokens = Signal(int, list)  # request id, [text, ...] of the running generation
    summaryDone = Signal(int, object)  # request id, SummaryResult (also cancelled or stopped by an error)
    summaryFailed = Signal(int, object)  # request id, SummaryError or app.errors.UserError: could not start
    grounded = Signal(int, object)  # request id, app.knowledge.answer.GroundedPrompt (before the reply streams)
    waiting = Signal(int, bool)  # request id, True while an API request of the local server holds the engine

    def __init__(self, loader: Callable[..., Any] = load_engine) -> None:
        super().__init__()
        self._loader = loader
        self.engine: Any = None
        self._last_memory = 0.0
        # shared with the local API server's EngineAccess; reentrant: a grounded answer takes it and
        # then streams through generate(), which takes it again
        self.lock = threading.RLock()

    @contextlib.contextmanager
    def engine_turn(self, request_id: int, cancel: Any) -> Iterator[None]:
        """Hold the engine for one chat request; if an API request has it, say so and wait (Stop works)."""
        if not self.lock.acquire(blocking=False):
            self.waiting.emit(request_id, True)
            try:
                while not self.lock.acquire(timeout=0.05):
                    if cancel is not None and cancel.cancelled:
                        raise Cancelled
            finally:
                self.waiting.emit(request_id, False)
        try:
            yield
        finally:
            self.lock.release()

    # -- model ---------------------------------------------------------------------------------
    @Slot(str, dict, object)
    def load(self, path: str, options: dict, cancel: object) -> None:
        self._close()
        try:
            if path.startswith("remote:"):
                engine = open_remote(path, options)
            else:
                engine = self._loader(path, options, self.loadProgress.emit, cancel)
        except BaseException as exc:  # noqa: BLE001 - every failure must reach the user
            log.warning("model load failed: %s", readable_error(exc), exc_info=not isinstance(exc, TernaryError))
            self.loadFailed.emit(path, describe(exc))
            return
        self.engine = engine
        info = as_dict(getattr(engine, "info", None))
        try:
            info["default_settings"] = as_dict(engine.default_settings())
        except Exception as exc:  # noqa: BLE001
            log.warning("default_settings failed: %s", readable_error(exc))
            info["default_settings"] = {}
        info["path"] = path
        info["kv_bytes_per_token"] = kv_cache_costs(engine)
        self.loaded.emit(info)
        self._emit_memory(force=True)

    @Slot()
    def unload(self) -> None:
        self._close()
        self.unloaded.emit()

    def _close(self) -> None:
        if self.engine is not None:
            try:
                with self.lock:  # a running API request finishes first (the app stops the server before this)
                    self.engine.close()
            except Exception as exc:  # noqa: BLE001
                log.warning("engine close failed: %s", readable_error(exc))
            self.engine = None

    # -- generation ----------------------------------------------------------------------------
    @Slot(int, object, object, object, float)
    def generate(self, request_id: int, messages: object, settings: object, cancel: object,
                 started_at: float = 0.0) -> None:
        """Stream one reply. ``started_at`` (``time.perf_counter()`` at Send, 0 = now) is where the
        engine starts the time to first token, so waiting for this thread counts too."""
        if self.engine is None:
            self.failed.emit(request_id, simple_error("no_model"))
            return
        pending: list[tuple[str, str]] = []
        done: DoneEvent | None = None
        extra = {"started_at": started_at} if started_at and _accepts_started_at(self.engine) else {}
        try:
            with self.engine_turn(request_id, cancel):
                done = self._stream(request_id, messages, settings, cancel, extra, pending)
        except Cancelled:
            done = DoneEvent(GenerationStats(finish_reason="cancelled"))
        except BaseException as exc:  # noqa: BLE001 - the worker must survive anything
            if pending:
                self.tokens.emit(request_id, pending)
            log.warning("generation failed: %s", readable_error(exc),
                        exc_info=not isinstance(exc, TernaryError | OutOfMemoryError))
            self.failed.emit(request_id, describe(exc))
            self._emit_memory(force=True)
            return
        if pending:
            self.tokens.emit(request_id, pending)
        if done is None:
            self.failed.emit(request_id, simple_error("engine_stopped"))
            return
        self.finished.emit(request_id, {"text": done.text, "thinking": done.thinking,
                                        "stats": as_dict(done.stats)})
        self._emit_memory(force=True)

    def _stream(self, request_id: int, messages: object, settings: object, cancel: object, extra: dict[str, Any],
                pending: list[tuple[str, str]]) -> DoneEvent | None:
        """Run the engine's generate, flushing ``pending`` text in batches; the last pieces stay in
        ``pending`` for the caller (also when this raises)."""
        last_flush = time.monotonic()
        first_sent = False  # the first piece goes out at once: the live first-token gauge must not wait
        done: DoneEvent | None = None
        try:
            # a remote reports the prompt's tokens in its usage at the end; counting first would cost a round trip
            if not getattr(self.engine, "remote", False):
                self.tokenCount.emit(request_id, int(self.engine.count_tokens(messages, settings)))
        except TernaryError:
            raise
        except Exception as exc:  # noqa: BLE001 - counting is only for the gauge
            log.debug("count_tokens failed: %s", exc)
        for event in self.engine.generate(messages, settings, cancel=cancel, **extra):
            if isinstance(event, TextEvent):
                if event.text:
                    pending.append((event.channel, event.text))
            elif isinstance(event, NoticeEvent):
                self.notice.emit(request_id, event.message)
            elif isinstance(event, DoneEvent):
                done = event
            now = time.monotonic()
            if pending and (not first_sent or now - last_flush >= FLUSH_INTERVAL_S):
                self.tokens.emit(request_id, list(pending))
                pending.clear()
                last_flush = now
                first_sent = True
            self._emit_memory()
        return done

    @Slot(int, object, object, str, object, object, float, int)
    def generate_grounded(self, request_id: int, retrieve: object, conversation: object, question: str,
                          settings: object, cancel: object, started_at: float = 0.0, answer_tokens: int = 0) -> None:
        """Answer ``question`` from documents: ``retrieve()`` finds the passages (on this thread, so the
        GUI stays responsive), the engine's own token count decides which fit beside ``conversation``
        (earlier turns) and an ``answer_tokens`` reply; :attr:`grounded` tells the GUI which passages
        were used and left out, then the reply streams exactly as from :meth:`generate`."""
        from app.knowledge.answer import build_grounded_prompt

        if self.engine is None:
            self.failed.emit(request_id, simple_error("no_model"))
            return
        try:
            hits = retrieve()  # type: ignore[operator]
            context = self._document_context()
            with self.engine_turn(request_id, cancel):
                prompt = build_grounded_prompt(
                    list(conversation), question, hits,  # type: ignore[call-overload]
                    count_tokens=lambda msgs: int(self.engine.count_tokens(msgs, settings)),
                    context_length=context, answer_tokens=max(0, min(answer_tokens, context // 2)))
        except Cancelled:
            self.finished.emit(request_id, {"text": "", "thinking": "",
                                            "stats": as_dict(GenerationStats(finish_reason="cancelled"))})
            return
        except BaseException as exc:  # noqa: BLE001 - the worker must survive anything
            log.warning("finding the sources failed: %s", readable_error(exc), exc_info=not isinstance(exc, TernaryError))
            self.failed.emit(request_id, describe(exc))
            return
        self.grounded.emit(request_id, prompt)
        self.generate(request_id, prompt.messages, settings, cancel, started_at)

    def _document_context(self) -> int:
        """The context that passages and summary parts are fitted into; a remote that does not report its
        context length raises :class:`app.core.remote.RemoteError` (saying so) instead of fitting into 0."""
        if getattr(self.engine, "remote", False):
            return int(self.engine.require_context())
        return int(as_dict(getattr(self.engine, "info", None)).get("context_length") or 0)

    # -- summarization -------------------------------------------------------------------------
    @Slot(int, str, str, object, object, int)
    def summarize(self, request_id: int, text: str, name: str, settings: object, cancel: object,
                  answer_tokens: int) -> None:
        """Map-reduce summary (``answer_tokens`` 0 = from the context). Text is batched like
        :meth:`generate`; each generation's start and end go out as ``summaryStep`` for the gauges."""
        from app.core.summarize import Summarizer, SummaryError

        if self.engine is None:
            self.summaryFailed.emit(request_id, simple_error("no_model"))
            return
        pending: list[str] = []
        last_flush = time.monotonic()

        def flush() -> None:
            nonlocal pending, last_flush
            if pending:
                self.summaryTokens.emit(request_id, pending)
                pending = []
            last_flush = time.monotonic()

        def on_text(piece: str) -> None:
            first = not pending and last_flush == 0.0
            pending.append(piece)
            if first or time.monotonic() - last_flush >= FLUSH_INTERVAL_S:
                flush()
            self._emit_memory()

        def on_step(step: Any) -> None:
            nonlocal last_flush
            flush()
            if step.stats is None:
                last_flush = 0.0  # the first piece of each generation goes out at once (first-token gauge)
            self.summaryStep.emit(request_id, step)

        def progress(p: Any) -> None:
            self.summaryProgress.emit(request_id, p)
            self._emit_memory()

        try:
            self._document_context()
            with self.engine_turn(request_id, cancel):
                summarizer = Summarizer(self.engine, settings, answer_tokens=answer_tokens or None)
                result = summarizer.summarize(text, name=name, progress=progress, cancel=cancel, on_step=on_step,
                                              on_text=on_text)
        except BaseException as exc:  # noqa: BLE001 - only a summary that could not start ends here
            flush()
            log.warning("summarization failed: %s", readable_error(exc), exc_info=not isinstance(exc, TernaryError))
            self.summaryFailed.emit(request_id, exc if isinstance(exc, SummaryError) else describe(exc))
            self._emit_memory(force=True)
            return
        flush()
        if result.failure is not None:
            exc = result.failure
            log.warning("summarization stopped: %s", readable_error(exc), exc_info=not isinstance(exc, TernaryError))
        self.summaryDone.emit(request_id, result)
        self._emit_memory(force=True)

    # -- gauges --------------------------------------------------------------------------------
    @Slot()
    def poll_memory(self) -> None:
        self._emit_memory(force=True)

    def _emit_memory(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_memory < MEMORY_INTERVAL_S:
            return
        self._last_memory = now
        if self.engine is None:
            return
        try:
            stats = as_dict(self.engine.memory_stats())
        except Exception as exc:  # noqa: BLE001 - gauges must never break chatting
            log.debug("memory_stats failed: %s", exc)
            return
        stats["time"] = time.time()
        self.memory.emit(stats)

    @Slot()
    def shutdown(self) -> None:
        self._close()


class WorkerHost(QObject):
    """Owned by the GUI thread: starts the thread and forwards requests as queued signals."""

    requestLoad = Signal(str, dict, object)
    requestUnload = Signal()
    requestGenerate = Signal(int, object, object, object, float)
    requestSummarize = Signal(int, str, str, object, object, int)
    requestGrounded = Signal(int, object, object, str, object, object, float, int)
    requestMemory = Signal()
    requestShutdown = Signal()

    def __init__(self, loader: Callable[..., Any] = load_engine, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.thread = QThread()
        self.thread.setObjectName("engine-worker")
        self.worker = EngineWorker(loader)
        self.worker.moveToThread(self.thread)
        self.requestLoad.connect(self.worker.load)
        self.requestUnload.connect(self.worker.unload)
        self.requestGenerate.connect(self.worker.generate)
        self.requestSummarize.connect(self.worker.summarize)
        self.requestGrounded.connect(self.worker.generate_grounded)
        self.requestMemory.connect(self.worker.poll_memory)
        self.requestShutdown.connect(self.worker.shutdown)
        self.thread.start()
        self._next_id = 0

    def next_request_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def stop(self, timeout_ms: int = 10000) -> None:
        """Close the engine on its own thread, then end the thread."""
        if not self.thread.isRunning():
            return
        self.requestShutdown.emit()
        self.thread.quit()
        if not self.thread.wait(timeout_ms):
            log.warning("worker thread did not stop within %d ms", timeout_ms)
