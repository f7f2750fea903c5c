"""The knowledge-bases dialog and the per-chat chooser, driven like a user would, on files the tests write.

Every run indexes for real (app.knowledge.indexer on the job's own thread and SQLite connection);
the only double is a small deterministic embedder that can be slowed down to cancel mid-run.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QApplication, QMenu, QMessageBox

from app.knowledge.store import KnowledgeStore
from app.knowledge_dialog import ChooseBasesDialog, KnowledgeBasesDialog, fill_bases_menu
from app.knowledge_jobs import IndexRunner

GOOD = {
    "notes.md": "# Garden\n\nThe zephyrine roses bloom in June.\n\n## Soil\n\nKeep the soil moist and loose.\n",
    "guide.txt": "The quokkalith valve must be closed before winter.\n\nDrain the pipes after closing it.\n",
    "tool.py": "def marmotta(x):\n    \"\"\"Double a number.\"\"\"\n    return 2 * x\n",
}


def write_folder(root: Path) -> Path:
    """3 good files, a damaged .docx and binary data behind a .txt name."""
    root.mkdir(parents=True, exist_ok=True)
    for name, text in GOOD.items():
        (root / name).write_text(text, encoding="utf-8")
    (root / "broken.docx").write_bytes(b"PK\x03\x04 this is not really a zip archive" * 3)
    (root / "blob.txt").write_bytes(bytes(range(256)) * 8)
    return root


class FakeEmbedder:
    """Unit vectors from a hash of the text. With ``hold_after=n`` every batch after the n-th waits for
    ``release`` (set by the test), so a run can be cancelled mid-way however slow the machine is."""

    model_id = "fake-embed"
    dim = 8

    def __init__(self, hold_after: int | None = None) -> None:
        self.hold_after = hold_after
        self.release = threading.Event()
        self.batches = 0

    def _vec(self, text: str) -> np.ndarray:
        v = np.frombuffer(hashlib.sha256(text.encode()).digest()[: self.dim * 4], np.uint32).astype(np.float32) + 1
        return v / np.linalg.norm(v)

    def embed_documents(self, texts: list[str], *, cancel=None) -> np.ndarray:
        if self.hold_after is not None and self.batches >= self.hold_after:
            assert self.release.wait(10), "the test never released the embedder"
        self.batches += 1
        return np.stack([self._vec(t) for t in texts])

    def embed_query(self, text: str) -> np.ndarray:
        return self._vec(text)


@pytest.fixture
def store(tmp_path):
    s = KnowledgeStore(tmp_path / "data" / "knowledge.sqlite3")
    yield s
    s.close()


@pytest.fixture
def make_dialog(qtbot, store):
    dialogs = []

    def make(embedder=None, embedding_model: str = "") -> KnowledgeBasesDialog:
        runner = IndexRunner(store.path, embedder=embedder)
        dlg = KnowledgeBasesDialog(store, runner, embedding_model=embedding_model)
        qtbot.addWidget(dlg)
        dlg.show()
        dialogs.append((dlg, runner))
        return dlg

    yield make
    for _dlg, runner in dialogs:
        assert runner.shutdown(5.0)


def run_and_wait(qtbot, dlg: KnowledgeBasesDialog, action, timeout: int = 30_000):
    """Do ``action`` (which starts a run) and return the run's job once it has ended."""
    with qtbot.waitSignal(dlg.runner.jobFinished, timeout=timeout) as blocker:
        action()
    return blocker.args[0]


def tree_rows(dlg: KnowledgeBasesDialog) -> dict[str, tuple[str, str]]:
    """File name -> (status text, passages) of every file shown for the selected base."""
    rows = {}
    for i in range(dlg.files_tree.topLevelItemCount()):
        top = dlg.files_tree.topLevelItem(i)
        items = [top.child(k) for k in range(top.childCount())] or [top]
        for it in items:
            rows[Path(it.text(0)).name] = (it.text(1), it.text(2))
    return rows


def problem_lines(dlg: KnowledgeBasesDialog) -> list[str]:
    return [dlg.problems_list.item(i).text() for i in range(dlg.problems_list.count())]


def base_row(dlg: KnowledgeBasesDialog, name: str) -> list[str]:
    for i in range(dlg.bases_list.topLevelItemCount()):
        it = dlg.bases_list.topLevelItem(i)
        if it.text(0) == name:
            return [it.text(c) for c in range(dlg.bases_list.columnCount())]
    raise AssertionError(f"{name} not listed")


