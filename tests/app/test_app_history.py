import json
import sqlite3

import pytest

from app.core.history import COMPLETE, PARTIAL, HistoryStore, StreamingMessageSaver
from app.core.paths import data_dir


def test_history_default_path_is_under_isolated_home(tmp_path):
    store = HistoryStore()
    assert store.path.parent == data_dir()
    assert str(store.path).startswith(str(tmp_path / "home"))
    mode = sqlite3.connect(store.path).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_conversations_crud_and_order(tmp_path):
    store = HistoryStore(tmp_path / "h.db")
    a = store.create_conversation("First", model="bonsai-1.7b")
    b = store.create_conversation("Second")
    store.add_message(a.id, "user", "hello")  # touching a makes it the most recent
    assert [c.id for c in store.conversations()] == [a.id, b.id]
    store.rename_conversation(b.id, "  Renamed  ")
    assert store.conversation(b.id).title == "Renamed"
    try:
        store.rename_conversation(b.id, "   ")
        raise AssertionError("empty title accepted")
    except ValueError:
        pass
    store.delete_conversation(a.id)
    assert store.conversation(a.id) is None
    assert store.messages(a.id) == []  # cascade


def test_history_survives_reopen_and_partial_is_kept(tmp_path):
    path = tmp_path / "h.db"
    store = HistoryStore(path)
    c = store.create_conversation("Chat")
    store.add_message(c.id, "user", "question")
    reply = store.add_message(c.id, "assistant", "", status=PARTIAL)
    t = [0.0]
    saver = StreamingMessageSaver(store, reply.id, min_interval_s=0.1, max_pending=1000, clock=lambda: t[0])
    for i, tok in enumerate(["Hel", "lo", " wor", "ld"]):
        t[0] = 0.05 * (i + 1)  # 50 ms per token: saved every second token
        saver.append(tok)
    del store  # simulate a crash: no finish(), no close()
    again = HistoryStore(path)
    msgs = again.messages(c.id)
    assert [m.role for m in msgs] == ["user", "assistant"]
    assert msgs[1].status == PARTIAL and msgs[1].interrupted
    assert msgs[1].content == "Hello world"  # last save happened at t=0.2 after "ld"


def test_streaming_saver_throttles_and_finishes(tmp_path):
    store = HistoryStore(tmp_path / "h.db")
    c = store.create_conversation()
    reply = store.add_message(c.id, "assistant", "", status=PARTIAL)
    t = [0.0]
    saver = StreamingMessageSaver(store, reply.id, min_interval_s=0.1, max_pending=8, clock=lambda: t[0])
    for _ in range(20):  # 20 tokens in 0 s: saved only by the every-8-pieces rule
        saver.append("x")
    assert saver.saves == 2
    assert store.message(reply.id).content == "x" * 16
    saver.append("think", channel="thinking")
    saver.finish(content="final answer", stats={"decode_tok_s": 12.5})
    m = store.message(reply.id)
    assert (m.content, m.thinking, m.status, m.stats) == ("final answer", "think", COMPLETE, {"decode_tok_s": 12.5})


def test_search_title_and_content_with_and_without_fts(tmp_path):
    store = HistoryStore(tmp_path / "h.db")
    a = store.create_conversation("Recipes")
    b = store.create_conversation("Physics")
    store.add_message(b.id, "user", "Explain the photoelectric effect")
    store.add_message(a.id, "assistant", "把面粉和水混合")
    assert [c.id for c in store.search("recip")] == [a.id]
    assert [c.id for c in store.search("PHOTOELECTRIC")] == [b.id]
    assert [c.id for c in store.search("面粉")] == [a.id]  # 2 chars: LIKE path
    assert [c.id for c in store.search("面粉和水")] == [a.id]  # FTS trigram path
    assert store.search("100%") == []
    store.has_fts = False
    assert [c.id for c in store.search("photoelectric")] == [b.id]
    # edits are reflected in the index
    msg = store.messages(b.id)[0]
    store.has_fts = True
    store.update_message(msg.id, content="quantum tunnelling")
    assert store.search("photoelectric") == []
    assert [c.id for c in store.search("tunnel")] == [b.id]


def test_delete_messages_from(tmp_path):
    store = HistoryStore(tmp_path / "h.db")
    c = store.create_conversation()
    ids = [store.add_message(c.id, r, t).id for r, t in [("user", "a"), ("assistant", "b"), ("user", "c")]]
    store.delete_messages_from(c.id, ids[1])
    assert [m.content for m in store.messages(c.id)] == ["a"]


