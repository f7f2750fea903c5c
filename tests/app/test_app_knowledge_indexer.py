"""Indexing: incremental runs, changed/removed files, per-file bad input, cancel, walking folders."""

import os
import time

import pytest

from app.knowledge import indexer
from app.knowledge.indexer import IndexProgress, index_base
from app.knowledge.retrieval import search
from app.knowledge.store import KnowledgeStore
from runtime.generation import CancelToken
from tests.app.pdf_samples import blank_pdf, pages_pdf


def _base(tmp_path, *paths):
    store = KnowledgeStore(tmp_path / "kb.sqlite3")
    base = store.create_base("b")
    store.add_paths(base.id, list(paths))
    return store, base.id


def _notes(folder, count, words=180):
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        body = "\n\n".join(
            " ".join(f"note{i} paragraph{p} word{w % 37} topic{(i * 7 + w) % 101}." for w in range(words // 4))
            for p in range(4))
        (folder / f"note{i:03d}.md").write_text(f"# Note {i}\n\n{body}\n", encoding="utf-8")


def test_unchanged_folder_reindexes_in_under_5_percent(tmp_path):
    _notes(tmp_path / "notes", 150, words=300)
    store, base_id = _base(tmp_path, tmp_path / "notes")
    first = index_base(store, base_id)
    assert first.added == 150 and first.passages >= 450 and not first.problems
    again = index_base(store, base_id)
    ratio = again.seconds / first.seconds
    print(f"\nfirst index {first.seconds:.3f} s ({first.passages} passages), unchanged re-index "
          f"{again.seconds:.4f} s = {ratio:.1%}")
    assert again.unchanged == 150 and again.added == again.updated == again.removed == again.written == 0
    assert ratio < 0.05


def test_changed_touched_and_removed_files(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("Alpha speaks of apples.\n", encoding="utf-8")
    (docs / "b.txt").write_text("Beta speaks of bananas.\n", encoding="utf-8")
    (docs / "c.txt").write_text("Gamma speaks of cherries.\n", encoding="utf-8")
    store, base_id = _base(tmp_path, docs)
    assert index_base(store, base_id).added == 3
    (docs / "a.txt").write_text("Alpha now speaks of apricots instead.\n", encoding="utf-8")
    st = os.stat(docs / "b.txt")
    os.utime(docs / "b.txt", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # touched, same bytes
    (docs / "c.txt").unlink()
    report = index_base(store, base_id)
    assert (report.updated, report.unchanged, report.removed, report.written) == (1, 1, 1, 1)
    assert search(store, [base_id], "apples") == [] and search(store, [base_id], "apricots")
    assert search(store, [base_id], "cherries") == []
    assert sorted(f.path.name for f in store.files(base_id)) == ["a.txt", "b.txt"]
    assert index_base(store, base_id).unchanged == 2  # the touched file's new stamp was kept


def test_bad_files_each_get_a_message_and_the_rest_is_indexed(tmp_path, monkeypatch):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "good.md").write_text("# Good\n\nThe good file mentions zeppelins.\n", encoding="utf-8")
    pages_pdf(docs / "pages.pdf", [["Page one text about kites."], ["Page two text about gliders."]])
    blank_pdf(docs / "locked.pdf", password="secret")
    blank_pdf(docs / "scan.pdf")
    (docs / "broken.docx").write_bytes(b"PK\x03\x04 this is not really a zip archive" * 4)
    (docs / "photo.txt").write_bytes(bytes(range(256)) * 16)
    (docs / "secret.txt").write_text("nobody may read this", encoding="utf-8")
    (docs / "doomed.txt").write_text("this file is deleted while the folder is indexed", encoding="utf-8")
    (docs / "empty.txt").write_text("   \n", encoding="utf-8")
    os.chmod(docs / "secret.txt", 0)
    if os.geteuid() == 0:  # root reads any file: make the read fail the way it does for a user
        real = indexer._sha256

        def denied(path):
            if path.name == "secret.txt":
                raise PermissionError(13, "Permission denied", str(path))
            return real(path)

        monkeypatch.setattr(indexer, "_sha256", denied)

    def progress(p: IndexProgress) -> None:
        if p.current.endswith("doomed.txt"):
            os.unlink(p.current)

    store, base_id = _base(tmp_path, docs)
    report = index_base(store, base_id, progress=progress)
    codes = {p.path.name: p.code for p in report.problems}
    assert codes == {"locked.pdf": "encrypted", "scan.pdf": "no_text", "broken.docx": "corrupt",
                     "photo.txt": "binary", "secret.txt": "unreadable", "doomed.txt": "vanished",
                     "empty.txt": "empty"}
    messages = {p.path.name: p.message for p in report.problems}
    assert "password-protected" in messages["locked.pdf"] and "scanned" in messages["scan.pdf"]
    assert "not a text file" in messages["photo.txt"] and "Permission denied" in messages["secret.txt"]
    assert "deleted or moved while it was being indexed" in messages["doomed.txt"]
    assert report.added == 2 and not report.cancelled
    files = {f.path.name: f for f in store.files(base_id)}
    assert files["good.md"].status == "indexed" and files["pages.pdf"].passages == 2
    assert files["scan.pdf"].status == "error" and files["scan.pdf"].error_code == "no_text"
    assert "doomed.txt" not in files
    assert search(store, [base_id], "gliders")[0].passage.location() == "pages.pdf, p. 2"
    again = index_base(store, base_id)  # failures are listed again without re-reading
    assert {p.path.name for p in again.problems} == set(codes) - {"doomed.txt"} and again.written == 0


def test_cancel_keeps_finished_files_and_the_next_run_completes(tmp_path):
    _notes(tmp_path / "notes", 12, words=40)
    store, base_id = _base(tmp_path, tmp_path / "notes")
    token = CancelToken()
    seen = []

    def progress(p: IndexProgress) -> None:
        seen.append(p)
        if p.done_files == 4:
            token.cancel()

    report = index_base(store, base_id, progress=progress, cancel=token)
    assert report.cancelled and report.added == 5  # the file whose turn it was still finished whole
    assert [f.path.name for f in store.files(base_id)] == [f"note{i:03d}.md" for i in range(5)]
    assert all(f.passages > 0 for f in store.files(base_id))
    assert seen[0].total_files == 12 and seen[0].current.endswith("note000.md")
    rest = index_base(store, base_id)
    assert not rest.cancelled and rest.added == 7 and rest.unchanged == 5


def test_file_is_committed_whole_or_not_at_all(tmp_path, monkeypatch):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("first\n\nsecond\n\nthird\n", encoding="utf-8")
    store, base_id = _base(tmp_path, tmp_path / "docs")
    real = indexer.split_document

    def flaky(doc):
        passages = real(doc)

        class Exploding:
            def __getattr__(self, name):
                raise RuntimeError("disk vanished mid-file")

        return [*passages, Exploding()]

    monkeypatch.setattr(indexer, "split_document", flaky)
    with pytest.raises(RuntimeError):
        index_base(store, base_id)
    assert store.files(base_id) == [] and store.passage_count([base_id]) == 0
    monkeypatch.setattr(indexer, "split_document", real)
    assert index_base(store, base_id).added == 1 and store.passage_count([base_id]) == 1


def test_walk_skips_hidden_unsupported_large_and_symlink_loops(tmp_path, monkeypatch):
    docs = tmp_path / "docs"
    (docs / ".git").mkdir(parents=True)
    (docs / ".git" / "HEAD.txt").write_text("ref: main", encoding="utf-8")
    (docs / ".hidden.md").write_text("hidden", encoding="utf-8")
    (docs / "sub").mkdir()
    (docs / "sub" / "loop").symlink_to(docs, target_is_directory=True)
    (docs / "sub" / "code.rs").write_text("fn main() {\n    println!(\"hi\");\n}\n", encoding="utf-8")
    (docs / "picture.png").write_bytes(b"\x89PNG")
    (docs / "big.txt").write_text("x" * 5000, encoding="utf-8")
    monkeypatch.setattr(indexer, "MAX_DOCUMENT_BYTES", 4000)
    store, base_id = _base(tmp_path, docs, tmp_path / "gone.md", tmp_path / "missing-folder")
    report = index_base(store, base_id)
    assert report.added == 1 and [p.name for p in report.skipped] == ["picture.png"]
    assert {p.path.name: p.code for p in report.problems} == {"big.txt": "too_large", "gone.md": "missing",
                                                             "missing-folder": "missing"}
    big = next(p for p in report.problems if p.code == "too_large")
    assert big.size == 5000  # for the interfaces' own wording of the size
    again = index_base(store, base_id)  # unchanged and still too large: said again, with its size
    assert [p.size for p in again.problems if p.code == "too_large"] == [5000]
    assert search(store, [base_id], "println")[0].passage.location() == "code.rs, fn main"


def test_removing_a_root_drops_its_passages(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "x.txt").write_text("xylophones are loud", encoding="utf-8")
    (tmp_path / "b" / "y.txt").write_text("yodelling is louder", encoding="utf-8")
    store, base_id = _base(tmp_path, tmp_path / "a", tmp_path / "b")
    index_base(store, base_id)
    store.remove_path(base_id, tmp_path / "a")
    assert store.roots(base_id) == [tmp_path / "b"]
    assert search(store, [base_id], "xylophones") == [] and search(store, [base_id], "yodelling")
    assert index_base(store, base_id).added == 0


def test_progress_reports_every_file_then_the_end(tmp_path):
    _notes(tmp_path / "notes", 3, words=20)
    store, base_id = _base(tmp_path, tmp_path / "notes")
    seen = []
    started = time.perf_counter()
    report = index_base(store, base_id, progress=seen.append)
    assert time.perf_counter() - started < 5
    assert [p.done_files for p in seen] == [0, 1, 2, 3] and seen[-1].current == ""
    assert seen[-1].passages == report.written


def test_a_folder_that_cannot_be_listed_keeps_its_passages(tmp_path, monkeypatch):
    (tmp_path / "docs" / "private").mkdir(parents=True)
    (tmp_path / "docs" / "open.txt").write_text("open words", encoding="utf-8")
    (tmp_path / "docs" / "private" / "p.txt").write_text("private words", encoding="utf-8")
    store, base_id = _base(tmp_path, tmp_path / "docs")
    assert index_base(store, base_id).added == 2
    real_walk = os.walk

    def walk_denied(top, onerror=None, followlinks=False):  # as a folder with mode 000 is for a user
        for folder, dirs, names in real_walk(top, onerror=onerror, followlinks=followlinks):
            if "private" in dirs:
                dirs.remove("private")
                onerror(PermissionError(13, "Permission denied", str(tmp_path / "docs" / "private")))
            yield folder, dirs, names

    monkeypatch.setattr(indexer.os, "walk", walk_denied)
    report = index_base(store, base_id)
    assert report.removed == 0 and [(p.path.name, p.code) for p in report.problems] == [("private", "unreadable")]
    assert search(store, [base_id], "private")[0].passage.path.name == "p.txt"
    monkeypatch.setattr(indexer.os, "walk", real_walk)
    (tmp_path / "docs" / "private" / "p.txt").unlink()
    again = index_base(store, base_id)
    assert again.removed == 2 and not again.problems  # p.txt, and the folder's "cannot be read" entry
    assert search(store, [base_id], "private") == []


def test_an_excluded_file_of_a_folder_loses_its_passages_until_included_again(tmp_path):
    from app.knowledge.store import KnowledgeError

    docs = tmp_path / "docs"
    _notes(docs / "sub", 2)
    _notes(docs, 3)
    (tmp_path / "alone.md").write_text("# Alone\n\nA file added on its own.\n", encoding="utf-8")
    store, base_id = _base(tmp_path, docs, tmp_path / "alone.md")
    first = index_base(store, base_id)
    assert first.added == 6
    target = docs / "note001.md"
    before = {f.path: f.passages for f in store.files(base_id)}
    assert before[target] > 0

    store.exclude_path(base_id, target)
    store.exclude_path(base_id, docs / "sub")  # a sub-folder: everything under it
    assert store.excluded(base_id) == [target, docs / "sub"]
    assert target not in {f.path for f in store.files(base_id)}  # its passages went at once
    assert store.passage_count([base_id]) == sum(n for p, n in before.items() if p.parent == docs or p.name == "alone.md") \
        - before[target]
    assert not [h for h in search(store, [base_id], "note1 paragraph0") if h.passage.path == target]
    again = index_base(store, base_id)  # the indexer skips it: not added back, not a problem, not "skipped"
    assert again.added == 0 and not again.problems and target not in again.skipped
    assert {f.path.name for f in store.files(base_id)} == {"note000.md", "note002.md", "alone.md"}

    with pytest.raises(KnowledgeError) as err:  # an added path itself is removed, not excluded
        store.exclude_path(base_id, tmp_path / "alone.md")
    assert err.value.code == "not_in_folder"
    with pytest.raises(KnowledgeError):
        store.exclude_path(base_id, tmp_path / "elsewhere.md")

    store.close()  # the exclusion survives a restart
    store = KnowledgeStore(tmp_path / "kb.sqlite3")
    assert store.excluded(base_id) == [target, docs / "sub"]
    assert index_base(store, base_id).added == 0

    store.include_path(base_id, target)
    store.include_path(base_id, target)  # twice: no-op
    assert store.excluded(base_id) == [docs / "sub"]
    back = index_base(store, base_id)
    assert back.added == 1 and {f.path: f.passages for f in store.files(base_id)}[target] == before[target]

    store.remove_path(base_id, docs)  # the folder goes: so do its exclusions
    assert store.excluded(base_id) == []
    store.close()