def answer_name_box(qtbot, dlg: KnowledgeBasesDialog, text: str) -> None:
    """When the name dialog opens (within 2 s), type ``text`` into it and press Enter."""
    deadline = time.monotonic() + 2

    def fill() -> None:
        box = dlg.name_box
        if box is None:
            if time.monotonic() < deadline:
                QTimer.singleShot(20, fill)
            return
        box.setTextValue(text)
        qtbot.keyClick(box, Qt.Key.Key_Return)

    QTimer.singleShot(0, fill)


def press_in_confirm_box(dlg: KnowledgeBasesDialog, which: str, seen: list[str]) -> None:
    """When the question opens (within 2 s), note its text and press Delete or Cancel."""
    deadline = time.monotonic() + 2

    def press() -> None:
        box = dlg.confirm_box
        if box is None:
            if time.monotonic() < deadline:
                QTimer.singleShot(20, press)
            return
        seen.append(box.text())
        for b in box.buttons():
            role = box.buttonRole(b)
            if (which == "delete") == (role == QMessageBox.ButtonRole.DestructiveRole):
                b.click()
                return

    QTimer.singleShot(0, press)


def test_folder_with_bad_files_indexes_the_good_ones_and_says_why_the_others_failed(qtbot, make_dialog, store,
                                                                                   tmp_path):
    folder = write_folder(tmp_path / "docs")
    dlg = make_dialog()
    assert dlg.create_base("Docs") is not None
    seen_progress = []

    def watch(job):
        job.progress.connect(lambda p: seen_progress.append(
            (p.done_files, p.total_files, dlg.progress_bar.isVisible(), dlg.progress_label.text())))

    dlg.runner.jobStarted.connect(watch)
    job = run_and_wait(qtbot, dlg, lambda: dlg.add_paths([folder]))
    assert job.error == "" and job.report is not None
    assert seen_progress and seen_progress[-1][1] == 5  # 5 files to read, progress shown while it ran
    assert all(visible for *_, visible, _label in seen_progress)
    assert any("Indexing “Docs”" in label for *_, label in seen_progress)
    assert not dlg.progress_bar.isVisible() and not dlg.cancel_button.isVisible()

    report = job.report
    assert (report.added, report.unchanged, report.removed) == (3, 0, 0)
    assert sorted(p.path.name for p in report.problems) == ["blob.txt", "broken.docx"]
    rows = tree_rows(dlg)
    assert {n for n, (status, _) in rows.items() if status == "indexed"} == set(GOOD)
    assert all(int(rows[n][1]) >= 1 for n in GOOD)
    assert rows["broken.docx"][0] == rows["blob.txt"][0] == "not indexed (see why below)"
    assert problem_lines(dlg) == [
        "blob.txt is not a text file (it contains binary data; was it renamed?).",
        "broken.docx is damaged or not the kind of file its name says."]
    assert dlg.problems_list.isVisible()
    assert "3 added, 0 unchanged, 0 updated, 0 removed" in dlg.report_label.text()
    assert "Could not index 2 of the files" in dlg.report_label.text()
    name, files, passages, problems, search = base_row(dlg, "Docs")
    assert (files, problems, search) == ("5", "2", "Words") and int(passages) >= 3
    assert dlg.store.fts_search([dlg.current_base_id()], "quokkalith", 5)


