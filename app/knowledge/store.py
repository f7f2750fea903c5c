"""Knowledge bases in SQLite: bases, the paths users added, indexed files, passages, FTS5, vectors.

Why one SQLite file (WAL, foreign keys): the same crash-safe choice as the chat history; a file's
passages, search terms and vectors are replaced in one transaction, so a crash or a cancel leaves
either the old file or the new one, never half of it. Vectors live beside the passages as float16
BLOBs (``docs/knowledge.md`` has the measurement against sqlite-vec).

Full-text search for English *and* Chinese: FTS5's tokenizers do not segment Chinese (unicode61
makes a whole run of hanzi one token; trigram needs 3+ characters), so :func:`index_terms` writes
a term string in Python — latin words as they are (FTS5's ``porter`` tokenizer stems them), every
CJK run as its characters and overlapping character pairs — and :mod:`app.knowledge.retrieval`
turns a question into the same kind of terms.

Damaged or newer files: :class:`KnowledgeError` with a ``code`` (damaged, not_a_file, newer,
locked, unwritable) and :func:`open_knowledge_store`, which never raises: a damaged file is moved
aside (its bases and folders are copied into the fresh file, to be re-indexed), a newer one is left
untouched for the newer version. The index can always be rebuilt from the user's files.

No Qt here. A store may be shared between the GUI thread and one indexing thread (a lock guards
the connection).
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.core.history import classify_sqlite_error, database_file_problem
from runtime.errors import TernaryError

SCHEMA_VERSION = 1
MEMORY = ":memory:"
PAGE_SIZE = 16384
# Vectors (float16) kept in memory between searches, per store: 128k vectors of 1024 dimensions.
VECTOR_CACHE_BYTES = 256 * 1024**2
VERIFY_LIMIT_BYTES = 256 * 1024**2  # above this the start-up integrity check is skipped (it reads every page)
INDEXED, ERROR, PENDING = "indexed", "error", "pending"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS bases (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    conversation_id INTEGER UNIQUE,
    created REAL NOT NULL DEFAULT 0,
    indexed REAL NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX IF NOT EXISTS bases_by_name ON bases(name) WHERE conversation_id IS NULL;
CREATE TABLE IF NOT EXISTS roots (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    base_id INTEGER NOT NULL REFERENCES bases(id) ON DELETE CASCADE,
    path TEXT NOT NULL,
    added REAL NOT NULL DEFAULT 0,
    UNIQUE (base_id, path)
);
CREATE TABLE IF NOT EXISTS files (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    base_id INTEGER NOT NULL REFERENCES bases(id) ON DELETE CASCADE,
    path TEXT NOT NULL,
    size INTEGER NOT NULL DEFAULT 0,
    mtime_ns INTEGER NOT NULL DEFAULT 0,
    sha256 TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('indexed', 'error', 'pending')),
    error_code TEXT NOT NULL DEFAULT '',
    error TEXT NOT NULL DEFAULT '',
    kind TEXT NOT NULL DEFAULT '',
    indexed REAL NOT NULL DEFAULT 0,
    UNIQUE (base_id, path)
);
CREATE TABLE IF NOT EXISTS passages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    file_id INTEGER NOT NULL REFERENCES files(id) ON DELETE CASCADE,
    ordinal INTEGER NOT NULL,
    text TEXT NOT NULL,
    page INTEGER,
    heading TEXT NOT NULL DEFAULT '',
    line INTEGER
);
CREATE INDEX IF NOT EXISTS passages_by_file ON passages(file_id, ordinal);
CREATE TABLE IF NOT EXISTS vectors (
    passage_id INTEGER PRIMARY KEY REFERENCES passages(id) ON DELETE CASCADE,
    model_id TEXT NOT NULL,
    vector BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS excluded (
    base_id INTEGER NOT NULL REFERENCES bases(id) ON DELETE CASCADE,
    path TEXT NOT NULL,
    added REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (base_id, path)
);
CREATE TABLE IF NOT EXISTS conversation_bases (
    conversation_id INTEGER NOT NULL,
    base_id INTEGER NOT NULL REFERENCES bases(id) ON DELETE CASCADE,
    PRIMARY KEY (conversation_id, base_id)
);
CREATE VIRTUAL TABLE IF NOT EXISTS passages_fts USING fts5(
    terms, content = '', tokenize = 'porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER IF NOT EXISTS passages_ai AFTER INSERT ON passages BEGIN
    INSERT INTO passages_fts(rowid, terms) VALUES (new.id, kb_terms(new.heading, new.text));
END;
CREATE TRIGGER IF NOT EXISTS passages_ad AFTER DELETE ON passages BEGIN
    INSERT INTO passages_fts(passages_fts, rowid, terms) VALUES ('delete', old.id, kb_terms(old.heading, old.text));
END;
CREATE TRIGGER IF NOT EXISTS passages_au AFTER UPDATE OF heading, text ON passages BEGIN
    INSERT INTO passages_fts(passages_fts, rowid, terms) VALUES ('delete', old.id, kb_terms(old.heading, old.text));
    INSERT INTO passages_fts(rowid, terms) VALUES (new.id, kb_terms(new.heading, new.text));
END;
"""
_TABLES = ("bases", "roots", "files", "passages", "vectors", "excluded", "conversation_bases", "passages_fts")

