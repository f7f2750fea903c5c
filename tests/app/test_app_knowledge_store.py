"""The knowledge store: bases, per-chat choices, citations' locations, damaged and newer files."""

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from app.knowledge.indexer import index_base
from app.knowledge.passages import Passage
from app.knowledge.store import (
    SCHEMA_VERSION,
    KnowledgeError,
    KnowledgeStore,
    StoredPassage,
    _salvage,
    default_knowledge_path,
    index_terms,
    open_knowledge_store,
)


def test_bases_create_rename_delete(tmp_path):
    store = KnowledgeStore(tmp_path / "kb.sqlite3")
    a = store.create_base("  Manuals ")
    assert a.name == "Manuals" and store.base_named("Manuals") == a and store.base(a.id) == a
    with pytest.raises(KnowledgeError) as e:
        store.create_base("Manuals")
    assert e.value.code == "exists"
    with pytest.raises(KnowledgeError) as e:
        store.create_base("   ")
    assert e.value.code == "invalid_name"
    b = store.create_base("Papers")
    with pytest.raises(KnowledgeError) as e:
        store.rename_base(b.id, "Manuals")
    assert e.value.code == "exists"
    store.rename_base(b.id, "Articles")
    assert [x.name for x in store.bases()] == ["Articles", "Manuals"]
    with pytest.raises(KnowledgeError) as e:
        store.add_paths(999, [tmp_path])
    assert e.value.code == "no_base"
    store.add_paths(a.id, [tmp_path / "x" / ".." / "docs", tmp_path / "docs"])
    assert store.roots(a.id) == [tmp_path / "docs"]
    store.delete_base(a.id)
    assert store.base(a.id) is None and store.roots(a.id) == []
    store.close()
    assert KnowledgeStore(tmp_path / "kb.sqlite3").bases()[0].name == "Articles"  # survives a restart


def test_default_path_is_in_the_data_dir(_isolated_home):
    assert default_knowledge_path() == _isolated_home / "data" / "knowledge.sqlite3"
    store = KnowledgeStore()
    assert store.path == default_knowledge_path() and store.path.is_file()


def test_conversation_attachments_and_choices(tmp_path):
    store = KnowledgeStore(":memory:")
    named = store.create_base("Notes")
    other = store.create_base("Other")
    assert store.attachments_base(7, create=False) is None and store.bases_for_conversation(7) == []
    own = store.attachments_base(7)
    assert own.conversation_id == 7 and store.attachments_base(7) == own
    assert own not in store.bases()  # private: not listed with the named bases
    store.set_conversation_bases(7, [other.id, named.id, own.id, 12345])  # private/unknown ids ignored
    assert store.conversation_bases(7) == sorted([named.id, other.id])
    assert store.bases_for_conversation(7) == [*sorted([named.id, other.id]), own.id]
    store.delete_base(other.id)
    assert store.conversation_bases(7) == [named.id]
    store.forget_conversation(7)
    assert store.base(own.id) is None and store.bases_for_conversation(7) == []
    assert store.base(named.id) is not None


def test_locations_for_citations():
    def p(name, page=None, heading="", line=None):
        return StoredPassage(1, 1, Path("/d") / name, 0, "t", page, heading, line)

    assert p("report.pdf", page=3).location() == "report.pdf, p. 3"
    assert p("notes.md", heading="Install > Linux", line=9).location() == "notes.md, Install > Linux"
    assert p("main.py", line=40).location() == "main.py, line 40"
    assert p("page.html").location() == "page.html"


def test_index_terms_segment_chinese():
    assert index_terms("GPU 知识库 ok").split() == ["GPU", "知", "识", "库", "知识", "识库", "ok"]


