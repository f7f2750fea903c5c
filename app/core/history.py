"""Chat history in SQLite: conversations and messages, saved while they are being produced.

Why SQLite (WAL mode): one file, crash-safe transactions, concurrent readers, full-text search
(FTS5) — the same choice as the Ollama app and PyGPT. An assistant reply is inserted as a
``partial`` row as soon as generation starts and updated by :class:`StreamingMessageSaver` every
~100 ms (or every few tokens) and once more when it finishes, so a crash or power cut loses at
most the text produced since the last update; the row then stays ``partial`` and the UI marks it
as interrupted.

Damaged state (:func:`open_history`): a file that is not a database, is cut short, has a corrupt
page or is a folder is moved aside (never deleted), what can still be read is copied into a fresh
history, and the caller is told so it can tell the user. A file written by a *newer* version is
never written to (no restamping): it stays untouched where the newer version will look for it, and
this version keeps its chats in a separate file. A file locked by another program gives a history
kept in memory for the session. An older layout is upgraded after a copy of it is kept.

No Qt here: the GUI, tests and scripts use this module directly.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.core.paths import free_sibling
from runtime.atomic import write_text_atomic

SCHEMA_VERSION = 1
PARTIAL = "partial"
COMPLETE = "complete"
DEFAULT_TITLE = "New chat"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    title TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    model TEXT NOT NULL DEFAULT '',
    settings TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
    content TEXT NOT NULL DEFAULT '',
    thinking TEXT NOT NULL DEFAULT '',
    stats TEXT NOT NULL DEFAULT '{}',
    created REAL NOT NULL,
    status TEXT NOT NULL DEFAULT 'complete' CHECK (status IN ('partial', 'complete')),
    sources TEXT NOT NULL DEFAULT '[]'
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, id);
"""

_FTS_SCHEMA = """
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(
    content, content='messages', content_rowid='id', tokenize='trigram'
);
CREATE TRIGGER IF NOT EXISTS messages_ai AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER IF NOT EXISTS messages_ad AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
END;
CREATE TRIGGER IF NOT EXISTS messages_au AFTER UPDATE OF content ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
"""


# Columns this version needs, with the default an upgraded (older) table gets for each.
_COLUMNS: dict[str, dict[str, str]] = {
    "conversations": {"title": f"TEXT NOT NULL DEFAULT '{DEFAULT_TITLE}'", "created": "REAL NOT NULL DEFAULT 0",
                      "updated": "REAL NOT NULL DEFAULT 0", "model": "TEXT NOT NULL DEFAULT ''",
                      "settings": "TEXT NOT NULL DEFAULT '{}'"},
    "messages": {"role": "TEXT NOT NULL DEFAULT 'user'", "content": "TEXT NOT NULL DEFAULT ''",
                 "thinking": "TEXT NOT NULL DEFAULT ''", "stats": "TEXT NOT NULL DEFAULT '{}'",
                 "created": "REAL NOT NULL DEFAULT 0", "status": "TEXT NOT NULL DEFAULT 'complete'",
                 "sources": "TEXT NOT NULL DEFAULT '[]'"},
}
_KEY_COLUMNS = {"conversations": ("id",), "messages": ("id", "conversation_id")}  # cannot be added later
VERIFY_LIMIT_BYTES = 512 * 1024**2  # above this the start-up integrity check is skipped (it reads every page)
MEMORY = ":memory:"


class HistoryError(Exception):
    """Why a history file cannot be used as it is. ``code``: damaged, not_a_file, newer, locked, unwritable."""

    def __init__(self, code: str, message: str, version: int = 0) -> None:
        super().__init__(message)
        self.code = code
        self.version = version


