"""Chat with your documents in the window: attach → index → ask → cited answer → click the citation.

The model is the tiny random test model (its answers are gibberish), with a 4,096-token context so
that passages fit beside the question; everything else is the app's real path: the indexer on its
thread, FTS5 retrieval and the prompt budget on the engine worker, the history's sources column.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QTimer, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QTextCursor
from PySide6.QtWidgets import QApplication, QMenu

from tests.app.pdf_samples import blank_pdf, pages_pdf
from tests.gui.conftest import window_maker

ANSWER = "The harbour gate code is PELICAN-42 and it changes every spring."


@pytest.fixture
def kb_window(qtbot, kb_model_path):
    with window_maker(qtbot, kb_model_path, 6) as make:
        yield make


def _documents(folder: Path) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    md = folder / "harbour notes.md"
    md.write_text("# Harbour\n\n## Boats\n\nThe ferry leaves at nine and returns at noon.\n\n"
                  f"## Gates\n\n{ANSWER}\n\n## Weather\n\nFog is common in the morning.\n", encoding="utf-8")
    pdf = pages_pdf(folder / "manual.pdf", [["Chapter one: the lighthouse lamp uses a ternary switch."],
                                            ["Chapter two: the keeper logs the tides twice a day."],
                                            ["Chapter three: the fog horn sounds every thirty seconds."]])
    return md, pdf


def _attach(qtbot, w, paths) -> object:
    with qtbot.waitSignal(w.knowledge.indexingFinished, timeout=60_000) as blocker:
        assert w.attach_paths([str(p) for p in paths])
    return blocker.args[0]


def _ask(qtbot, w, question: str) -> None:
    with qtbot.waitSignal(w.generationFinished, timeout=120_000):
        assert w.send(question)


def _anchor_point(view, href: str) -> QPoint:
    """Where a link is drawn in a QTextBrowser (viewport coordinates), found in its document."""
    doc = view.document()
    block = doc.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            frag = it.fragment()
            if frag.charFormat().anchorHref() == href:
                cursor = QTextCursor(doc)
                cursor.setPosition(frag.position())
                start = view.cursorRect(cursor)
                cursor.setPosition(frag.position() + 1)  # the middle of the link's first character
                end = view.cursorRect(cursor)
                return QPoint((start.x() + end.x()) // 2 + 1, start.center().y())
            it += 1
        block = block.next()
    raise AssertionError(f"no link {href} in {view.toHtml()[:400]}")


def _click_link(qtbot, view, href: str) -> None:
    qtbot.waitUntil(view.isVisible, timeout=5_000)  # laid out: a just-opened chat's widgets are shown next
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=_anchor_point(view, href))


def test_gui_attach_ask_cited_answer_click_and_reopen(qtbot, kb_window, tmp_path):
    w = kb_window()
    md, pdf = _documents(tmp_path / "docs")
    report = _attach(qtbot, w, [md, pdf])
    assert not report.problems and report.passages >= 4
    assert [c.item.label for c in w.attachments_bar.chips] == ["harbour notes.md", "manual.pdf"]
    cid = w.conversation_id
    assert w.store.conversation(cid).title == "harbour notes.md"  # the new chat is named after the file

    _ask(qtbot, w, "What is the harbour gate code?")
    msgs = w.store.messages(cid)
    assert msgs[-2].role == "user" and msgs[-2].content == "What is the harbour gate code?"  # not the stuffed prompt
    sources = msgs[-1].sources
    used = [s for s in sources if s["used"]]
    assert used and used[0]["n"] == 1
    texts = [w.knowledge.store.passage(s["passage_id"]).text for s in used]
    assert any("PELICAN-42" in t for t in texts[:3])
    hit = next(i for i, s in enumerate(sources) if "PELICAN-42" in w.knowledge.store.passage(s["passage_id"]).text)
    assert sources[hit]["location"] == "harbour notes.md, Harbour > Gates"
    assert sources[hit]["quote"] in ANSWER or ANSWER.startswith(sources[hit]["quote"].rstrip("…"))
    pdf_pages = {w.knowledge.store.passage(s["passage_id"]).page for s in sources if s["path"].endswith(".pdf")}
    assert pdf_pages <= {1, 2, 3}

    reply = w.chat_view.widgets[-1]
    assert reply.sources_view.isVisible() and "Sources" in reply.sources_view.toPlainText()
    assert 'href="source:0"' in reply.sources_view.toHtml() and "[1]" in reply.sources_view.toPlainText()
    _click_link(qtbot, reply.sources_view, f"source:{hit}")
    dlg = w.passage_dialog
    assert dlg is not None and dlg.isVisible()
    assert ANSWER in dlg.text_view.toPlainText() and dlg.highlighted and dlg.highlighted in ANSWER
    assert "harbour notes.md" in dlg.location_label.text() and "Gates" in dlg.location_label.text()
    assert dlg.open_button.isEnabled() and not dlg.state_label.isVisible()
    dlg.close()

    # reopening the conversation shows the sources again, still clickable
    w.new_conversation()
    assert w.attachments_bar.chips == []  # the new chat has nothing attached
    w.open_conversation(cid)
    reopened = w.chat_view.widgets[-1]
    assert reopened.sources == sources and not reopened.sources_view.isHidden()
    assert [c.item.label for c in w.attachments_bar.chips] == ["harbour notes.md", "manual.pdf"]
    _click_link(qtbot, reopened.sources_view, "source:0")
    assert w.passage_dialog is not None and w.passage_dialog.view.number == 1
    w.passage_dialog.close()

    # regenerate answers from the documents again (the same question, sources stored with the new reply)
    with qtbot.waitSignal(w.generationFinished, timeout=120_000):
        reopened.regen_button.click()
    again = w.store.messages(cid)
    assert again[-2].content == "What is the harbour gate code?" and again[-1].sources
    assert again[-1].sources[0]["passage_id"] == sources[0]["passage_id"]
    # so does an edited question
    w.chat_view.widgets[-2].edit_button.click()
    w.input.setPlainText("Which code opens the harbour gate?")
    with qtbot.waitSignal(w.generationFinished, timeout=120_000):
        w.send()
    edited = w.store.messages(cid)
    assert [m.content for m in edited[:1]] == ["Which code opens the harbour gate?"] and len(edited) == 2
    assert any("PELICAN-42" in w.knowledge.store.passage(s["passage_id"]).text for s in edited[-1].sources)


def test_gui_sources_survive_a_restart_and_say_when_the_file_changed(qtbot, kb_window, tmp_path):
    w = kb_window()
    md, _pdf = _documents(tmp_path / "docs")
    _attach(qtbot, w, [md])
    cid = w.conversation_id
    _ask(qtbot, w, "Which code opens the harbour gate?")
    w.close()
    md.write_text(md.read_text(encoding="utf-8") + "\nA new line.\n", encoding="utf-8")  # changed since indexing

    again = kb_window(load=False)  # a restart: the same history and knowledge files
    again.open_conversation(cid)
    reply = again.chat_view.widgets[-1]
    assert reply.sources and not reply.sources_view.isHidden()
    _click_link(qtbot, reply.sources_view, "source:0")
    dlg = again.passage_dialog
    assert dlg.view.file_state == "changed" and "has changed since it was indexed" in dlg.state_label.text()
    dlg.close()
    md.unlink()
    _click_link(qtbot, reply.sources_view, "source:0")
    dlg = again.passage_dialog
    assert "no longer at" in dlg.state_label.text() and not dlg.open_button.isEnabled()
    assert dlg.text_view.toPlainText().strip()  # the indexed copy is still shown
    dlg.close()


def _answer_widget(qtbot, message_id: int, text: str, sources: list[dict]) -> tuple[object, list]:
    """An assistant message showing ``text`` with ``sources``, and the list its source clicks go to."""
    from app.chat_view import MessageWidget

    w = MessageWidget(message_id, "assistant")
    qtbot.addWidget(w)
    w.show()
    w.set_text(text, "")
    w.set_sources(sources)
    clicked: list = []
    w.sourceRequested.connect(lambda mid, i: clicked.append((mid, i)))
    return w, clicked


def test_gui_citation_numbers_in_the_answer_are_links(qtbot):
    """[n] in an answer links to source n (not inside code, not numbers without a source)."""
    from app.chat_view import link_citations

    sources = [{"n": 1, "passage_id": 7, "path": "/x/a.md", "location": "a.md, Intro", "quote": "alpha", "used": True},
               {"n": 2, "passage_id": 8, "path": "/x/b.md", "location": "b.md", "quote": "beta", "used": True},
               {"n": None, "passage_id": 9, "path": "/x/c.md", "location": "c.md, line 4", "quote": "gamma",
                "used": False}]
    w, clicked = _answer_widget(qtbot, 5, "Alpha holds [1], both say so [1, 2]. Not `x[1]` nor [9]. 中文【2】",
                                sources)
    body = w.body.toHtml()
    assert 'href="cite:1"' in body and 'href="cite:2"' in body and 'href="cite:9"' not in body
    assert "【2】" in w.body.toPlainText()
    assert "x[1]" in w.body.toPlainText() and "[9]" in w.body.toPlainText()
    assert "Left out (did not fit in the context): c.md, line 4" in w.sources_view.toPlainText()
    _click_link(qtbot, w.body, "cite:2")
    _click_link(qtbot, w.sources_view, "source:2")  # a left-out passage opens too
    assert clicked == [(5, 1), (5, 2)]
    assert link_citations("```\n[1]\n```\n[1]", {1}) == "```\n[1]\n```\n[\\[1\\]](cite:1)"
    assert link_citations("[1]: https://x\nsee [1](https://y)", {1}) == "[1]: https://x\nsee [1](https://y)"
    assert link_citations("中文【2】", {2}) == "中文[【2】](cite:2)"


def test_gui_every_number_of_a_cited_range_is_a_link(qtbot):
    """[1-3] and 【1–3】 cite 1, 2 and 3: each is shown and clickable (needs app.chat_view to use
    app.knowledge.answer.link_citations)."""
    sources = [{"n": n, "passage_id": n, "path": f"/x/{n}.md", "location": f"{n}.md", "quote": "q", "used": True}
               for n in (1, 2, 3)]
    w, clicked = _answer_widget(qtbot, 6, "Both say so [1-3]. 中文【1–3】 and [2]–[3].", sources)
    body = w.body.toHtml()
    assert [body.count(f'href="cite:{n}"') for n in (1, 2, 3)] == [2, 3, 3]
    assert "[1][2][3]" in w.body.toPlainText() and "【1】【2】【3】" in w.body.toPlainText()
    _click_link(qtbot, w.body, "cite:2")  # the middle of the range, not written in the answer
    assert clicked == [(6, 1)]


def test_gui_bad_file_among_good_ones_and_removing_attachments(qtbot, kb_window, tmp_path):
    w = kb_window(load=False)
    folder = tmp_path / "mixed"
    md, _pdf = _documents(folder)
    blank_pdf(folder / "secret.pdf", password="pw")
    (folder / "broken.docx").write_bytes(b"PK\x03\x04 not really a zip")
    w.new_conversation()
    report = _attach(qtbot, w, [folder])
    assert {p.path.name for p in report.problems} == {"secret.pdf", "broken.docx"}
    assert report.passages >= 4  # the good files were indexed
    text = w.banner.text()
    assert "could not be indexed" in text and "secret.pdf is password-protected" in text and "broken.docx" in text
    chip = w.attachments_bar.chips[0]
    assert chip.item.label == "mixed" and "secret.pdf" in chip.label.toolTip()
    assert w.knowledge.base_ids()
    chip.remove_button.click()
    assert w.attachments_bar.chips == [] and w.knowledge.base_ids() == []
    own = w.knowledge.store.attachments_base(w.conversation_id, create=False)
    assert w.knowledge.store.files(own.id) == []  # its passages went with it


def test_gui_cancel_indexing_keeps_what_finished_and_close_stops_it(qtbot, kb_window, tmp_path):
    w = kb_window(load=False)
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(300):
        (folder / f"note{i:03}.md").write_text(f"# Note {i}\n\nTernary weights are -1, 0 or +1. Entry {i}.\n",
                                               encoding="utf-8")
    w.new_conversation()
    with qtbot.waitSignal(w.knowledge.indexingFinished, timeout=60_000) as blocker:
        w.attach_paths([str(folder)])
        qtbot.waitUntil(lambda: w.attachments_bar.progress_row.isVisible()
                        and w.attachments_bar.progress_bar.value() >= 1, timeout=30_000)
        w.attachments_bar.cancel_button.click()
    report = blocker.args[0]
    assert report.cancelled and report.added < 300
    assert "Indexing was cancelled" in w.banner.text() and not w.attachments_bar.progress_row.isVisible()
    # closing the window while indexing stops the run cleanly (what finished stays)
    w.attach_paths([str(folder)])
    qtbot.waitUntil(lambda: w.knowledge.job is not None and w.knowledge.job.is_running(), timeout=10_000)
    job = w.knowledge.job
    w.close()
    assert job.wait(10.0) and job.cancelled


def _drop(w, paths) -> None:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        enter = QDragEnterEvent(QPoint(200, 200), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                                Qt.KeyboardModifier.NoModifier)
    assert QApplication.sendEvent(w, enter) and enter.isAccepted()
    drop = QDropEvent(QPointF(200, 200), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                      Qt.KeyboardModifier.NoModifier)
    assert QApplication.sendEvent(w, drop)


def _choose(qtbot, w, text: str | None) -> list[str]:
    """When the drop menu opens, press Enter on the default item (``text`` None) or on the item ``text``."""
    seen: list[str] = []

    def pick() -> None:
        menu = w.drop_menu
        if menu is None or not menu.isVisible():
            QTimer.singleShot(20, pick)
            return
        seen.extend(a.text() for a in menu.actions())
        for _ in range(len(menu.actions())):  # arrow down to the item, as a keyboard user would
            if text is None or menu.activeAction().text() == text:
                break
            qtbot.keyClick(menu, Qt.Key.Key_Down)
        qtbot.keyClick(menu, Qt.Key.Key_Return)

    QTimer.singleShot(0, pick)
    return seen


def test_gui_drop_offers_ask_or_summarize(qtbot, kb_window, tmp_path):
    w = kb_window(max_new_tokens=4)
    md, _pdf = _documents(tmp_path / "docs")
    seen = _choose(qtbot, w, None)  # Enter: the default, attach to this chat
    with qtbot.waitSignal(w.knowledge.indexingFinished, timeout=60_000):
        _drop(w, [md])
    assert seen == ["harbour notes.md", "Ask questions about it (attach to this chat)", "Summarize it"]
    assert [c.item.label for c in w.attachments_bar.chips] == ["harbour notes.md"]

    w.new_conversation()
    _choose(qtbot, w, "Summarize it")
    with qtbot.waitSignal(w.worker.summaryDone, timeout=120_000):
        _drop(w, [md])
    qtbot.waitUntil(lambda: w.last_summary is not None, timeout=10_000)
    assert w.store.messages(w.conversation_id)[0].content == "Summarize the document harbour notes.md"
    assert w.attachments_bar.chips == []  # summarizing attaches nothing


def test_gui_attach_menu_and_deleting_the_chat_forgets_its_attachments(qtbot, kb_window, tmp_path, monkeypatch):
    from PySide6.QtWidgets import QFileDialog

    w = kb_window(load=False)
    md, _pdf = _documents(tmp_path / "docs")
    assert w.attach_button.menu() is w.attach_menu and w.attach_button.isEnabled()  # no model needed to attach
    assert not w.summarize_action.isEnabled()  # summarizing needs one
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", lambda *a, **k: ([str(md)], ""))
    with qtbot.waitSignal(w.knowledge.indexingFinished, timeout=60_000):
        w.attach_files_action.trigger()
    cid = w.conversation_id
    own = w.knowledge.store.attachments_base(cid, create=False)
    assert own is not None and w.knowledge.store.files(own.id)
    w.delete_conversation(cid, confirm=False)
    assert w.knowledge.store.attachments_base(cid, create=False) is None
    assert w.knowledge.store.passage(1) is None
    assert isinstance(w.documents_menu, QMenu) and w.knowledge_action.text() == "Knowledge bases…"


def test_gui_a_damaged_knowledge_database_never_stops_the_start(qtbot, kb_window, tmp_path):
    from app.core.paths import data_dir

    (data_dir() / "knowledge.sqlite3").write_bytes(b"not a database at all " * 50)
    w = kb_window(load=False)
    assert w.banner.isVisible() and "knowledge-base file was damaged" in w.banner.text()
    md, _pdf = _documents(tmp_path / "docs")
    report = _attach(qtbot, w, [md])  # a new file was started: documents can be attached
    assert report.passages >= 3 and not report.problems
    assert "knowledge-base file was damaged" in w.banner.text()  # the start-up notice stays until closed


def test_gui_knowledge_bases_chosen_for_the_chat_answer_questions(qtbot, kb_window, tmp_path):
    """Documents > Knowledge bases… opens the manager; the bar's Knowledge bases… ticks a base for this
    chat, which then shows in the bar and answers the questions (× takes it out of the chat again)."""
    w = kb_window()
    md, _pdf = _documents(tmp_path / "docs")
    store = w.knowledge.store
    base = store.create_base("Harbour")
    store.add_paths(base.id, [md])
    job = w.knowledge.runner.index(base.id)
    with qtbot.waitSignal(job.finished, timeout=60_000):
        pass

    opened = []

    def close_manager() -> None:
        if w.knowledge_dialog is None or not w.knowledge_dialog.isVisible():
            QTimer.singleShot(20, close_manager)
            return
        opened.append(type(w.knowledge_dialog).__name__)
        w.knowledge_dialog.reject()

    QTimer.singleShot(0, close_manager)
    w.knowledge_action.trigger()
    assert opened == ["KnowledgeBasesDialog"]

    w.new_conversation()

    def tick() -> None:
        dlg = w.bases_dialog
        if dlg is None or not dlg.isVisible():
            QTimer.singleShot(20, tick)
            return
        dlg.set_checked(base.id, True)
        dlg.accept()

    QTimer.singleShot(0, tick)
    w.attachments_bar.bases_button.click()
    assert [c.item.label for c in w.attachments_bar.chips] == ["Harbour"]
    assert w.knowledge.base_ids() == [base.id]
    _ask(qtbot, w, "What is the harbour gate code?")
    sources = w.store.messages(w.conversation_id)[-1].sources
    assert any("PELICAN-42" in store.passage(s["passage_id"]).text for s in sources if s["used"])
    w.attachments_bar.chips[0].remove_button.click()
    assert w.attachments_bar.chips == [] and w.knowledge.base_ids() == [] and store.base(base.id) is not None


def test_gui_deleting_a_chat_while_its_documents_are_indexed(qtbot, kb_window, tmp_path):
    w = kb_window(load=False)
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(300):
        (folder / f"note{i:03}.md").write_text(f"# Note {i}\n\nEntry {i} of the log.\n", encoding="utf-8")
    w.new_conversation()
    cid = w.conversation_id
    w.attach_paths([str(folder)])
    qtbot.waitUntil(lambda: w.knowledge.job is not None and w.knowledge.job.is_running(), timeout=10_000)
    job = w.knowledge.job
    w.clear_banner()
    w.delete_conversation(cid, confirm=False)
    assert job.cancelled and w.knowledge.store.attachments_base(cid, create=False) is None
    qtbot.waitUntil(lambda: w.knowledge.job is None, timeout=10_000)
    assert not w.banner.isVisible()  # no news about a chat that is gone
    assert w.knowledge.store.passage_count([job.base_id]) == 0


def test_gui_the_attachments_bar_is_in_the_tab_order_after_attach(qtbot, kb_window, tmp_path):
    w = kb_window(load=False)
    md, _pdf = _documents(tmp_path / "docs")
    w.new_conversation()
    _attach(qtbot, w, [md])
    chain, cur = [], w.attach_button
    for _ in range(12):
        cur = cur.nextInFocusChain()
        chain.append(cur)
        if cur is w.input:
            break
    bar = w.attachments_bar
    assert [x for x in chain if x in (bar.chips[0].remove_button, bar.bases_button, w.input)] == \
        [bar.chips[0].remove_button, bar.bases_button, w.input]
    assert bar.chips[0].remove_button.accessibleName() == "Remove harbour notes.md from this chat"