def test_new_and_rename_by_keyboard_and_names_must_be_unique(qtbot, make_dialog, store):
    dlg = make_dialog()
    with qtbot.waitActive(dlg):
        dlg.activateWindow()
    assert dlg.base_title.text().startswith("No knowledge base yet")
    assert not dlg.rename_button.isEnabled() and not dlg.add_folder_button.isEnabled()
    answer_name_box(qtbot, dlg, "Manuals")
    qtbot.keyClick(dlg, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    assert [b.name for b in store.bases()] == ["Manuals"]
    assert base_row(dlg, "Manuals")[:4] == ["Manuals", "0", "0", "0"]
    assert dlg.add_folder_button.isEnabled()

    answer_name_box(qtbot, dlg, "  Manuals ")
    dlg.new_button.click()
    assert "already exists" in dlg.status_label.text() and len(store.bases()) == 1

    dlg.bases_list.setFocus()
    answer_name_box(qtbot, dlg, "Handbooks")
    qtbot.keyClick(dlg.bases_list, Qt.Key.Key_F2)
    assert [b.name for b in store.bases()] == ["Handbooks"]
    assert "Renamed “Manuals” to “Handbooks”" in dlg.status_label.text()
    answer_name_box(qtbot, dlg, "")
    dlg.rename_button.click()
    assert dlg.status_label.text() == "A knowledge base needs a name." and store.bases()[0].name == "Handbooks"


def test_reindex_is_incremental_and_a_deleted_file_loses_its_passages(qtbot, make_dialog, store, tmp_path):
    folder = write_folder(tmp_path / "docs")
    dlg = make_dialog()
    base_id = dlg.create_base("Docs")
    run_and_wait(qtbot, dlg, lambda: dlg.add_paths([folder]))

    job = run_and_wait(qtbot, dlg, dlg.reindex_button.click)
    assert (job.report.added, job.report.updated, job.report.removed) == (0, 0, 0)
    assert job.report.unchanged == 5  # the 3 good files and the 2 that still fail
    assert "0 added, 5 unchanged, 0 updated, 0 removed" in dlg.report_label.text()
    assert "Could not index 2 of the files" in dlg.report_label.text()  # still failing, still said

    guide = folder / "guide.txt"
    guide.write_text("The quokkalith valve was replaced by a basaltine tap.\n", encoding="utf-8")
    os.utime(guide, ns=(time.time_ns(), time.time_ns() + 5_000_000_000))
    job = run_and_wait(qtbot, dlg, lambda: qtbot.keyClick(dlg, Qt.Key.Key_F5))
    assert (job.report.updated, job.report.unchanged) == (1, 4)
    assert "1 updated" in dlg.report_label.text()
    assert store.fts_search([base_id], "basaltine", 5)

    (folder / "notes.md").unlink()
    assert store.fts_search([base_id], "zephyrine", 5)
    job = run_and_wait(qtbot, dlg, dlg.reindex)
    assert job.report.removed == 1 and "1 removed" in dlg.report_label.text()
    assert store.fts_search([base_id], "zephyrine", 5) == []
    assert "notes.md" not in tree_rows(dlg)
    assert (folder / "guide.txt").exists()


def test_remove_a_file_from_the_base_drops_its_passages_not_the_file(qtbot, make_dialog, store, tmp_path):
    folder = write_folder(tmp_path / "docs")
    dlg = make_dialog()
    base_id = dlg.create_base("Loose files")
    run_and_wait(qtbot, dlg, lambda: dlg.add_paths([folder / "guide.txt", folder / "tool.py"]))
    assert set(tree_rows(dlg)) == {"guide.txt", "tool.py"}
    assert store.fts_search([base_id], "marmotta", 5)
    item = next(dlg.files_tree.topLevelItem(i) for i in range(dlg.files_tree.topLevelItemCount())
                if dlg.files_tree.topLevelItem(i).text(0).endswith("tool.py"))
    dlg.files_tree.setCurrentItem(item)
    assert dlg.remove_button.isEnabled()
    dlg.remove_button.click()
    assert set(tree_rows(dlg)) == {"guide.txt"}
    assert store.fts_search([base_id], "marmotta", 5) == []
    assert store.fts_search([base_id], "quokkalith", 5)
    assert (folder / "tool.py").read_text(encoding="utf-8") == GOOD["tool.py"]
    assert "the file on disk is unchanged" in dlg.status_label.text()


def test_cancel_mid_run_keeps_what_finished_and_the_next_run_catches_up(qtbot, make_dialog, store, tmp_path):
    folder = tmp_path / "long"
    folder.mkdir()
    for k in range(3):  # many paragraphs: more than 3 embedding batches
        paras = [f"Paragraph {i} of file {k} talks about topic{k}x{i}. " * 3 for i in range(200)]
        (folder / f"part{k}.md").write_text("\n\n".join(paras), encoding="utf-8")
    slow = FakeEmbedder(hold_after=1)
    dlg = make_dialog(embedder=slow, embedding_model="fake-embed")
    base_id = dlg.create_base("Long")

    labels = []

    def cancel_when_embedding(job):
        def on_progress(p):
            if p.phase == "embedding" and p.embedded > 0 and not job.cancelled:  # the 2nd batch is held
                labels.append(dlg.progress_label.text())
                dlg.cancel_button.click()
                labels.append(dlg.progress_label.text())
                slow.release.set()

        job.progress.connect(on_progress)

    dlg.runner.jobStarted.connect(cancel_when_embedding)
    job = run_and_wait(qtbot, dlg, lambda: dlg.add_paths([folder]))
    dlg.runner.jobStarted.disconnect(cancel_when_embedding)
    assert job.report.cancelled and job.report.added == 3
    assert labels[0].startswith("“Long”: computing search vectors, 16 of ")
    assert labels[1] == "Cancelling after the current file…"
    assert "Cancelled; the files indexed so far are kept." in dlg.report_label.text()
    assert "was cancelled" in dlg.progress_label.text()
    total = store.passage_count([base_id])
    ids, _vectors = store.vectors([base_id], "fake-embed")
    assert total > 48 and len(ids) == 32  # the two finished batches are kept, the rest not yet
    assert all(status == "indexed" for status, _ in tree_rows(dlg).values())

    job = run_and_wait(qtbot, dlg, dlg.reindex)
    assert not job.report.cancelled and job.report.unchanged == 3
    assert len(store.vectors([base_id], "fake-embed")[0]) == total
    assert base_row(dlg, "Long")[4] == "Words + meaning (fake-embed)"
    assert "Vectors from fake-embed." in dlg.base_title.text()


def test_delete_asks_first_and_leaves_the_files_on_disk(qtbot, make_dialog, store, tmp_path):
    folder = write_folder(tmp_path / "docs")
    dlg = make_dialog()
    base_id = dlg.create_base("Docs")
    run_and_wait(qtbot, dlg, lambda: dlg.add_paths([folder]))
    questions: list[str] = []
    press_in_confirm_box(dlg, "cancel", questions)
    dlg.delete_button.click()
    assert store.base(base_id) is not None
    assert "Delete the knowledge base “Docs”" in questions[0] and "files on disk are not touched" in questions[0]

    press_in_confirm_box(dlg, "delete", questions)
    with qtbot.waitActive(dlg):
        dlg.activateWindow()
    dlg.bases_list.setFocus()
    qtbot.keyClick(dlg.bases_list, Qt.Key.Key_Delete)
    assert len(questions) == 2 and store.base(base_id) is None and store.bases() == []
    assert store.passage_count([base_id]) == 0
    assert sorted(p.name for p in folder.iterdir()) == sorted([*GOOD, "broken.docx", "blob.txt"])
    assert "its files on disk are unchanged" in dlg.status_label.text()
    assert dlg.bases_list.topLevelItemCount() == 0


def test_chosen_bases_of_a_conversation_persist(qtbot, store):
    a, b, c = (store.create_base(n) for n in ("Alpha", "Beta", "Gamma"))
    chooser = ChooseBasesDialog(store, conversation_id=7)
    qtbot.addWidget(chooser)
    assert chooser.chosen_ids() == []
    chooser.set_checked(a.id, True)
    chooser.list.setCurrentRow(2)
    chooser.list.item(2).setCheckState(Qt.CheckState.Checked)
    chooser.accept()
    assert store.conversation_bases(7) == sorted([a.id, c.id]) and store.conversation_bases(8) == []

    again = ChooseBasesDialog(store, conversation_id=7)
    qtbot.addWidget(again)
    assert again.chosen_ids() == sorted([a.id, c.id])
    again.set_checked(a.id, False)
    again.reject()  # Cancel keeps the saved choice
    assert store.conversation_bases(7) == sorted([a.id, c.id])

    menu = QMenu()
    actions = fill_bases_menu(menu, store, 7)
    assert [x.text() for x in actions] == ["Alpha", "Beta", "Gamma"]
    assert [x.isChecked() for x in actions] == [True, False, True]
    actions[1].setChecked(True)
    assert store.conversation_bases(7) == [a.id, b.id, c.id]
    empty = ChooseBasesDialog(KnowledgeStore(":memory:"), 1)
    qtbot.addWidget(empty)
    assert empty.list.count() == 0 and not empty.empty_label.isHidden()


def test_a_knowledge_base_survives_restart(qtbot, tmp_path):
    path = tmp_path / "data" / "knowledge.sqlite3"
    folder = write_folder(tmp_path / "docs")
    first = KnowledgeStore(path)
    runner = IndexRunner(path)
    dlg = KnowledgeBasesDialog(first, runner, embedding_model="")
    qtbot.addWidget(dlg)
    base_id = dlg.create_base("Docs")
    run_and_wait(qtbot, dlg, lambda: dlg.add_paths([folder]))
    chooser = ChooseBasesDialog(first, 42)
    qtbot.addWidget(chooser)
    chooser.set_checked(base_id, True)
    chooser.accept()
    before = ([(f.path, f.status, f.error_code, f.passages) for f in first.files(base_id)],
              first.passage_count([base_id]))
    dlg.close()
    assert runner.shutdown(5.0)
    first.close()

    second = KnowledgeStore(path)
    try:
        assert [(b.id, b.name) for b in second.bases()] == [(base_id, "Docs")]
        assert second.roots(base_id) == [folder]
        assert ([(f.path, f.status, f.error_code, f.passages) for f in second.files(base_id)],
                second.passage_count([base_id])) == before
        assert second.fts_search([base_id], "zephyrine", 5)
        assert second.conversation_bases(42) == [base_id]
        chooser = ChooseBasesDialog(second, 42)
        qtbot.addWidget(chooser)
        assert chooser.chosen_ids() == [base_id]
        again = KnowledgeBasesDialog(second, IndexRunner(path), embedding_model="")
        qtbot.addWidget(again)
        assert base_row(again, "Docs")[1:4] == ["5", str(before[1]), "2"]
        assert {n for n, (s, _) in tree_rows(again).items() if s == "indexed"} == set(GOOD)
        assert again.runner.shutdown(1.0)
    finally:
        second.close()


def test_every_control_is_named_and_the_embedding_line_says_what_search_does(qtbot, make_dialog, store, tmp_path):
    from PySide6.QtWidgets import QAbstractButton, QAbstractItemView, QLineEdit

    dlg = make_dialog()
    dlg.create_base("Docs")
    unnamed = [type(w).__name__ for w in dlg.findChildren(QAbstractButton) + dlg.findChildren(QAbstractItemView)
               + dlg.findChildren(QLineEdit)
               if w.isVisibleTo(dlg) and not w.accessibleName() and not getattr(w, "text", lambda: "")()
               and not type(w.parent()).__name__ == "QDialogButtonBox"]
    assert unnamed == []
    assert dlg.minimumWidth() >= 600 and dlg.minimumHeight() >= 400
    assert dlg.embedding_label.text() == ("Full-text search only — install Qwen3-Embedding-0.6B from Models… "
                                          "for better matches.")
    looked_up = KnowledgeBasesDialog(store, dlg.runner)  # no embedding model installed in this test home
    qtbot.addWidget(looked_up)
    assert looked_up.embedding_model is None and looked_up.embedding_label.text() == dlg.embedding_label.text()
    named = make_dialog(embedding_model="Qwen3-Embedding-0.6B-Q8_0.gguf")
    assert "by meaning with the embedding model Qwen3-Embedding-0.6B-Q8_0.gguf" in named.embedding_label.text()
    from app.knowledge.embedder import EmbedderHandle

    for embedder, name in ((EmbedderHandle(tmp_path / "Qwen3-Embedding-0.6B.gguf"), "Qwen3-Embedding-0.6B.gguf"),
                           (FakeEmbedder(), "fake-embed")):  # the runner's embedder names the model
        runner = IndexRunner(store.path, embedder=embedder)
        from_runner = KnowledgeBasesDialog(store, runner)
        qtbot.addWidget(from_runner)
        assert from_runner.embedding_model == name and name in from_runner.embedding_label.text()
    assert QApplication.instance() is not None


def test_runs_queue_one_at_a_time_and_a_second_request_for_a_running_base_runs_after_it(qtbot, store, tmp_path):
    folders = [write_folder(tmp_path / f"docs{k}") for k in range(2)]
    gate = threading.Event()

    def held_embedder():  # the first run waits here (on its own thread) until the test lets it go
        gate.wait(10)
        return None

    runner = IndexRunner(store.path, embedder=held_embedder)
    one, two = store.create_base("One"), store.create_base("Two")
    store.add_paths(one.id, [folders[0]])
    store.add_paths(two.id, [folders[1]])
    started, ended = [], []
    runner.jobStarted.connect(lambda j: started.append(j.base_id))
    runner.jobFinished.connect(lambda j: ended.append((j.base_id, j.report is not None, j.error)))
    first = runner.index(one.id)
    qtbot.waitUntil(lambda: runner.current is first)
    again = runner.index(one.id)  # base One is running: one more run is queued behind it
    assert again is not first and runner.index(one.id) is again
    second = runner.index(two.id)
    assert runner.job_for(two.id) is second and runner.queue == [again, second]
    runner.cancel(two.id)  # a queued run that never starts ends as failed, with words
    assert second.error == "Cancelled before it started." and runner.queue == [again]
    gate.set()
    assert runner.wait_idle(30)
    assert started == [one.id, one.id]
    assert ended == [(two.id, False, "Cancelled before it started."), (one.id, True, ""), (one.id, True, "")]
    assert again.report.unchanged == 5 and first.report.added == 3
    assert runner.shutdown(1.0)
    with pytest.raises(RuntimeError, match="shut down"):
        runner.index(one.id)


def test_a_knowledge_base_survives_restarting_the_app(qtbot, make_window, tmp_path):
    """Same data folder, a new MainWindow: the base, its files and passages and the chat's choice are back."""
    folder = write_folder(tmp_path / "docs")
    w = make_window(load=False)
    w.new_conversation()
    cid = w.conversation_id
    dlg = KnowledgeBasesDialog(w.knowledge.store, w.knowledge.runner, w, embedding_model="")
    qtbot.addWidget(dlg)
    base_id = dlg.create_base("Docs")
    run_and_wait(qtbot, dlg, lambda: dlg.add_paths([folder]))
    dlg.reject()
    chooser = ChooseBasesDialog(w.knowledge.store, cid, w)
    qtbot.addWidget(chooser)
    chooser.set_checked(base_id, True)
    chooser.accept()
    passages = w.knowledge.store.passage_count([base_id])
    assert passages >= 3
    w.close()

    w2 = make_window(load=False)
    assert w2.knowledge.store is not w.knowledge.store
    w2.open_conversation(cid)
    assert w2.knowledge.base_ids() == [base_id]
    assert any(chip.item.base_id == base_id for chip in w2.attachments_bar.chips)
    assert w2.knowledge.store.passage_count([base_id]) == passages
    assert w2.knowledge.store.fts_search([base_id], "quokkalith", 3)
    shown = []

    def look_and_close() -> None:
        d = w2.knowledge_dialog
        if d is None:
            QTimer.singleShot(20, look_and_close)
            return
        shown.append((base_row(d, "Docs"), tree_rows(d), problem_lines(d)))
        d.reject()

    QTimer.singleShot(0, look_and_close)
    w2.knowledge_action.trigger()  # Documents > Knowledge bases… (modal until look_and_close closes it)
    (row, files, problems), = shown
    assert row[1:4] == ["5", str(passages), "2"]
    assert {n for n, (s, _) in files.items() if s == "indexed"} == set(GOOD)
    assert "binary data" in problems[0] and "damaged" in problems[1]


def test_add_buttons_use_the_file_pickers_and_index_what_was_picked(qtbot, make_dialog, store, tmp_path,
                                                                     monkeypatch):
    from PySide6.QtWidgets import QFileDialog

    folder = write_folder(tmp_path / "docs")
    dlg = make_dialog()
    base_id = dlg.create_base("Docs")
    monkeypatch.setattr(QFileDialog, "getOpenFileNames",
                        lambda *a, **k: ([str(folder / "guide.txt"), str(folder / "tool.py")], ""))
    run_and_wait(qtbot, dlg, dlg.add_files_button.click)
    assert store.roots(base_id) == [folder / "guide.txt", folder / "tool.py"]
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(folder))
    job = run_and_wait(qtbot, dlg, dlg.add_folder_button.click)
    assert (job.report.added, job.report.unchanged) == (1, 2)  # notes.md is new; the two files were known
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: "")  # the picker was cancelled
    dlg.add_folder_button.click()
    assert not dlg.runner.busy() and len(store.roots(base_id)) == 3