def database_file_problem(path: Path) -> tuple[str, str] | None:
    """(code, message) when ``path`` exists but must not be opened as a SQLite database, else None.

    A folder, FIFO or device would hang or fail inside SQLite; a file shorter than SQLite's 100-byte
    header would be taken for an empty database and overwritten. Shared by every SQLite store."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return "not_a_file", f"{path} is not a file"
    if 0 < st.st_size < 100:
        return "damaged", f"{path} is not a database ({st.st_size} bytes)"
    return None


def classify_sqlite_error(exc: BaseException) -> str:
    """Map an SQLite/OS error to what it means for the user's file: locked, unwritable or damaged.

    Shared by the chat history and the knowledge store (one rule for both SQLite files)."""
    text = str(exc).lower()
    if "locked" in text or "busy" in text:
        return "locked"
    if isinstance(exc, OSError) or any(w in text for w in ("readonly", "read-only", "unable to open",
                                                            "disk i/o", "permission", "disk is full")):
        return "unwritable"
    return "damaged"


@dataclass
class Conversation:
    id: int
    title: str
    created: float
    updated: float
    model: str = ""
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass
class Message:
    id: int
    conversation_id: int
    role: str
    content: str
    thinking: str = ""
    stats: dict[str, Any] = field(default_factory=dict)
    created: float = 0.0
    status: str = COMPLETE
    # the passages a grounded answer was given (app.knowledge.answer.sources_to_json): [{"n", "passage_id",
    # "path", "location", "quote", "used", ...}]; empty for ordinary messages
    sources: list[dict[str, Any]] = field(default_factory=list)

    @property
    def interrupted(self) -> bool:
        """True for a reply whose generation never finished (crash, power cut, app killed)."""
        return self.status == PARTIAL


def _json_dict(text: Any) -> dict[str, Any]:
    """A JSON object column; a damaged value reads as empty instead of failing the whole list."""
    try:
        value = json.loads(text or "{}")
    except (TypeError, ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _json_sources(text: Any) -> list[dict[str, Any]]:
    """The sources column; damaged JSON or items that are not objects read as nothing, never an error."""
    try:
        value = json.loads(text or "[]")
    except (TypeError, ValueError, RecursionError):
        return []
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _sources_text(sources: list[dict[str, Any]] | None) -> str:
    return json.dumps(list(sources or []), ensure_ascii=False)


def _text(value: Any, default: str = "") -> str:
    if value is None:
        return default
    return value if isinstance(value, str) else str(value)


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


def _conversation(row: sqlite3.Row) -> Conversation:
    return Conversation(int(row["id"]), _text(row["title"], DEFAULT_TITLE), _number(row["created"]),
                        _number(row["updated"]), _text(row["model"]), _json_dict(row["settings"]))


def _message(row: sqlite3.Row) -> Message:
    status = PARTIAL if row["status"] == PARTIAL else COMPLETE
    sources = _json_sources(row["sources"]) if "sources" in row.keys() else []  # a salvaged older file lacks it
    return Message(int(row["id"]), int(row["conversation_id"]), _text(row["role"], "user"), _text(row["content"]),
                   _text(row["thinking"]), _json_dict(row["stats"]), _number(row["created"]), status, sources)


def default_history_path() -> Path:
    from app.core.paths import data_dir

    return data_dir() / "history.sqlite3"


class HistoryStore:
    """All conversations of one user. Use from one thread (the GUI thread).

    Raises :class:`HistoryError` (nothing else) when the file cannot be used: before any write when
    it was written by a newer version, and with ``verify`` when SQLite's integrity check fails.
    ``path=":memory:"`` keeps the history in memory only (nothing is saved).
    """

    def __init__(self, path: str | Path | None = None, *, verify: bool = False, busy_timeout_s: float = 2.0) -> None:
        self.path = Path(path) if path is not None else default_history_path()
        self.in_memory = str(path) == MEMORY
        self.upgraded_from: Path | None = None  # the kept copy when an older layout was upgraded
        self._db: sqlite3.Connection | None = None
        try:
            self._open(verify, busy_timeout_s)
        except (sqlite3.Error, OSError) as exc:
            self.close()
            raise HistoryError(classify_sqlite_error(exc), f"{self.path}: {exc}") from exc
        except HistoryError:
            self.close()
            raise

    def _open(self, verify: bool, busy_timeout_s: float) -> None:
        target = MEMORY
        if not self.in_memory:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            problem = database_file_problem(self.path)
            if problem:
                raise HistoryError(*problem)
            target = str(self.path)
        self._db = sqlite3.connect(target, isolation_level=None, timeout=busy_timeout_s)  # autocommit
        self._db.row_factory = sqlite3.Row
        version = int(self._db.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:  # a downgrade: never write (the newer version would lose data)
            raise HistoryError("newer", f"{self.path} has format {version}; this version reads "
                               f"{SCHEMA_VERSION}", version)
        if verify and not self.in_memory and self.path.stat().st_size <= VERIFY_LIMIT_BYTES:
            result = [r[0] for r in self._db.execute("PRAGMA quick_check(20)").fetchall()]
            if result != ["ok"]:
                raise HistoryError("damaged", f"{self.path} failed the integrity check: {result[0][:200]}")
        missing = self._missing_columns()
        if missing:
            self._upgrade(missing)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across app crashes
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(_SCHEMA)
        self.has_fts = self._try_create_fts()
        if version != SCHEMA_VERSION:
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        self._db.execute("SELECT count(*) FROM conversations").fetchone()

    def _missing_columns(self) -> dict[str, list[str]]:
        """Columns an existing (older) table lacks; a table without its key columns is not ours."""
        missing: dict[str, list[str]] = {}
        for table, wanted in _COLUMNS.items():
            have = {r["name"] for r in self._db.execute(f"PRAGMA table_info({table})")}
            if not have:
                continue  # created below
            if any(key not in have for key in _KEY_COLUMNS[table]):
                raise HistoryError("damaged", f"{self.path}: table {table} has an unknown layout")
            lacking = [c for c in wanted if c not in have]
            if lacking:
                missing[table] = lacking
        return missing

    def _upgrade(self, missing: dict[str, list[str]]) -> None:
        """Add the columns an older layout lacks, after keeping a copy of the file as it was."""
        if not self.in_memory:  # byte for byte, with its write-ahead log if it has one
            copy = free_sibling(self.path, "pre-upgrade")
            shutil.copyfile(self.path, copy)
            wal = self.path.with_name(self.path.name + "-wal")
            if wal.is_file():
                shutil.copyfile(wal, copy.with_name(copy.name + "-wal"))
            self.upgraded_from = copy
        with self._db:
            self._db.execute("BEGIN")
            for table, columns in missing.items():
                for column in columns:
                    self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {_COLUMNS[table][column]}")

    def _try_create_fts(self) -> bool:
        existed = self._db.execute("SELECT 1 FROM sqlite_master WHERE name='messages_fts'").fetchone() is not None
        try:
            self._db.executescript(_FTS_SCHEMA)
        except sqlite3.OperationalError:  # SQLite built without FTS5 or without the trigram tokenizer
            return False
        if not existed:  # messages written before the index existed (an upgraded file) must be searchable
            self._db.execute("INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')")
        return True

    def close(self) -> None:
        if self._db is not None:
            self._db.close()

    # -- conversations -------------------------------------------------------------------------
    def create_conversation(self, title: str = DEFAULT_TITLE, model: str = "",
                            settings: dict[str, Any] | None = None) -> Conversation:
        now = time.time()
        cur = self._db.execute(
            "INSERT INTO conversations(title, created, updated, model, settings) VALUES (?,?,?,?,?)",
            (title, now, now, model, json.dumps(settings or {})))
        return Conversation(int(cur.lastrowid), title, now, now, model, dict(settings or {}))

    def conversation(self, conversation_id: int) -> Conversation | None:
        row = self._db.execute("SELECT * FROM conversations WHERE id=?", (conversation_id,)).fetchone()
        return _conversation(row) if row else None

    def conversations(self) -> list[Conversation]:
        """Most recently updated first."""
        rows = self._db.execute("SELECT * FROM conversations ORDER BY updated DESC, id DESC")
        return [_conversation(r) for r in rows]

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        title = title.strip()
        if not title:
            raise ValueError("A conversation title cannot be empty.")
        self._db.execute("UPDATE conversations SET title=? WHERE id=?", (title, conversation_id))

    def set_conversation_model(self, conversation_id: int, model: str) -> None:
        self._db.execute("UPDATE conversations SET model=? WHERE id=?", (model, conversation_id))

    def delete_conversation(self, conversation_id: int) -> None:
        self._db.execute("DELETE FROM conversations WHERE id=?", (conversation_id,))

    def search(self, query: str) -> list[Conversation]:
        """Conversations whose title or any message contains ``query`` (case-insensitive)."""
        query = query.strip()
        if not query:
            return self.conversations()
        like = "%" + query.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        if self.has_fts and len(query) >= 3:  # the trigram tokenizer needs 3+ characters
            phrase = '"' + query.replace('"', '""') + '"'
            sql = ("SELECT * FROM conversations WHERE title LIKE ? ESCAPE '\\' OR id IN ("
                   "SELECT m.conversation_id FROM messages_fts f JOIN messages m ON m.id = f.rowid "
                   "WHERE messages_fts MATCH ?) ORDER BY updated DESC, id DESC")
            rows = self._db.execute(sql, (like, phrase))
        else:
            sql = ("SELECT * FROM conversations WHERE title LIKE ? ESCAPE '\\' OR id IN ("
                   "SELECT conversation_id FROM messages WHERE content LIKE ? ESCAPE '\\') "
                   "ORDER BY updated DESC, id DESC")
            rows = self._db.execute(sql, (like, like))
        return [_conversation(r) for r in rows]

    # -- messages ------------------------------------------------------------------------------
    def add_message(self, conversation_id: int, role: str, content: str, thinking: str = "",
                    stats: dict[str, Any] | None = None, status: str = COMPLETE,
                    sources: list[dict[str, Any]] | None = None) -> Message:
        now = time.time()
        with self._db:
            self._db.execute("BEGIN")
            cur = self._db.execute(
                "INSERT INTO messages(conversation_id, role, content, thinking, stats, created, status, sources) "
                "VALUES (?,?,?,?,?,?,?,?)",
                (conversation_id, role, content, thinking, json.dumps(stats or {}), now, status,
                 _sources_text(sources)))
            self._db.execute("UPDATE conversations SET updated=? WHERE id=?", (now, conversation_id))
        return Message(int(cur.lastrowid), conversation_id, role, content, thinking, dict(stats or {}),
                       now, status, [dict(s) for s in sources or []])

    def update_message(self, message_id: int, *, content: str | None = None, thinking: str | None = None,
                       stats: dict[str, Any] | None = None, status: str | None = None,
                       sources: list[dict[str, Any]] | None = None) -> None:
        sets, args = [], []
        for column, value in (("content", content), ("thinking", thinking), ("status", status)):
            if value is not None:
                sets.append(f"{column}=?")
                args.append(value)
        if stats is not None:
            sets.append("stats=?")
            args.append(json.dumps(stats))
        if sources is not None:
            sets.append("sources=?")
            args.append(_sources_text(sources))
        if not sets:
            return
        self._db.execute(f"UPDATE messages SET {', '.join(sets)} WHERE id=?", (*args, message_id))

    def messages(self, conversation_id: int) -> list[Message]:
        rows = self._db.execute("SELECT * FROM messages WHERE conversation_id=? ORDER BY id", (conversation_id,))
        return [_message(r) for r in rows]

    def message(self, message_id: int) -> Message | None:
        row = self._db.execute("SELECT * FROM messages WHERE id=?", (message_id,)).fetchone()
        return _message(row) if row else None

    def delete_messages_from(self, conversation_id: int, message_id: int) -> None:
        """Delete a message and everything after it (regenerate, edit-and-resend)."""
        self._db.execute("DELETE FROM messages WHERE conversation_id=? AND id>=?", (conversation_id, message_id))

    # -- export --------------------------------------------------------------------------------
    def to_dict(self, conversation_id: int) -> dict[str, Any]:
        conv = self.conversation(conversation_id)
        if conv is None:
            raise KeyError(f"No conversation with id {conversation_id}.")
        return {
            "format": "ternary-chat-conversation",
            "version": SCHEMA_VERSION,
            "title": conv.title,
            "created": conv.created,
            "updated": conv.updated,
            "model": conv.model,
            "settings": conv.settings,
            "messages": [
                {"role": m.role, "content": m.content, "thinking": m.thinking, "stats": m.stats,
                 "created": m.created, "status": m.status, "sources": m.sources}
                for m in self.messages(conversation_id)
            ],
        }

    def export_json(self, conversation_id: int, path: str | Path) -> Path:
        text = json.dumps(self.to_dict(conversation_id), ensure_ascii=False, indent=2)
        return write_text_atomic(path, text + "\n")

    def export_markdown(self, conversation_id: int, path: str | Path) -> Path:
        return write_text_atomic(path, conversation_markdown(self.to_dict(conversation_id)))


def conversation_markdown(data: dict[str, Any]) -> str:
    """A readable Markdown transcript; thinking goes into a collapsible ``<details>`` block."""
    created = time.strftime("%Y-%m-%d %H:%M", time.localtime(data["created"]))
    lines = [f"# {data['title']}", "", f"*{created}" + (f" · {data['model']}" if data["model"] else "") + "*", ""]
    names = {"user": "User", "assistant": "Assistant", "system": "System"}
    for m in data["messages"]:
        lines.append(f"## {names.get(m['role'], m['role'])}")
        lines.append("")
        if m["thinking"]:
            lines += ["<details><summary>Thinking</summary>", "", m["thinking"].strip(), "", "</details>", ""]
        lines.append(m["content"].rstrip())
        if m["status"] == PARTIAL:
            lines += ["", "*(interrupted)*"]
        lines += _sources_markdown(m.get("sources") or [])
        lines.append("")
    return "\n".join(lines)


def _sources_markdown(sources: list[dict[str, Any]]) -> list[str]:
    """A "Sources" list under an answer: the cited numbers with location and quote, then what was left out."""
    used = [s for s in sources if isinstance(s, dict) and s.get("used", True)]
    left = [s for s in sources if isinstance(s, dict) and not s.get("used", True)]
    if not used and not left:
        return []
    lines = ["", "**Sources**", ""]
    for s in used:
        quote = _text(s.get("quote")).strip()
        lines.append(f"- [{s.get('n', '?')}] {_text(s.get('location') or s.get('path'))}"
                     + (f" — “{quote}”" if quote else ""))
    if left:
        lines.append("")
        lines.append("*Left out (did not fit):* " + "; ".join(_text(s.get("location") or s.get("path")) for s in left))
    return lines


class StreamingMessageSaver:
    """Saves a reply while it streams: at most every ``min_interval_s`` or ``max_pending`` pieces.

    Why throttled: one SQLite UPDATE per token would cost more than generating the token on a
    fast GPU; ~10 updates per second bound the loss on a crash to ~100 ms of text.
    """

    def __init__(self, store: HistoryStore, message_id: int, min_interval_s: float = 0.1,
                 max_pending: int = 32, clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.message_id = message_id
        self.min_interval_s = min_interval_s
        self.max_pending = max_pending
        self._clock = clock
        self.content = ""
        self.thinking = ""
        self._pending = 0
        self._last_save = clock()
        self.saves = 0

    def append(self, text: str, channel: str = "answer") -> None:
        if channel == "thinking":
            self.thinking += text
        else:
            self.content += text
        self._pending += 1
        if self._pending >= self.max_pending or self._clock() - self._last_save >= self.min_interval_s:
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        self.store.update_message(self.message_id, content=self.content, thinking=self.thinking)
        self._pending = 0
        self._last_save = self._clock()
        self.saves += 1

    def finish(self, content: str | None = None, thinking: str | None = None,
               stats: dict[str, Any] | None = None) -> None:
        """Final save: the engine's full text (if given) replaces the streamed pieces."""
        if content is not None:
            self.content = content
        if thinking is not None:
            self.thinking = thinking
        self.store.update_message(self.message_id, content=self.content, thinking=self.thinking,
                                  stats=stats or {}, status=COMPLETE)
        self._pending = 0
        self.saves += 1


