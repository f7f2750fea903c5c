"""The chat's documents: what a conversation answers from, indexing attachments, finding passages.

Why a controller of its own (not more of main_window.py): attaching, indexing with progress and
cancel, the attachments bar, the per-chat choice of knowledge bases and the retrieval for a question
are one concept with one state (the knowledge store and the index runner); the window only routes
its Attach/drop/send/delete/close events here.

The knowledge store (SQLite, :mod:`app.knowledge.store`) is opened at start with
:func:`app.knowledge.store.open_knowledge_store`, which never raises: a damaged file is moved aside
and the message is shown. Indexing runs on :class:`app.knowledge_jobs.IndexRunner`'s thread; the
retrieval for a question runs on the engine worker's thread (the store's connection is shared
under its lock), so the window never waits on either.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from app.attachments_bar import AttachedItem, AttachmentsBar

log = logging.getLogger(__name__)

RETRIEVE_K = 8  # passages fetched per question; the context budget decides how many are used


class ChatKnowledge(QObject):
    """Attachments and knowledge bases of the open chat. ``notify(text, is_error)`` shows a message."""

    indexingFinished = Signal(object)  # app.knowledge.indexer.IndexReport (also when cancelled)
    indexingFailed = Signal(str)
    attachmentsChanged = Signal()

    def __init__(self, bar: AttachmentsBar, notify: Callable[[str, bool], None], store: Any = None,
                 store_path: str | Path | None = None, device: str = "cpu", parent: QObject | None = None) -> None:
        super().__init__(parent)
        from app.knowledge.store import open_knowledge_store

        self.bar = bar
        self.notify = notify
        self.problem = ""
        if store is None:
            store, problem = open_knowledge_store(store_path)
            self.problem = problem or ""
        self.store = store
        self.embedder = _embedder(device)
        self.runner: Any = None
        if not getattr(store, "in_memory", False):
            from app.knowledge_jobs import IndexRunner

            self.runner = IndexRunner(store.path, embedder=self.embedder, parent=self)
        self.conversation_id: int | None = None
        self.job: Any = None  # the attachments' indexing job of the open chat, while it runs
        self._closed = False
        bar.removeFileRequested.connect(self.remove_path)
        bar.removeBaseRequested.connect(self.remove_base)
        bar.cancelRequested.connect(self.cancel_indexing)

    # ------------------------------------------------------------------ what the chat answers from
    def set_conversation(self, conversation_id: int | None) -> None:
        self.conversation_id = conversation_id
        self.refresh()

    def base_ids(self, conversation_id: int | None = None) -> list[int]:
        """The bases a question in this chat is answered from: the chosen ones, and the attachments
        base while it holds anything (removing every attachment returns the chat to plain chatting)."""
        cid = self.conversation_id if conversation_id is None else conversation_id
        if cid is None or self._closed:
            return []
        own = self.store.attachments_base(cid, create=False)
        chosen = self.store.conversation_bases(cid)
        return chosen + ([own.id] if own is not None and self.store.roots(own.id) else [])

    def refresh(self) -> None:
        """Re-list the chat's attachments and bases in the bar."""
        cid = self.conversation_id
        items: list[AttachedItem] = []
        if cid is not None and not self._closed:
            own = self.store.attachments_base(cid, create=False)
            if own is not None:
                files = self.store.files(own.id)
                for root in self.store.roots(own.id):
                    under = [f for f in files if f.path == root or root in f.path.parents]
                    bad = [f for f in under if f.status == "error"]
                    tip = str(root)
                    if bad:
                        from app.knowledge_dialog import problem_text

                        tip += "\n" + "\n".join(problem_text(f.path, f.error_code, f.error, f.size) for f in bad)
                    elif under and root.is_dir():
                        tip += "\n" + self.tr("%1 files indexed").replace("%1", str(len(under)))
                    problem = bool(bad) and len(bad) == len(under)
                    items.append(AttachedItem(root.name or str(root), tip, path=root, problem=problem))
            for base_id in self.store.conversation_bases(cid):
                base = self.store.base(base_id)
                if base is not None:
                    items.append(AttachedItem(base.name, self.tr("Knowledge base %1").replace("%1", base.name),
                                              base_id=base_id))
        self.bar.set_items(items)
        busy = self.job is not None
        for chip in self.bar.chips:
            chip.remove_button.setEnabled(not (busy and chip.item.base_id is None))
        self.attachmentsChanged.emit()

    # ------------------------------------------------------------------ attaching
    def attach(self, conversation_id: int, paths: list[Path]) -> bool:
        """Add files or folders to the chat's attachments and index them in the background."""
        if self.runner is None:
            self.notify(self.tr("Documents cannot be attached in this session: %1")
                        .replace("%1", self.problem or self.tr("the knowledge store is not available")), True)
            return False
        base = self.store.attachments_base(conversation_id)
        self.store.add_paths(base.id, paths)
        self.conversation_id = conversation_id
        self._index(base.id)
        return True

    def _index(self, base_id: int) -> None:
        job = self.runner.index(base_id)
        if job is not self.job:
            job.progress.connect(self._on_progress)
            job.finished.connect(lambda report, j=job: self._on_finished(j, report))
            job.failed.connect(lambda message, j=job: self._on_failed(j, message))
        self.job = job
        self.bar.show_progress(self.tr("Indexing the attached documents…"), 0, 0)
        self.refresh()

    def _on_progress(self, p: Any) -> None:
        if getattr(p, "phase", "files") == "embedding":
            text = (self.tr("Computing search vectors (%1 of %2 passages)…")
                    .replace("%1", str(p.embedded)).replace("%2", str(p.to_embed)))
            self.bar.show_progress(text, p.embedded, p.to_embed)
            return
        text = (self.tr("Indexing %1 (%2 of %3 files, %4 passages)…").replace("%1", Path(p.current).name or "…")
                .replace("%2", str(p.done_files)).replace("%3", str(p.total_files)).replace("%4", str(p.passages)))
        self.bar.show_progress(text, p.done_files, p.total_files)

    def _on_finished(self, job: Any, report: Any) -> None:
        if job is self.job:
            self.job = None
            self.bar.hide_progress()
        if self._closed or self.store.base(job.base_id) is None:  # closing, or its chat was deleted meanwhile
            return
        self.refresh()
        from app.knowledge_dialog import problem_text

        problems = [problem_text(Path(p.path), p.code, p.message, p.size) for p in report.problems]
        if report.cancelled:
            text = self.tr("Indexing was cancelled: the files indexed before it stay attached and are searched; "
                           "the others are not.")
            self.notify("\n".join([text, *problems]), False)
        elif problems:
            head = self.tr("Some files could not be indexed (the others were):")
            self.notify("\n".join([head, *problems]), True)
        else:
            self.notify(self.tr("Attached: %1 passages indexed. Ask a question about the documents.")
                        .replace("%1", str(report.passages)), False)
        self.indexingFinished.emit(report)

    def _on_failed(self, job: Any, message: str) -> None:
        if job is self.job:
            self.job = None
            self.bar.hide_progress()
        if self._closed:
            return
        self.refresh()
        self.notify(self.tr("Indexing failed: %1").replace("%1", message), True)
        self.indexingFailed.emit(message)

    def cancel_indexing(self) -> None:
        """Cancel: the files finished so far stay indexed."""
        if self.job is not None:
            self.job.cancel()
            self.bar.cancel_button.setEnabled(False)

    def indexing(self) -> bool:
        return self.job is not None

    # ------------------------------------------------------------------ removing
    def remove_path(self, path: Path) -> None:
        """Detach a file or folder from the open chat: its passages go with it."""
        cid = self.conversation_id
        own = self.store.attachments_base(cid, create=False) if cid is not None else None
        if own is None or self.job is not None:
            return
        self.store.remove_path(own.id, Path(path))
        self.refresh()

    def remove_base(self, base_id: int) -> None:
        """Stop answering this chat from a knowledge base (the base itself stays)."""
        cid = self.conversation_id
        if cid is None:
            return
        self.store.set_conversation_bases(cid, [b for b in self.store.conversation_bases(cid) if b != base_id])
        self.refresh()

    def forget(self, conversation_id: int) -> None:
        """A deleted chat: cancel its indexing, drop its attachments and choices."""
        own = self.store.attachments_base(conversation_id, create=False)
        if own is not None and self.runner is not None:
            self.runner.cancel(own.id)
            job = self.runner.job_for(own.id)
            if job is not None:
                job.wait(5.0)
        self.store.forget_conversation(conversation_id)
        if conversation_id == self.conversation_id:
            self.conversation_id = None
        self.refresh()

    # ------------------------------------------------------------------ questions
    def retriever(self, base_ids: list[int], question: str, k: int = RETRIEVE_K) -> Callable[[], list[Any]]:
        """A function that finds the passages for ``question``; called on the engine worker's thread."""
        from app.knowledge.retrieval import search
        from app.knowledge_jobs import resolve_embedder

        store, embedder = self.store, self.embedder

        def retrieve() -> list[Any]:
            model = None
            if embedder is not None:
                try:
                    model = resolve_embedder(embedder)
                except Exception as exc:  # noqa: BLE001 - full-text search still answers
                    log.warning("embedding model unavailable, full-text search only: %s", exc)
            return search(store, list(base_ids), question, k=k, embedder=model)

        return retrieve

    def budget_note_text(self, prompt: Any) -> str:
        """What the context budget changed for this answer (``prompt.notes``, codes with numbers from
        :mod:`app.knowledge.answer`), in the interface's language; "" when it changed nothing."""
        from app.knowledge import answer

        sentences = []
        for note in getattr(prompt, "notes", None) or []:
            n = {key: str(value) for key, value in note.numbers.items()}
            if note.code == answer.DROPPED_MESSAGES:
                text = self.tr("The %1 oldest messages of the conversation were left out so that a source fits.") \
                    .replace("%1", n["messages"])
            elif note.code == answer.NOTHING_FITS:
                text = self.tr("No source passage fits in the %1-token context beside the question and a %2-token "
                               "answer; the model answers without sources.") \
                    .replace("%1", n["context"]).replace("%2", n["answer_tokens"])
            elif note.code == answer.PASSAGES_LEFT_OUT:
                text = self.tr("%1 of %2 passages did not fit in the %3-token context and were left out.") \
                    .replace("%1", n["left_out"]).replace("%2", n["total"]).replace("%3", n["context"])
            elif note.code == answer.QUESTION_TOO_LONG:
                text = self.tr("The question and conversation alone take %1 tokens, more than the %2 left beside a "
                               "%3-token answer.") \
                    .replace("%1", n["tokens"]).replace("%2", n["limit"]).replace("%3", n["answer_tokens"])
            else:
                text = note.english()
            sentences.append(text)
        return " ".join(sentences)

    # ------------------------------------------------------------------ shutdown
    def shutdown(self) -> None:
        """Cancel indexing (what finished stays), wait briefly for its thread, close the store."""
        self._closed = True
        if self.runner is not None:
            self.runner.shutdown()
        if self.embedder is not None and hasattr(self.embedder, "close"):
            self.embedder.close()
        self.store.close()


def _embedder(device: str) -> Any:
    """A lazily loaded handle on the installed embedding model, or None (full-text search only)."""
    try:
        from app.knowledge.embedder import EmbedderHandle, find_embedding_model

        path = find_embedding_model()
    except Exception as exc:  # noqa: BLE001 - a broken catalog or store must not stop the chat
        log.warning("embedding model lookup failed: %s", exc)
        return None
    return EmbedderHandle(path, device if device not in ("", "auto") else "cpu") if path is not None else None