def test_a_dialog_opened_during_a_run_shows_it_and_can_cancel_it(qtbot, store, tmp_path):
    folder = tmp_path / "long"
    folder.mkdir()
    (folder / "a.md").write_text("\n\n".join(f"Paragraph {i}. " * 20 for i in range(300)), encoding="utf-8")
    held = FakeEmbedder(hold_after=0)
    runner = IndexRunner(store.path, embedder=held)
    base = store.create_base("Big")
    store.add_paths(base.id, [folder])
    job = runner.index(base.id)
    qtbot.waitUntil(lambda: job.last_progress is not None and job.last_progress.phase == "embedding",
                    timeout=20_000)
    dlg = KnowledgeBasesDialog(store, runner, embedding_model="fake-embed")
    qtbot.addWidget(dlg)
    dlg.show()
    assert dlg.job is job and dlg.progress_bar.isVisible() and dlg.cancel_button.isVisible()
    assert dlg.progress_label.text().startswith("“Big”: computing search vectors, 0 of ")
    with qtbot.waitSignal(runner.jobFinished, timeout=20_000):
        qtbot.mouseClick(dlg.cancel_button, Qt.MouseButton.LeftButton)
        held.release.set()
    assert job.report.cancelled and job.report.added == 1
    assert dlg.progress_label.text() == "Indexing “Big” was cancelled." and not dlg.progress_bar.isVisible()
    assert runner.shutdown(2)