# CJK ideographs, kana, hangul: scripts written without spaces between words.
_CJK_RUN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+")


class KnowledgeError(TernaryError):
    """A knowledge-base operation cannot be done; ``code`` names why (for translated messages).

    Codes: damaged, not_a_file, newer, locked, unwritable (the database file); exists, invalid_name,
    no_base (base operations); not_in_folder (only a file inside an added folder can be excluded);
    no_fts (SQLite built without FTS5).
    """

    def __init__(self, code: str, message: str, version: int = 0) -> None:
        super().__init__(message)
        self.code = code
        self.version = version


def _classify(exc: BaseException) -> str:
    """:func:`app.core.history.classify_sqlite_error`, plus ``no_fts`` for an SQLite built without FTS5."""
    if "no such module: fts5" in str(exc).lower():
        return "no_fts"
    return classify_sqlite_error(exc)


def index_terms(text: str) -> str:
    """The string FTS5 indexes for ``text``: latin words as they are, CJK runs as chars + char pairs.

    Why pairs and single characters: Chinese words are mostly one or two characters, and a pair
    query ("向量") then matches exactly that pair in the text, ranked by BM25 like a word.

    The FTS table is contentless (the terms are not stored twice, ~45 % of the file): a passage's
    row is deleted by giving FTS5 the same terms again, which the triggers compute with this
    function (SQL ``kb_terms``). Changing its output therefore needs a schema version whose
    upgrade rebuilds ``passages_fts``.
    """
    def cjk(m: re.Match[str]) -> str:
        run = m.group(0)
        pairs = [run[i:i + 2] for i in range(len(run) - 1)]
        return " " + " ".join([*run, *pairs]) + " "

    return _CJK_RUN.sub(cjk, text)


@dataclass
class KnowledgeBase:
    id: int
    name: str
    conversation_id: int | None  # not None = a chat's private attachments base


@dataclass
class SourceFile:
    id: int
    base_id: int
    path: Path
    status: str  # "indexed" | "error" | "pending"
    error_code: str
    error: str
    passages: int
    mtime: float
    size: int


@dataclass
class StoredPassage:
    id: int
    file_id: int
    path: Path
    ordinal: int
    text: str
    page: int | None
    heading: str
    line: int | None

    def location(self) -> str:
        """Where the passage is, for a citation: "report.pdf, p. 3" / "notes.md, Install > Linux" /
        "main.py, line 40" (a heading is preferred to a line number; just the name if neither)."""
        name = self.path.name
        if self.page is not None:
            return f"{name}, p. {self.page}"
        if self.heading:
            return f"{name}, {self.heading}"
        if self.line is not None:
            return f"{name}, line {self.line}"
        return name


@dataclass
class FileRecord:
    """What the indexer needs to know about a file it indexed before."""

    id: int
    path: Path
    size: int
    mtime_ns: int
    sha256: str
    status: str
    error_code: str = ""
    error: str = ""


def default_knowledge_path() -> Path:
    from app.core.paths import data_dir

    return data_dir() / "knowledge.sqlite3"


def _fts_terms(heading: str | None, text: str | None) -> str:
    """What one passage's FTS row holds: its heading path and its text (SQL function ``kb_terms``)."""
    return index_terms(f"{heading}\n{text or ''}" if heading else (text or ""))


def _passage(row: sqlite3.Row) -> StoredPassage:
    return StoredPassage(int(row["id"]), int(row["file_id"]), Path(row["path"]), int(row["ordinal"]), row["text"],
                         row["page"], row["heading"] or "", row["line"])


def _base(row: sqlite3.Row) -> KnowledgeBase:
    return KnowledgeBase(int(row["id"]), row["name"], row["conversation_id"])