def test_export_markdown_and_json(tmp_path):
    store = HistoryStore(tmp_path / "h.db")
    c = store.create_conversation("导出 test", model="bonsai-4b")
    store.add_message(c.id, "user", "What is 2+2?")
    store.add_message(c.id, "assistant", "**4**", thinking="2 plus 2", stats={"decode_tok_s": 3.0})
    md = store.export_markdown(c.id, tmp_path / "out" / "chat.md").read_text(encoding="utf-8")
    assert md.startswith("# 导出 test")
    assert "## User\n\nWhat is 2+2?" in md
    assert "<details><summary>Thinking</summary>" in md and "**4**" in md
    data = json.loads((store.export_json(c.id, tmp_path / "chat.json")).read_text(encoding="utf-8"))
    assert data["title"] == "导出 test" and data["model"] == "bonsai-4b"
    assert [m["role"] for m in data["messages"]] == ["user", "assistant"]
    assert data["messages"][1]["thinking"] == "2 plus 2"
    assert not list(tmp_path.glob(".*.tmp")) and not list((tmp_path / "out").glob(".*.tmp"))


# -- sources of grounded answers (issue 27) -------------------------------------------------------
SOURCES = [
    {"n": 1, "passage_id": 7, "path": "/docs/合同.pdf", "location": "合同.pdf, p. 3", "quote": "第三条 付款期限为三十天。",
     "used": True, "page": 3},
    {"n": None, "passage_id": 9, "path": "/docs/notes.md", "location": "notes.md, Install", "quote": "Run make.",
     "used": False, "reason": "did not fit: needs 300 tokens, 12 left"},
]


def test_sources_round_trip_and_export(tmp_path):
    path = tmp_path / "h.db"
    store = HistoryStore(path)
    c = store.create_conversation("docs")
    store.add_message(c.id, "user", "付款期限是多久？")
    plain = store.add_message(c.id, "assistant", "no sources here")
    reply = store.add_message(c.id, "assistant", "", status=PARTIAL, sources=SOURCES)
    assert reply.sources == SOURCES and plain.sources == []
    store.close()
    again = HistoryStore(path)
    assert again.message(reply.id).sources == SOURCES and again.message(plain.id).sources == []
    again.update_message(reply.id, content="三十天 [1]", status=COMPLETE, sources=SOURCES[:1])
    again.update_message(plain.id, content="edited")  # sources untouched when not given
    assert again.message(reply.id).sources == SOURCES[:1] and again.message(plain.id).sources == []
    again.update_message(reply.id, sources=SOURCES)
    data = again.to_dict(c.id)
    assert data["messages"][2]["sources"] == SOURCES and data["messages"][1]["sources"] == []
    md = again.export_markdown(c.id, tmp_path / "chat.md").read_text(encoding="utf-8")
    answer_part = md.split("## Assistant")[-1]
    assert "**Sources**" in answer_part and "- [1] 合同.pdf, p. 3 — “第三条 付款期限为三十天。”" in answer_part
    assert "*Left out (did not fit):* notes.md, Install" in answer_part
    assert md.count("**Sources**") == 1  # not under answers without sources
    again.close()


@pytest.mark.parametrize("stored", ["{not json", "42", '{"n": 1}', '[1, "x", {"n": 2}]', ""])
def test_damaged_sources_read_as_empty_never_crash(tmp_path, stored):
    path = tmp_path / "h.db"
    store = HistoryStore(path)
    c = store.create_conversation()
    m = store.add_message(c.id, "assistant", "a", sources=SOURCES)
    store._db.execute("UPDATE messages SET sources=? WHERE id=?", (stored, m.id))
    expected = [{"n": 2}] if stored.startswith("[1") else []
    assert store.message(m.id).sources == expected
    assert store.to_dict(c.id)["messages"][0]["sources"] == expected
    store.close()


def test_older_file_without_sources_column_is_upgraded_in_place(tmp_path):
    path = tmp_path / "h.db"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE conversations (id INTEGER PRIMARY KEY AUTOINCREMENT, title TEXT NOT NULL, created REAL NOT NULL,
            updated REAL NOT NULL, model TEXT NOT NULL DEFAULT '', settings TEXT NOT NULL DEFAULT '{}');
        CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, conversation_id INTEGER NOT NULL,
            role TEXT NOT NULL, content TEXT NOT NULL DEFAULT '', thinking TEXT NOT NULL DEFAULT '',
            stats TEXT NOT NULL DEFAULT '{}', created REAL NOT NULL, status TEXT NOT NULL DEFAULT 'complete');
        INSERT INTO conversations VALUES (1, 'old chat', 1.0, 2.0, '', '{}');
        INSERT INTO messages VALUES (1, 1, 'user', 'old question', '', '{}', 1.5, 'complete');
        PRAGMA user_version=1;
    """)
    db.close()
    before = path.read_bytes()
    store = HistoryStore(path)
    assert store.upgraded_from is not None and store.upgraded_from.read_bytes() == before  # the copy as it was
    [old] = store.messages(1)
    assert old.content == "old question" and old.sources == []
    new = store.add_message(1, "assistant", "answer [1]", sources=SOURCES[:1])
    store.close()
    again = HistoryStore(path)
    assert again.upgraded_from is None  # upgraded once
    assert again.message(new.id).sources == SOURCES[:1]
    again.close()