# -- opening a history that may be damaged ------------------------------------------------------
@dataclass
class HistoryProblem:
    """What was wrong with the user's history file and what was done; the app words it for the user.

    ``code``: damaged / not_a_file (moved to ``moved_to``, ``recovered`` conversations copied into a
    fresh file), newer (left untouched; this session uses ``in_use``), locked / unwritable (the
    session's history is kept in memory only), upgraded (older layout converted; ``moved_to`` is the
    copy of the file as it was).
    """

    code: str
    path: Path
    moved_to: Path | None = None
    in_use: Path | None = None
    version: int = 0
    recovered: int = 0
    detail: str = ""


def move_aside(path: Path, tag: str = "damaged") -> Path:
    """Rename ``path`` (and its SQLite ``-wal``/``-shm`` companions) to a free name beside it; never deletes.

    Why the companions move too: a stale write-ahead log left beside a fresh database would be
    replayed into it by SQLite.
    """
    target = free_sibling(path, tag)
    os.replace(path, target)
    for suffix in ("-wal", "-shm", "-journal"):
        companion = path.with_name(path.name + suffix)
        if companion.exists() and not companion.is_dir():
            with contextlib.suppress(OSError):
                os.replace(companion, target.with_name(target.name + suffix))
    return target


def _readable_rows(db: sqlite3.Connection, table: str) -> dict[int, sqlite3.Row]:
    """Every row of ``table`` that can still be read, scanning from both ends past a corrupt page."""
    rows: dict[int, sqlite3.Row] = {}
    for order in ("ASC", "DESC"):
        try:
            for row in db.execute(f"SELECT * FROM {table} ORDER BY id {order}"):
                rows.setdefault(int(row["id"]), row)
        except (sqlite3.Error, ValueError, TypeError, OverflowError):
            continue
    return rows


