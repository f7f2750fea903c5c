"""Chat history in SQLite: conversations and messages, saved while they are being produced.

Why SQLite (WAL mode): one file, crash-safe transactions, concurrent readers, full-text search
(FTS5) — the same choice as the Ollama app and PyGPT. An assistant reply is inserted as a
``partial`` row as soon as generation starts and updated by :class:`StreamingMessageSaver` every
~100 ms (or every few tokens) and once more when it finishes, so a crash or power cut loses at
most the text produced since the last update; the row then stays ``partial`` and the UI marks it
as interrupted.

No Qt here: the GUI, tests and scripts use this module directly.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
    status TEXT NOT NULL DEFAULT 'complete' CHECK (status IN ('partial', 'complete'))
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

    @property
    def interrupted(self) -> bool:
        """True for a reply whose generation never finished (crash, power cut, app killed)."""
        return self.status == PARTIAL


def _conversation(row: sqlite3.Row) -> Conversation:
    return Conversation(row["id"], row["title"], row["created"], row["updated"], row["model"],
                        json.loads(row["settings"] or "{}"))


def _message(row: sqlite3.Row) -> Message:
    return Message(row["id"], row["conversation_id"], row["role"], row["content"], row["thinking"],
                   json.loads(row["stats"] or "{}"), row["created"], row["status"])


class HistoryStore:
    """All conversations of one user. Use from one thread (the GUI thread)."""

    def __init__(self, path: str | Path | None = None) -> None:
        if path is None:
            from app.paths import data_dir

            path = data_dir() / "history.sqlite3"
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(self.path), isolation_level=None)  # autocommit; explicit txns
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across app crashes
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(_SCHEMA)
        self.has_fts = self._try_create_fts()
        self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def _try_create_fts(self) -> bool:
        try:
            self._db.executescript(_FTS_SCHEMA)
            return True
        except sqlite3.OperationalError:  # SQLite built without FTS5 or without the trigram tokenizer
            return False

    def close(self) -> None:
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
                    stats: dict[str, Any] | None = None, status: str = COMPLETE) -> Message:
        now = time.time()
        with self._db:
            self._db.execute("BEGIN")
            cur = self._db.execute(
                "INSERT INTO messages(conversation_id, role, content, thinking, stats, created, status) "
                "VALUES (?,?,?,?,?,?,?)",
                (conversation_id, role, content, thinking, json.dumps(stats or {}), now, status))
            self._db.execute("UPDATE conversations SET updated=? WHERE id=?", (now, conversation_id))
        return Message(int(cur.lastrowid), conversation_id, role, content, thinking, dict(stats or {}),
                       now, status)

    def update_message(self, message_id: int, *, content: str | None = None, thinking: str | None = None,
                       stats: dict[str, Any] | None = None, status: str | None = None) -> None:
        sets, args = [], []
        for column, value in (("content", content), ("thinking", thinking), ("status", status)):
            if value is not None:
                sets.append(f"{column}=?")
                args.append(value)
        if stats is not None:
            sets.append("stats=?")
            args.append(json.dumps(stats))
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
                 "created": m.created, "status": m.status}
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
        lines.append("")
    return "\n".join(lines)


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