def test_replace_file_is_atomic_and_vectors_follow_passages(tmp_path):
    store = KnowledgeStore(":memory:")
    base = store.create_base("b")
    passages = [Passage(0, "alpha text", None, "", 1), Passage(1, "beta text", None, "H", 3)]
    fid = store.replace_file(base.id, tmp_path / "a.md", size=10, mtime_ns=1, sha256="x", kind="markdown",
                             passages=passages, vectors=np.eye(2, 4, dtype=np.float32), model_id="m")
    assert [p.text for p in store.file_passages(fid)] == ["alpha text", "beta text"]
    ids, vectors = store.vectors([base.id], "m")
    assert vectors.shape == (2, 4) and vectors[1, 1] == 1 and store.vectors([base.id], "m")[1] is vectors
    with pytest.raises(ValueError):
        store.replace_file(base.id, tmp_path / "a.md", size=10, mtime_ns=2, sha256="y", kind="markdown",
                           passages=passages, vectors=np.eye(3, 4), model_id="m")
    with pytest.raises(AttributeError):  # a bad passage half-way: nothing of the new version is kept
        store.replace_file(base.id, tmp_path / "a.md", size=10, mtime_ns=2, sha256="y", kind="markdown",
                           passages=[Passage(0, "gamma", None, "", 1), object()])
    assert [p.text for p in store.file_passages(fid)] == ["alpha text", "beta text"]
    assert store.fts_search([base.id], '"gamma"', 5) == []
    store.record_file_error(base.id, tmp_path / "a.md", "corrupt", "a.md is damaged")
    assert store.passage_count([base.id]) == 0 and store.vectors([base.id], "m")[0].size == 0
    assert store.fts_search([base.id], '"alpha"', 5) == []  # the FTS rows went with the passages


def test_damaged_file_is_moved_aside_and_a_fresh_store_starts(tmp_path):
    path = tmp_path / "knowledge.sqlite3"
    path.write_bytes(b"this is not a database at all, just some text that is long enough " * 10)
    store, message = open_knowledge_store(path)
    assert "damaged" in message and "moved to" in message
    kept = [p for p in tmp_path.iterdir() if p.name.startswith("knowledge.sqlite3.damaged-")]
    assert len(kept) == 1 and kept[0].read_bytes().startswith(b"this is not a database")
    store.create_base("works")
    assert store.bases()[0].name == "works" and not store.in_memory
    store.close()
    again, message = open_knowledge_store(path)
    assert message is None and again.bases()[0].name == "works"


def test_salvage_keeps_bases_roots_exclusions_and_choices(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("salvaged words", encoding="utf-8")
    (docs / "draft.txt").write_text("left out on purpose", encoding="utf-8")
    old = KnowledgeStore(tmp_path / "old.sqlite3")
    base = old.create_base("Keep me")
    old.add_paths(base.id, [docs])
    old.exclude_path(base.id, docs / "draft.txt")
    old.set_conversation_bases(3, [base.id])
    index_base(old, base.id)
    old.close()
    fresh = KnowledgeStore(tmp_path / "new.sqlite3")
    assert _salvage(tmp_path / "old.sqlite3", fresh) == 1
    kept = fresh.base_named("Keep me")
    assert fresh.roots(kept.id) == [docs] and fresh.conversation_bases(3) == [kept.id]
    assert fresh.excluded(kept.id) == [docs / "draft.txt"]
    assert index_base(fresh, kept.id).added == 1  # re-indexing rebuilds the passages, still without the draft


def test_not_a_file_and_another_programs_database(tmp_path):
    folder = tmp_path / "knowledge.sqlite3"
    folder.mkdir()
    with pytest.raises(KnowledgeError) as e:
        KnowledgeStore(folder)
    assert e.value.code == "not_a_file"
    store, message = open_knowledge_store(folder)
    assert "moved to" in message and store.path == folder and folder.is_file()
    foreign = tmp_path / "foreign.sqlite3"
    with sqlite3.connect(foreign) as db:
        db.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    with pytest.raises(KnowledgeError) as e:
        KnowledgeStore(foreign)
    assert e.value.code == "damaged"


def test_newer_version_is_left_untouched(tmp_path):
    path = tmp_path / "knowledge.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
        db.execute("CREATE TABLE future (x)")
    before = path.read_bytes()
    with pytest.raises(KnowledgeError) as e:
        KnowledgeStore(path)
    assert e.value.code == "newer" and e.value.version == SCHEMA_VERSION + 1
    store, message = open_knowledge_store(path)
    assert "newer version" in message and store.path == tmp_path / f"knowledge-v{SCHEMA_VERSION}.sqlite3"
    assert path.read_bytes() == before


def test_locked_file_gives_a_session_in_memory(tmp_path):
    path = tmp_path / "knowledge.sqlite3"
    KnowledgeStore(path).close()
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("PRAGMA locking_mode=EXCLUSIVE")
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(KnowledgeError) as e:
            KnowledgeStore(path, busy_timeout_s=0.05)
        assert e.value.code == "locked"
        store, message = open_knowledge_store(path, busy_timeout_s=0.05)
        assert store.in_memory and "in memory for this session" in message
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