def salvage(damaged: Path, store: HistoryStore) -> int:
    """Copy the conversations and messages still readable in ``damaged`` into ``store``; returns how many chats.

    Opened read-only: the damaged copy is kept exactly as it was found. Messages whose conversation
    row is lost get a conversation titled "Recovered chat".
    """
    try:
        src = sqlite3.connect(f"{damaged.resolve().as_uri()}?mode=ro", uri=True, timeout=1.0)
    except (sqlite3.Error, OSError, ValueError):
        return 0
    with contextlib.closing(src):
        src.row_factory = sqlite3.Row
        convs = _readable_rows(src, "conversations")
        msgs = _readable_rows(src, "messages")
    recovered: set[int] = set()
    db = store._db
    with db:
        db.execute("BEGIN")
        for cid, row in sorted(convs.items()):
            try:
                c = _conversation(row)
                db.execute("INSERT INTO conversations(id, title, created, updated, model, settings) "
                           "VALUES (?,?,?,?,?,?)", (cid, c.title, c.created, c.updated, c.model, json.dumps(c.settings)))
                recovered.add(cid)
            except (sqlite3.Error, IndexError, KeyError, ValueError, TypeError):
                continue
        for mid, row in sorted(msgs.items()):
            try:
                m = _message(row)
                if m.conversation_id not in recovered:
                    now = m.created or time.time()
                    db.execute("INSERT INTO conversations(id, title, created, updated) VALUES (?,?,?,?)",
                               (m.conversation_id, "Recovered chat", now, now))
                    recovered.add(m.conversation_id)
                role = m.role if m.role in ("system", "user", "assistant") else "user"
                db.execute("INSERT INTO messages(id, conversation_id, role, content, thinking, stats, created, status, "
                           "sources) VALUES (?,?,?,?,?,?,?,?,?)",
                           (mid, m.conversation_id, role, m.content, m.thinking, json.dumps(m.stats), m.created,
                            m.status, _sources_text(m.sources)))
            except (sqlite3.Error, IndexError, KeyError, ValueError, TypeError):
                continue
    return len(recovered)