def _normal_path(path: str | os.PathLike[str]) -> Path:
    """Absolute, with ``..`` resolved but symlinks kept (the user's name for the file)."""
    return Path(os.path.abspath(os.fspath(path)))


def covers(root: Path, path: Path) -> bool:
    """Whether ``path`` is ``root`` or inside it."""
    return path == root or root in path.parents


class KnowledgeStore:
    """All knowledge bases of one user. Raises :class:`KnowledgeError` (only) when the file cannot be used."""

    def __init__(self, path: str | Path | None = None, *, verify: bool = False, busy_timeout_s: float = 5.0) -> None:
        self.in_memory = str(path) == MEMORY
        self.path = Path(path) if path is not None else default_knowledge_path()
        self._lock = threading.RLock()
        self._db: sqlite3.Connection | None = None
        self._writes = 0  # bumped by every write: cached vectors are stale after one
        self._vector_cache: tuple[tuple[object, ...], np.ndarray, np.ndarray] | None = None
        try:
            self._open(verify, busy_timeout_s)
        except (sqlite3.Error, OSError) as exc:
            self.close()
            code = _classify(exc)
            raise KnowledgeError(code, f"{self.path}: {exc}") from exc
        except KnowledgeError:
            self.close()
            raise

    def _open(self, verify: bool, busy_timeout_s: float) -> None:
        target = MEMORY
        if not self.in_memory:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            problem = database_file_problem(self.path)
            if problem:
                raise KnowledgeError(*problem)
            target = str(self.path)
        self._db = sqlite3.connect(target, isolation_level=None, timeout=busy_timeout_s, check_same_thread=False)
        self._db.row_factory = sqlite3.Row
        self._db.create_function("kb_terms", 2, _fts_terms, deterministic=True)
        version = int(self._db.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:  # never write a newer version's file
            raise KnowledgeError("newer", f"{self.path} has format {version}; this version reads {SCHEMA_VERSION}",
                                 version)
        if verify and not self.in_memory and self.path.stat().st_size <= VERIFY_LIMIT_BYTES:
            result = [r[0] for r in self._db.execute("PRAGMA quick_check(20)").fetchall()]
            if result != ["ok"]:
                raise KnowledgeError("damaged", f"{self.path} failed the integrity check: {result[0][:200]}")
        if version == 0 and self._db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
            # tables but no version: not a file this app wrote
            names = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            ours = set(_TABLES) | {"sqlite_sequence"} | {n for n in names if n.startswith("passages_fts_")}
            if not names <= ours:
                raise KnowledgeError("damaged", f"{self.path} is another program's database")
        if not self._db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
            # a new file: 16 KiB pages hold 7 float16 1024-d vectors each; with 4 KiB pages a 2 KiB
            # vector row does not fit twice, and every vector took a whole page (twice the size)
            self._db.execute(f"PRAGMA page_size={PAGE_SIZE}")
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(_SCHEMA)
        self._upgrade(version)
        self._db.execute("SELECT count(*) FROM bases").fetchone()

    def _upgrade(self, version: int) -> None:
        """Bring an older layout up to :data:`SCHEMA_VERSION` (one step per version, in a transaction).

        Version 1 is the first; later versions add their steps here, e.g. ``if version < 2: ALTER ...``.
        """
        if version != SCHEMA_VERSION:
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def close(self) -> None:
        if self._db is not None:
            with self._lock:
                self._db.close()
                self._db = None

    def __enter__(self) -> KnowledgeStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One atomic write: everything inside commits together or not at all."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            self._writes += 1
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _query(self, sql: str, args: Sequence[object] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    # -- bases ---------------------------------------------------------------------------------
    def create_base(self, name: str) -> KnowledgeBase:
        name = self._valid_name(name)
        try:
            with self.transaction() as db:
                cur = db.execute("INSERT INTO bases(name, created) VALUES (?, ?)", (name, time.time()))
        except sqlite3.IntegrityError:
            raise KnowledgeError("exists", f"A knowledge base named '{name}' already exists.") from None
        return KnowledgeBase(int(cur.lastrowid), name, None)

    @staticmethod
    def _valid_name(name: str) -> str:
        name = " ".join(str(name).split())
        if not name:
            raise KnowledgeError("invalid_name", "A knowledge base needs a name.")
        if len(name) > 200:
            raise KnowledgeError("invalid_name", "A knowledge base name can be at most 200 characters.")
        return name

    def bases(self) -> list[KnowledgeBase]:
        """Named bases (not chats' private attachments), by name."""
        rows = self._query("SELECT * FROM bases WHERE conversation_id IS NULL ORDER BY name COLLATE NOCASE, id")
        return [_base(r) for r in rows]

    def base(self, base_id: int) -> KnowledgeBase | None:
        rows = self._query("SELECT * FROM bases WHERE id=?", (base_id,))
        return _base(rows[0]) if rows else None

    def base_named(self, name: str) -> KnowledgeBase | None:
        rows = self._query("SELECT * FROM bases WHERE name=? AND conversation_id IS NULL", (" ".join(name.split()),))
        return _base(rows[0]) if rows else None

    def rename_base(self, base_id: int, name: str) -> None:
        name = self._valid_name(name)
        try:
            with self.transaction() as db:
                db.execute("UPDATE bases SET name=? WHERE id=?", (name, base_id))
        except sqlite3.IntegrityError:
            raise KnowledgeError("exists", f"A knowledge base named '{name}' already exists.") from None

    def delete_base(self, base_id: int) -> None:
        with self.transaction() as db:
            db.execute("DELETE FROM bases WHERE id=?", (base_id,))

    def _require_base(self, base_id: int) -> None:
        if self.base(base_id) is None:
            raise KnowledgeError("no_base", f"There is no knowledge base with id {base_id}.")

    # -- roots and files -----------------------------------------------------------------------
    def add_paths(self, base_id: int, paths: Iterable[str | os.PathLike[str]]) -> None:
        """Remember files or folders (folders are walked when the base is indexed). Already added: no-op."""
        self._require_base(base_id)
        now = time.time()
        with self.transaction() as db:
            for p in paths:
                db.execute("INSERT OR IGNORE INTO roots(base_id, path, added) VALUES (?,?,?)",
                           (base_id, str(_normal_path(p)), now))

    def remove_path(self, base_id: int, path: str | os.PathLike[str]) -> None:
        """Forget a path the user added (a root) or one file, with the passages of every file no
        remaining root covers."""
        target = _normal_path(path)
        with self.transaction() as db:
            db.execute("DELETE FROM roots WHERE base_id=? AND path=?", (base_id, str(target)))
            remaining = [Path(r["path"]) for r in db.execute("SELECT path FROM roots WHERE base_id=?", (base_id,))]
            for row in db.execute("SELECT id, path FROM files WHERE base_id=?", (base_id,)).fetchall():
                p = Path(row["path"])
                if covers(target, p) or not any(covers(root, p) for root in remaining):
                    db.execute("DELETE FROM files WHERE id=?", (row["id"],))
            for row in db.execute("SELECT path FROM excluded WHERE base_id=?", (base_id,)).fetchall():
                if not any(covers(root, Path(row["path"])) for root in remaining):  # its folder is gone
                    db.execute("DELETE FROM excluded WHERE base_id=? AND path=?", (base_id, row["path"]))

    def exclude_path(self, base_id: int, path: str | os.PathLike[str]) -> None:
        """Leave one file (or sub-folder) of an added folder out of the base: its passages go now,
        and indexing skips it until :meth:`include_path`. Remembered in the store (survives restarts).

        Raises :class:`KnowledgeError` ``not_in_folder`` for a path no added folder holds (an added
        path itself is removed with :meth:`remove_path` instead)."""
        self._require_base(base_id)
        target = _normal_path(path)
        roots = self.roots(base_id)
        if not any(covers(root, target) and root != target for root in roots):
            raise KnowledgeError("not_in_folder", f"{target} is not inside a folder of this knowledge base; "
                                                  "remove it instead.")
        with self.transaction() as db:
            db.execute("INSERT OR IGNORE INTO excluded(base_id, path, added) VALUES (?,?,?)",
                       (base_id, str(target), time.time()))
            for row in db.execute("SELECT id, path FROM files WHERE base_id=?", (base_id,)).fetchall():
                if covers(target, Path(row["path"])):
                    db.execute("DELETE FROM files WHERE id=?", (row["id"],))

    def include_path(self, base_id: int, path: str | os.PathLike[str]) -> None:
        """Undo :meth:`exclude_path`: the next indexing run reads the file again. Not excluded: no-op."""
        with self.transaction() as db:
            db.execute("DELETE FROM excluded WHERE base_id=? AND path=?", (base_id, str(_normal_path(path))))

    def excluded(self, base_id: int) -> list[Path]:
        """The files and folders left out of the base's folders, by path."""
        return [Path(r["path"]) for r in self._query("SELECT path FROM excluded WHERE base_id=? ORDER BY path",
                                                     (base_id,))]

    def roots(self, base_id: int) -> list[Path]:
        return [Path(r["path"]) for r in self._query("SELECT path FROM roots WHERE base_id=? ORDER BY id", (base_id,))]

    def files(self, base_id: int) -> list[SourceFile]:
        rows = self._query(
            "SELECT f.*, (SELECT count(*) FROM passages p WHERE p.file_id = f.id) AS n FROM files f "
            "WHERE base_id=? ORDER BY path", (base_id,))
        return [SourceFile(int(r["id"]), int(r["base_id"]), Path(r["path"]), r["status"], r["error_code"], r["error"],
                           int(r["n"]), r["mtime_ns"] / 1e9, int(r["size"])) for r in rows]

    def file_records(self, base_id: int) -> dict[Path, FileRecord]:
        """The indexer's view of what it indexed before, by path."""
        rows = self._query("SELECT id, path, size, mtime_ns, sha256, status, error_code, error FROM files "
                           "WHERE base_id=?", (base_id,))
        return {Path(r["path"]): FileRecord(int(r["id"]), Path(r["path"]), int(r["size"]), int(r["mtime_ns"]),
                                            r["sha256"], r["status"], r["error_code"], r["error"]) for r in rows}

    def replace_file(self, base_id: int, path: Path, *, size: int, mtime_ns: int, sha256: str, kind: str,
                     passages: Sequence[object], vectors: np.ndarray | None = None, model_id: str = "") -> int:
        """Store a file's passages (and their vectors) in place of what it had, in one transaction.

        ``passages`` are :class:`app.knowledge.passages.Passage`; ``vectors`` one row per passage.
        """
        if vectors is not None and len(vectors) != len(passages):
            raise ValueError(f"{len(vectors)} vectors for {len(passages)} passages")
        with self.transaction() as db:
            file_id = self._upsert_file(db, base_id, path, size, mtime_ns, sha256, INDEXED, "", "", kind)
            db.execute("DELETE FROM passages WHERE file_id=?", (file_id,))
            for i, p in enumerate(passages):
                cur = db.execute("INSERT INTO passages(file_id, ordinal, text, page, heading, line) VALUES (?,?,?,?,?,?)",
                                 (file_id, p.ordinal, p.text, p.page, p.heading, p.line))
                pid = int(cur.lastrowid)  # its FTS row: trigger passages_ai
                if vectors is not None:
                    db.execute("INSERT INTO vectors(passage_id, model_id, vector) VALUES (?,?,?)",
                               (pid, model_id, _blob(vectors[i])))
        return file_id

    def record_file_error(self, base_id: int, path: Path, code: str, message: str, *, size: int = 0,
                          mtime_ns: int = 0, sha256: str = "") -> int:
        """Mark a file as not indexable (its old passages go): the user sees why in the file list."""
        with self.transaction() as db:
            file_id = self._upsert_file(db, base_id, path, size, mtime_ns, sha256, ERROR, code, message, "")
            db.execute("DELETE FROM passages WHERE file_id=?", (file_id,))
        return file_id

    def touch_file(self, file_id: int, *, size: int, mtime_ns: int) -> None:
        """Same content (sha256) under a new size/mtime: remember the new stamp, keep the passages."""
        with self.transaction() as db:
            db.execute("UPDATE files SET size=?, mtime_ns=? WHERE id=?", (size, mtime_ns, file_id))

    def delete_files(self, file_ids: Iterable[int]) -> None:
        with self.transaction() as db:
            db.executemany("DELETE FROM files WHERE id=?", [(i,) for i in file_ids])

    @staticmethod
    def _upsert_file(db: sqlite3.Connection, base_id: int, path: Path, size: int, mtime_ns: int, sha256: str,
                     status: str, code: str, message: str, kind: str) -> int:
        db.execute("INSERT INTO files(base_id, path, size, mtime_ns, sha256, status, error_code, error, kind, indexed) "
                   "VALUES (?,?,?,?,?,?,?,?,?,?) ON CONFLICT(base_id, path) DO UPDATE SET size=excluded.size, "
                   "mtime_ns=excluded.mtime_ns, sha256=excluded.sha256, status=excluded.status, "
                   "error_code=excluded.error_code, error=excluded.error, kind=excluded.kind, indexed=excluded.indexed",
                   (base_id, str(path), size, mtime_ns, sha256, status, code, message, kind, time.time()))
        return int(db.execute("SELECT id FROM files WHERE base_id=? AND path=?", (base_id, str(path))).fetchone()[0])

    def mark_indexed(self, base_id: int) -> None:
        with self.transaction() as db:
            db.execute("UPDATE bases SET indexed=? WHERE id=?", (time.time(), base_id))

    # -- passages and vectors ------------------------------------------------------------------
    def passage(self, passage_id: int) -> StoredPassage | None:
        rows = self.passages_by_id([passage_id])
        return rows[0] if rows else None

    def passages_by_id(self, passage_ids: Sequence[int]) -> list[StoredPassage]:
        """The passages with these ids, in the order given (missing ids skipped)."""
        found: dict[int, StoredPassage] = {}
        ids = list(passage_ids)
        for i in range(0, len(ids), 500):
            chunk = ids[i:i + 500]
            rows = self._query(f"SELECT p.*, f.path FROM passages p JOIN files f ON f.id = p.file_id "
                               f"WHERE p.id IN ({','.join('?' * len(chunk))})", chunk)
            found.update((int(r["id"]), _passage(r)) for r in rows)
        return [found[i] for i in ids if i in found]

    def file_passages(self, file_id: int) -> list[StoredPassage]:
        rows = self._query("SELECT p.*, f.path FROM passages p JOIN files f ON f.id = p.file_id "
                           "WHERE p.file_id=? ORDER BY p.ordinal", (file_id,))
        return [_passage(r) for r in rows]

    def passage_count(self, base_ids: Sequence[int]) -> int:
        marks = ",".join("?" * len(base_ids)) or "NULL"
        return int(self._query(f"SELECT count(*) FROM passages p JOIN files f ON f.id = p.file_id "
                               f"WHERE f.base_id IN ({marks})", list(base_ids))[0][0])

    def fts_search(self, base_ids: Sequence[int], match: str, limit: int) -> list[tuple[int, float]]:
        """(passage id, bm25 score; lower is better) for an FTS5 MATCH expression, best first."""
        if not base_ids or not match:
            return []
        marks = ",".join("?" * len(base_ids))
        sql = (f"SELECT passages_fts.rowid AS id, bm25(passages_fts) AS score FROM passages_fts "
               f"JOIN passages p ON p.id = passages_fts.rowid JOIN files f ON f.id = p.file_id "
               f"WHERE passages_fts MATCH ? AND f.base_id IN ({marks}) ORDER BY score LIMIT ?")
        return [(int(r["id"]), float(r["score"])) for r in self._query(sql, [match, *base_ids, limit])]

    def passages_needing_vectors(self, base_id: int, model_id: str) -> list[tuple[int, str]]:
        """(id, text) of the base's passages with no vector from ``model_id`` (new, or another model's)."""
        rows = self._query("SELECT p.id, p.text FROM passages p JOIN files f ON f.id = p.file_id "
                           "LEFT JOIN vectors v ON v.passage_id = p.id "
                           "WHERE f.base_id=? AND (v.model_id IS NULL OR v.model_id <> ?) ORDER BY p.id",
                           (base_id, model_id))
        return [(int(r["id"]), r["text"]) for r in rows]

    def put_vectors(self, passage_ids: Sequence[int], vectors: np.ndarray, model_id: str) -> None:
        """Store (replace) vectors for existing passages, in one transaction."""
        if len(passage_ids) != len(vectors):
            raise ValueError(f"{len(vectors)} vectors for {len(passage_ids)} passages")
        with self.transaction() as db:
            db.executemany("INSERT OR REPLACE INTO vectors(passage_id, model_id, vector) "
                           "SELECT ?, ?, ? WHERE EXISTS (SELECT 1 FROM passages WHERE id=?)",
                           [(int(i), model_id, _blob(v), int(i)) for i, v in zip(passage_ids, vectors, strict=True)])

    def vector_models(self, base_id: int) -> set[str]:
        rows = self._query("SELECT DISTINCT v.model_id FROM vectors v JOIN passages p ON p.id = v.passage_id "
                           "JOIN files f ON f.id = p.file_id WHERE f.base_id=?", (base_id,))
        return {r[0] for r in rows}

    def vectors(self, base_ids: Sequence[int], model_id: str) -> tuple[np.ndarray, np.ndarray]:
        """(passage ids int64 [n], vectors [n, dim]) of the bases' passages embedded by ``model_id``.

        Why a cache: reading 100k vectors from SQLite takes longer than scanning them, and a chat
        asks many questions of the same bases. The last result is kept until anything is written
        (here, or by another connection: ``PRAGMA data_version``); not kept above
        :data:`VECTOR_CACHE_BYTES`. Treat the arrays as read-only.
        """
        if not base_ids:
            return np.zeros(0, np.int64), np.zeros((0, 0), np.float16)
        with self._lock:
            key = (tuple(sorted(set(base_ids))), model_id, self._writes,
                   self._db.execute("PRAGMA data_version").fetchone()[0])
            if self._vector_cache is not None and self._vector_cache[0] == key:
                return self._vector_cache[1], self._vector_cache[2]
            ids, vectors = self._read_vectors(base_ids, model_id)
            self._vector_cache = None
            if vectors.nbytes <= VECTOR_CACHE_BYTES:
                self._vector_cache = (key, ids, vectors)
            return ids, vectors

    def _read_vectors(self, base_ids: Sequence[int], model_id: str) -> tuple[np.ndarray, np.ndarray]:
        marks = ",".join("?" * len(base_ids))
        rows = self._query(f"SELECT v.passage_id, v.vector FROM vectors v JOIN passages p ON p.id = v.passage_id "
                           f"JOIN files f ON f.id = p.file_id WHERE f.base_id IN ({marks}) AND v.model_id=?",
                           [*base_ids, model_id])
        if not rows:
            return np.zeros(0, np.int64), np.zeros((0, 0), np.float16)
        ids = np.fromiter((r[0] for r in rows), np.int64, len(rows))
        dim = len(rows[0][1]) // 2
        blob = bytearray().join(r[1] if len(r[1]) == 2 * dim else bytes(2 * dim) for r in rows)  # writable
        return ids, np.frombuffer(blob, np.float16).reshape(len(rows), dim)

    # -- per-conversation choice ---------------------------------------------------------------
    def attachments_base(self, conversation_id: int, create: bool = True) -> KnowledgeBase | None:
        """The chat's private base of attached documents (created on first use when ``create``)."""
        rows = self._query("SELECT * FROM bases WHERE conversation_id=?", (conversation_id,))
        if rows:
            return _base(rows[0])
        if not create:
            return None
        name = f"Attachments of chat {conversation_id}"
        with self.transaction() as db:
            cur = db.execute("INSERT INTO bases(name, conversation_id, created) VALUES (?,?,?)",
                             (name, conversation_id, time.time()))
        return KnowledgeBase(int(cur.lastrowid), name, conversation_id)

    def conversation_bases(self, conversation_id: int) -> list[int]:
        rows = self._query("SELECT c.base_id FROM conversation_bases c JOIN bases b ON b.id = c.base_id "
                           "WHERE c.conversation_id=? AND b.conversation_id IS NULL ORDER BY c.base_id",
                           (conversation_id,))
        return [int(r[0]) for r in rows]

    def set_conversation_bases(self, conversation_id: int, base_ids: Iterable[int]) -> None:
        with self.transaction() as db:
            db.execute("DELETE FROM conversation_bases WHERE conversation_id=?", (conversation_id,))
            db.executemany("INSERT OR IGNORE INTO conversation_bases(conversation_id, base_id) "
                           "SELECT ?, id FROM bases WHERE id=? AND conversation_id IS NULL",
                           [(conversation_id, int(b)) for b in base_ids])

    def bases_for_conversation(self, conversation_id: int) -> list[int]:
        """What the chat searches: the chosen named bases plus its attachments base, if it has one."""
        own = self.attachments_base(conversation_id, create=False)
        return self.conversation_bases(conversation_id) + ([own.id] if own is not None else [])

    def forget_conversation(self, conversation_id: int) -> None:
        with self.transaction() as db:
            db.execute("DELETE FROM conversation_bases WHERE conversation_id=?", (conversation_id,))
            db.execute("DELETE FROM bases WHERE conversation_id=?", (conversation_id,))

    def size_bytes(self) -> int:
        """The database's size on disk (with its write-ahead log)."""
        if self.in_memory:
            return 0
        total = 0
        for suffix in ("", "-wal"):
            with contextlib.suppress(OSError):
                total += os.stat(f"{self.path}{suffix}").st_size
        return total

    def checkpoint(self) -> None:
        """Fold the write-ahead log into the file (after a large indexing run)."""
        with self._lock, contextlib.suppress(sqlite3.Error):
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def _blob(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype=np.float16).tobytes()


# -- opening a store that may be damaged --------------------------------------------------------
def _salvage(damaged: Path, store: KnowledgeStore) -> int:
    """Copy the bases, their paths, exclusions and chats' choices still readable in ``damaged``; returns
    how many bases.

    Files and passages are not copied: indexing the bases again rebuilds them from the user's files.
    """
    try:
        src = sqlite3.connect(f"{damaged.resolve().as_uri()}?mode=ro", uri=True, timeout=1.0)
    except (sqlite3.Error, OSError, ValueError):
        return 0
    copied = 0
    with contextlib.closing(src):
        src.row_factory = sqlite3.Row
        try:
            bases = src.execute("SELECT id, name, conversation_id, created FROM bases").fetchall()
            roots = src.execute("SELECT base_id, path, added FROM roots").fetchall()
            chosen = src.execute("SELECT conversation_id, base_id FROM conversation_bases").fetchall()
        except sqlite3.Error:
            return 0
        try:
            excluded = src.execute("SELECT base_id, path, added FROM excluded").fetchall()
        except sqlite3.Error:  # a file from before exclusions, or that table is what is damaged
            excluded = []
    with store.transaction() as db:
        for b in bases:
            try:
                db.execute("INSERT INTO bases(id, name, conversation_id, created) VALUES (?,?,?,?)",
                           (b["id"], b["name"], b["conversation_id"], b["created"]))
                copied += 1
            except (sqlite3.Error, ValueError, TypeError):
                continue
        for r in roots:
            with contextlib.suppress(sqlite3.Error, ValueError, TypeError):
                db.execute("INSERT OR IGNORE INTO roots(base_id, path, added) SELECT ?,?,? WHERE EXISTS "
                           "(SELECT 1 FROM bases WHERE id=?)", (r["base_id"], r["path"], r["added"], r["base_id"]))
        for e in excluded:
            with contextlib.suppress(sqlite3.Error, ValueError, TypeError):
                db.execute("INSERT OR IGNORE INTO excluded(base_id, path, added) SELECT ?,?,? WHERE EXISTS "
                           "(SELECT 1 FROM bases WHERE id=?)", (e["base_id"], e["path"], e["added"], e["base_id"]))
        for c in chosen:
            with contextlib.suppress(sqlite3.Error, ValueError, TypeError):
                db.execute("INSERT OR IGNORE INTO conversation_bases SELECT ?, ? WHERE EXISTS "
                           "(SELECT 1 FROM bases WHERE id=?)", (c["conversation_id"], c["base_id"], c["base_id"]))
    return copied


def open_knowledge_store(path: str | Path | None = None, *,
                         busy_timeout_s: float = 2.0) -> tuple[KnowledgeStore, str | None]:
    """The user's knowledge store, whatever state its file is in; never raises.

    Returns the store and, when something had to be done, one English line for the user:
    damaged / not a file -> moved aside (kept), a fresh file started with the bases and folders
    that could be read (their files are indexed again); newer -> left untouched, this version uses
    ``<stem>-v<N>.sqlite3`` beside it; locked / unwritable / no FTS5 -> a store in memory for this
    session.
    """
    from app.core.history import move_aside

    try:
        path = Path(path) if path is not None else default_knowledge_path()
    except OSError as exc:
        return KnowledgeStore(MEMORY), f"The knowledge-base folder cannot be created ({exc}); indexes are kept " \
                                       "in memory for this session."
    try:
        return KnowledgeStore(path, verify=True, busy_timeout_s=busy_timeout_s), None
    except KnowledgeError as exc:
        error = exc
    if error.code in ("damaged", "not_a_file"):
        try:
            moved = move_aside(path)
            store = KnowledgeStore(path)
        except (OSError, KnowledgeError) as exc:
            return KnowledgeStore(MEMORY), (f"The knowledge-base file {path} cannot be used ({error}; {exc}); "
                                            "indexes are kept in memory for this session.")
        kept = _salvage(moved, store) if error.code == "damaged" else 0
        note = (f" {kept} knowledge base(s) and their folders were kept; update them to index their files again."
                if kept else "")
        return store, f"The knowledge-base file was damaged; it was moved to {moved} and a new one started.{note}"
    if error.code == "newer":
        separate = path.with_name(f"{path.stem}-v{SCHEMA_VERSION}{path.suffix}")
        try:
            store, problem = open_knowledge_store(separate)
        except Exception:  # noqa: BLE001 - never stop the app over the knowledge base
            store, problem = KnowledgeStore(MEMORY), None
        return store, (f"The knowledge-base file {path} was written by a newer version (format {error.version}); "
                       f"it is left untouched and this version uses {separate}." + (f" {problem}" if problem else ""))
    return KnowledgeStore(MEMORY), (f"The knowledge-base file {path} cannot be used now ({error.code}: {error}); "
                                    "indexes are kept in memory for this session.")
