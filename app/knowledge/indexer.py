"""Keeping a knowledge base's index in step with the files and folders the user added.

Why incremental by (size, mtime_ns) then sha256: re-indexing an unchanged folder must cost a
``stat`` per file, not a read; a file whose stamp changed but whose bytes did not (a copy, a
``touch``) is hashed and kept. Every file is committed whole or not at all (one transaction in
:meth:`KnowledgeStore.replace_file`), so a cancel or a crash keeps what finished. A file that
cannot be read — encrypted or scanned PDF, damaged .docx, binary data, gone or locked while we
worked — is recorded with its reason and the rest is indexed. Vectors come in a second pass, in
batches, for every passage that has none from the current embedding model, so an interrupted
pass, a new model or a base first indexed without one all catch up the same way.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from app.core.documents import MAX_DOCUMENT_BYTES, DocumentError, extract_text, is_indexable
from app.knowledge.passages import split_document
from app.knowledge.store import FileRecord, KnowledgeStore, covers
from runtime.errors import CancelledError
from runtime.generation import CancelToken

EMBED_BATCH = 16  # passages per embed_documents call: progress and cancel between batches


class Embedder(Protocol):
    """What indexing and search need from an embedding model (runtime.embedding.EmbeddingModel)."""

    model_id: str
    dim: int

    def embed_documents(self, texts: list[str], *, cancel: CancelToken | None = None) -> np.ndarray: ...

    def embed_query(self, text: str) -> np.ndarray: ...


@dataclass
class IndexProgress:
    done_files: int
    total_files: int
    current: str  # the file being read (its path), or "" between phases
    passages: int  # passages written so far in this run
    phase: str = "files"  # "files", then "embedding" when an embedder is given
    embedded: int = 0  # embedding phase: passages embedded so far...
    to_embed: int = 0  # ...of this many


@dataclass
class FileProblem:
    path: Path
    code: str  # DocumentError.code (encrypted, no_text, corrupt, binary, too_large...) or vanished/unreadable/missing
    message: str  # English; interfaces word the problem from ``code`` (and ``size``) in their language
    size: int = 0  # the file's size in bytes where known (too_large says it)


@dataclass
class IndexReport:
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0
    problems: list[FileProblem] = field(default_factory=list)
    passages: int = 0  # passages in the base after the run
    seconds: float = 0.0
    cancelled: bool = False
    written: int = 0  # passages written in this run
    embedded: int = 0  # vectors computed in this run
    skipped: list[Path] = field(default_factory=list)  # files in added folders of a type that is not indexed


def index_base(store: KnowledgeStore, base_id: int, *, embedder: Embedder | None = None,
               progress: Callable[[IndexProgress], None] | None = None,
               cancel: CancelToken | None = None) -> IndexReport:
    """Bring the base's index up to date with its roots; see the module docstring."""
    started = time.perf_counter()
    report = IndexReport()
    found, report.problems, report.skipped = _walk(store.roots(base_id), store.excluded(base_id))
    known = store.file_records(base_id)
    gone = [rec.id for path, rec in known.items() if path not in found and not _problem_for(report.problems, path)]
    if gone:
        store.delete_files(gone)
        report.removed = len(gone)
    for problem in report.problems:  # roots that are missing or unreadable show in the file list too
        if problem.code in ("missing", "unreadable", "too_large", "unsupported", "not_file"):
            store.record_file_error(base_id, problem.path, problem.code, problem.message)

    paths = sorted(found)
    for done, path in enumerate(paths):
        if cancel is not None and cancel.cancelled:
            report.cancelled = True
            break
        if progress is not None:
            progress(IndexProgress(done, len(paths), str(path), report.written))
        _index_file(store, base_id, path, known.get(path), report)

    if embedder is not None and not report.cancelled:
        _embed_missing(store, base_id, embedder, report, progress, cancel, len(paths))
    if not report.cancelled:
        store.mark_indexed(base_id)
        if progress is not None:
            progress(IndexProgress(len(paths), len(paths), "", report.written))
    if report.written:
        store.checkpoint()
    report.passages = store.passage_count([base_id])
    report.seconds = time.perf_counter() - started
    return report


def _problem_for(problems: list[FileProblem], path: Path) -> bool:
    """Files under a folder we could not list (permission denied) keep what they had: they were not
    seen, which is not the same as gone."""
    return any(p.code in ("unreadable",) and covers(p.path, path) for p in problems)