def _replace_damaged(path: Path, code: str, detail: str) -> tuple[HistoryStore, HistoryProblem]:
    """Move the unusable file aside, start a fresh one there and copy into it what can be read."""
    try:
        moved = move_aside(path)
        store = HistoryStore(path)
    except (OSError, HistoryError) as exc:  # cannot rename or create here: keep the session in memory
        return HistoryStore(MEMORY), HistoryProblem("unwritable", path, detail=f"{detail}; {exc}")
    recovered = salvage(moved, store) if code == "damaged" else 0
    return store, HistoryProblem(code, path, moved_to=moved, recovered=recovered, detail=detail)


def _open_one(path: Path) -> tuple[HistoryStore, HistoryProblem | None]:
    try:
        store = HistoryStore(path, verify=True)
    except HistoryError as exc:
        if exc.code in ("damaged", "not_a_file"):
            return _replace_damaged(path, exc.code, str(exc))
        if exc.code == "newer":
            raise
        return HistoryStore(MEMORY), HistoryProblem(exc.code, path, detail=str(exc))
    if store.upgraded_from is not None:
        return store, HistoryProblem("upgraded", path, moved_to=store.upgraded_from)
    return store, None


def open_history(path: str | Path | None = None) -> tuple[HistoryStore, HistoryProblem | None]:
    """The user's history, whatever state its file is in; never raises. The problem (if any) says what was done.

    A file from a newer version stays untouched at ``path`` (so that version still finds every
    conversation when it is installed again) and this version uses ``<stem>-v<N><suffix>`` beside it.
    """
    try:
        path = Path(path) if path is not None else default_history_path()
    except OSError as exc:  # the data folder itself cannot be created
        return HistoryStore(MEMORY), HistoryProblem("unwritable", Path(str(exc.filename or "")), detail=str(exc))
    try:
        return _open_one(path)
    except HistoryError as newer:
        separate = path.with_name(f"{path.stem}-v{SCHEMA_VERSION}{path.suffix}")
        try:
            store, problem = _open_one(separate)
        except HistoryError:  # that one is newer too
            store, problem = HistoryStore(MEMORY), None
        in_use = None if store.in_memory else separate
        detail = str(newer) + (f"; {problem.code}: {problem.detail}" if problem else "")
        return store, HistoryProblem("newer", path, in_use=in_use, version=newer.version,
                                     moved_to=problem.moved_to if problem else None, detail=detail)