def _file_item(dlg: KnowledgeBasesDialog, name: str):
    for i in range(dlg.files_tree.topLevelItemCount()):
        top = dlg.files_tree.topLevelItem(i)
        for k in range(top.childCount()):
            if Path(top.child(k).text(0)).name == name:
                return top.child(k)
    raise AssertionError(f"{name} not in the file list")


def test_exclude_a_file_of_a_folder_and_include_it_again_across_a_restart(qtbot, make_dialog, store, tmp_path):
    folder = write_folder(tmp_path / "docs")
    dlg = make_dialog()
    base_id = dlg.create_base("Docs")
    run_and_wait(qtbot, dlg, lambda: dlg.add_paths([folder]))
    assert store.fts_search([base_id], "quokkalith", 5)
    top = dlg.files_tree.topLevelItem(0)
    dlg.files_tree.setCurrentItem(top)  # the added folder itself: removed, not excluded
    assert dlg.remove_button.isEnabled() and not dlg.exclude_button.isEnabled()

    dlg.files_tree.setCurrentItem(_file_item(dlg, "guide.txt"))
    assert dlg.exclude_button.isEnabled() and dlg.exclude_button.text() == "Exclude"
    assert not dlg.remove_button.isEnabled()
    dlg.exclude_button.click()
    assert store.fts_search([base_id], "quokkalith", 5) == []  # its passages went at once
    assert store.fts_search([base_id], "zephyrine", 5)  # the rest stays
    assert tree_rows(dlg)["guide.txt"] == ("excluded", "0")
    assert dlg.files_tree.currentItem().text(0) == "guide.txt"  # still selected, now to include it again
    assert dlg.exclude_button.text() == "Include again"
    assert "Excluded guide.txt" in dlg.status_label.text() and (folder / "guide.txt").exists()
    job = run_and_wait(qtbot, dlg, dlg.reindex)
    assert job.report.added == 0 and store.fts_search([base_id], "quokkalith", 5) == []
    dlg.close()

    again = KnowledgeStore(store.path)  # a restart: the exclusion is in the database
    try:
        runner = IndexRunner(again.path)
        dlg2 = KnowledgeBasesDialog(again, runner, embedding_model="")
        qtbot.addWidget(dlg2)
        dlg2.show()
        dlg2.select_base(base_id)
        assert tree_rows(dlg2)["guide.txt"] == ("excluded", "0")
        dlg2.files_tree.setCurrentItem(_file_item(dlg2, "guide.txt"))
        job = run_and_wait(qtbot, dlg2, dlg2.exclude_button.click)  # "Include again" indexes it
        assert job.report.added == 1 and again.excluded(base_id) == []
        assert again.fts_search([base_id], "quokkalith", 5)
        assert tree_rows(dlg2)["guide.txt"][0] == "indexed"
        dlg2.close()
        assert runner.shutdown(5.0)
    finally:
        again.close()