def _walk(roots: list[Path], excluded: Iterable[Path] = ()) -> tuple[set[Path], list[FileProblem], list[Path]]:
    """Indexable files under the roots; problems with the roots themselves; files of other types.

    Hidden files and folders (".git", ".venv") are skipped, and so are the files and folders the
    user excluded (``excluded``; a file indexed before is then no longer found, so its passages go);
    a folder reached twice through symbolic links (a loop) is walked once.
    """
    left_out = set(excluded)
    files: set[Path] = set()
    problems: list[FileProblem] = []
    skipped: list[Path] = []
    seen_dirs: set[tuple[int, int]] = set()
    for root in roots:
        try:
            st = os.stat(root)
        except FileNotFoundError:
            problems.append(FileProblem(root, "missing", f"{root.name}: not found (moved or deleted?)."))
            continue
        except OSError as exc:
            problems.append(FileProblem(root, "unreadable", f"{root.name}: cannot be read ({exc.strerror})."))
            continue
        if stat.S_ISREG(st.st_mode):
            if is_indexable(root):
                files.add(root)
            else:
                problems.append(FileProblem(root, "unsupported",
                                            f"{root.name}: this file type is not indexed ({root.suffix or 'no suffix'})."))
            continue
        if not stat.S_ISDIR(st.st_mode):
            problems.append(FileProblem(root, "not_file", f"{root.name} is not a regular file or folder."))
            continue

        def on_error(exc: OSError) -> None:
            where = Path(exc.filename) if exc.filename else root  # noqa: B023 - used inside this iteration only
            problems.append(FileProblem(where, "unreadable", f"{where.name}: cannot be read ({exc.strerror})."))

        for folder, dirs, names in os.walk(root, onerror=on_error, followlinks=True):
            try:
                fst = os.stat(folder)
            except OSError:
                dirs[:] = []
                continue
            key = (fst.st_dev, fst.st_ino)
            if key in seen_dirs:
                dirs[:] = []
                continue
            seen_dirs.add(key)
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and Path(folder) / d not in left_out)
            for name in names:
                path = Path(folder) / name
                if name.startswith(".") or path in left_out:
                    continue
                if is_indexable(path):
                    files.add(path)
                else:
                    skipped.append(path)
    return files, problems, skipped


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1024 * 1024):
            h.update(chunk)
    return h.hexdigest()


def _vanished(path: Path) -> FileProblem:
    return FileProblem(path, "vanished", f"{path.name} was deleted or moved while it was being indexed.")


def _index_file(store: KnowledgeStore, base_id: int, path: Path, known: FileRecord | None,
                report: IndexReport) -> None:
    """Index one file (or record why it cannot be), committing it whole."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        report.problems.append(_vanished(path))
        if known is not None:
            store.delete_files([known.id])
            report.removed += 1
        return
    except OSError as exc:
        _record(store, base_id, path, FileProblem(path, "unreadable", f"{path.name}: cannot be read ({exc.strerror})."),
                report)
        return
    if known is not None and known.size == st.st_size and known.mtime_ns == st.st_mtime_ns:
        report.unchanged += 1
        if known.status == "error":  # same bytes as when it failed: still failing, still listed
            report.problems.append(FileProblem(path, known.error_code, known.error, known.size))
        return
    if st.st_size > MAX_DOCUMENT_BYTES:
        limit = MAX_DOCUMENT_BYTES / 2**20
        _record(store, base_id, path, FileProblem(path, "too_large", f"{path.name} is {st.st_size / 2**20:.0f} MB; "
                                                  f"files larger than {limit:.0f} MB are not indexed.", st.st_size),
                report,
                size=st.st_size, mtime_ns=st.st_mtime_ns)
        return
    try:
        digest = _sha256(path)
        if known is not None and known.sha256 == digest and known.status == "indexed":
            store.touch_file(known.id, size=st.st_size, mtime_ns=st.st_mtime_ns)
            report.unchanged += 1
            return
        doc = extract_text(path)
        passages = split_document(doc)
    except FileNotFoundError:
        problem = _vanished(path)
    except PermissionError as exc:
        problem = FileProblem(path, "unreadable", f"{path.name}: cannot be read ({exc.strerror}).")
    except OSError as exc:
        code = "vanished" if exc.errno == errno.ENOENT else "unreadable"
        problem = FileProblem(path, code, f"{path.name}: cannot be read ({exc.strerror or exc}).")
    except DocumentError as exc:
        problem = _vanished(path) if exc.code == "missing" else FileProblem(path, exc.code, str(exc), st.st_size)
    else:
        store.replace_file(base_id, path, size=st.st_size, mtime_ns=st.st_mtime_ns, sha256=digest, kind=doc.kind,
                           passages=passages)
        report.written += len(passages)
        if known is None:
            report.added += 1
        else:
            report.updated += 1
        return
    if problem.code == "vanished":
        report.problems.append(problem)
        if known is not None:
            store.delete_files([known.id])
            report.removed += 1
        return
    _record(store, base_id, path, problem, report, size=st.st_size, mtime_ns=st.st_mtime_ns)


def _record(store: KnowledgeStore, base_id: int, path: Path, problem: FileProblem, report: IndexReport, *,
            size: int = 0, mtime_ns: int = 0) -> None:
    report.problems.append(problem)
    store.record_file_error(base_id, path, problem.code, problem.message, size=size, mtime_ns=mtime_ns)


def _embed_missing(store: KnowledgeStore, base_id: int, embedder: Embedder, report: IndexReport,
                   progress: Callable[[IndexProgress], None] | None, cancel: CancelToken | None,
                   files: int) -> None:
    """Vectors for every passage of the base without one from this model, in batches."""
    todo = store.passages_needing_vectors(base_id, embedder.model_id)
    for start in range(0, len(todo), EMBED_BATCH):
        if cancel is not None and cancel.cancelled:
            report.cancelled = True
            return
        if progress is not None:
            progress(IndexProgress(files, files, "", report.written, "embedding", start, len(todo)))
        batch = todo[start:start + EMBED_BATCH]
        try:
            vectors = np.asarray(embedder.embed_documents([text for _, text in batch], cancel=cancel), np.float32)
        except CancelledError:
            report.cancelled = True
            return
        if vectors.shape != (len(batch), embedder.dim):
            raise ValueError(f"the embedding model returned {vectors.shape} for {len(batch)} passages "
                             f"of dimension {embedder.dim}")
        store.put_vectors([pid for pid, _ in batch], vectors, embedder.model_id)
        report.embedded += len(batch)
