"""Dropping documents on the window: long ones are summarized in several chunks with progress."""

from __future__ import annotations

import re
import time
import warnings

from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication, QPushButton

from tests.app.pdf_samples import blank_pdf


def _drop(w, path) -> None:
    """What a real drag and drop delivers: DragEnter (which Qt needs to route the drop), then Drop."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path))])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # PySide6 marks the QPoint overload deprecated
        enter = QDragEnterEvent(QPoint(200, 200), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                                Qt.KeyboardModifier.NoModifier)
    assert QApplication.sendEvent(w, enter) and enter.isAccepted()
    event = QDropEvent(QPointF(200, 200), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                       Qt.KeyboardModifier.NoModifier)
    handled = []
    w.dropHandled.connect(lambda: handled.append(True))
    choose_in_drop_menu(w, "Summarize it", until=handled)
    assert QApplication.sendEvent(w, event)
    deadline = time.monotonic() + 30
    while not handled and time.monotonic() < deadline:  # the menu opens once the drop has returned
        QApplication.processEvents()
        time.sleep(0.005)
    assert handled, "the drop was not handled"


def choose_in_drop_menu(w, text: str, until: list) -> None:
    """The drop asks "Ask questions about it" or "Summarize it": pick ``text`` with the keyboard once the menu is up."""
    from PySide6.QtCore import QTimer
    from PySide6.QtTest import QTest

    def pick() -> None:
        menu = w.drop_menu
        if menu is None or not menu.isVisible():
            if not until:  # the drop was handled without a menu (a model, a file that cannot be used)
                QTimer.singleShot(10, pick)
            return
        for _ in menu.actions():
            if menu.activeAction() is not None and menu.activeAction().text() == text:
                break
            QTest.keyClick(menu, Qt.Key.Key_Down)
        QTest.keyClick(menu, Qt.Key.Key_Return)

    QTimer.singleShot(0, pick)


def test_gui_dropped_long_document_is_summarized_in_chunks(qtbot, make_window, tmp_path):
    w = make_window(max_new_tokens=4)
    paragraphs = [f"Paragraph {i}: ternary weights are -1, 0 or +1." for i in range(24)]
    doc = tmp_path / "long report.txt"
    doc.write_text("\n\n".join(paragraphs), encoding="utf-8")
    progress = []
    w.worker.summaryProgress.connect(lambda rid, p: progress.append((p.stage, p.done, p.total)))
    with qtbot.waitSignal(w.worker.summaryDone, timeout=180_000):
        _drop(w, doc)
        qtbot.waitUntil(lambda: w._summary_dialog is not None, timeout=30_000)
        assert w._summary_dialog.isVisible()
    qtbot.waitUntil(lambda: w.last_summary is not None, timeout=10_000)
    r = w.last_summary
    assert r.chunks >= 3 and r.chunks_used == r.chunks and r.fraction_used == 1.0 and not r.cancelled
    assert [d for s, d, _ in progress if s == "map"] == list(range(r.chunks + 1))
    assert any(s == "reduce" for s, _, _ in progress)
    assert w._summary_dialog is None  # closed when done
    msgs = w.store.messages(w.conversation_id)
    assert msgs[-2].content == "Summarize the document long report.txt"
    assert f"in {r.chunks} parts" in msgs[-1].content and "whole document was read" in msgs[-1].content
    assert msgs[-1].stats["summary_chunks"] == r.chunks


def test_gui_summary_cancel_reports_coverage(qtbot, make_window, tmp_path):
    w = make_window(max_new_tokens=4)
    doc = tmp_path / "long.md"
    doc.write_text("\n\n".join(f"Section {i}. " + "words and more words. " * 4 for i in range(30)), encoding="utf-8")
    with qtbot.waitSignal(w.worker.summaryDone, timeout=180_000):
        _drop(w, doc)
        qtbot.waitUntil(lambda: w._summary_dialog is not None and w._summary_dialog.value() >= 1, timeout=120_000)
        w._summary_dialog.findChild(QPushButton).click()  # the dialog's Cancel button, as a user would
    qtbot.waitUntil(lambda: w.last_summary is not None, timeout=10_000)
    r = w.last_summary
    assert r.cancelled and 1 <= r.chunks_used < r.chunks and 0 < r.fraction_used < 1
    assert "Cancelled: the summary covers" in w.banner.text()
    assert "%" in w.store.messages(w.conversation_id)[-1].content


def test_gui_bad_documents_get_clear_messages(qtbot, make_window, tmp_path):
    w = make_window()
    cases = {
        "secret.pdf": (lambda p: blank_pdf(p, password="pw"), "password-protected"),
        "scan.pdf": (lambda p: blank_pdf(p), "scanned PDF"),
        "broken.docx": (lambda p: p.write_bytes(b"PK\x03\x04 not really a zip"), "damaged"),
        "image.txt": (lambda p: p.write_bytes(bytes(range(256)) * 10), "not a text file"),
    }
    for name, (make, words) in cases.items():
        path = tmp_path / name
        make(path)
        w.clear_banner()
        _drop(w, path)
        qtbot.waitUntil(lambda: w.banner.isVisible(), timeout=30_000)
        assert words in w.banner.text() and name in w.banner.text()
        assert w._summary_cancel is None and w.send_button.isEnabled()
    huge = tmp_path / "huge.txt"
    with open(huge, "wb") as f:
        f.truncate(500 * 1024 * 1024)
    w.clear_banner()
    _drop(w, huge)
    qtbot.waitUntil(lambda: w.banner.isVisible(), timeout=30_000)
    assert "too large" in w.banner.text() and "500 MB" in w.banner.text()


def _long_doc(tmp_path, paragraphs=60, name="report.txt"):
    doc = tmp_path / name
    doc.write_text("\n\n".join(f"Paragraph {i}: ternary weights are -1, 0 or +1." for i in range(paragraphs)),
                   encoding="utf-8")
    return doc


def _wait_summary_end(qtbot, w, timeout=300_000):
    qtbot.waitUntil(lambda: w._summary_cancel is None and w._summary_dialog is None, timeout=timeout)


def test_gui_summary_budget_comes_from_the_context_not_max_new_tokens(qtbot, make_window, tmp_path):
    # Issue 26.1: with "Max new tokens" 3000 the per-part budget was 3000 tokens; on this 512-token
    # context that could not even start. The budget now comes from the context alone.
    w = make_window(max_new_tokens=3000)
    ctx = int(w.model_info["context_length"])
    _drop(w, _long_doc(tmp_path, paragraphs=24))
    _wait_summary_end(qtbot, w)
    r = w.last_summary
    assert r is not None and not (w.banner.isVisible() and w.banner.property("kind") == "error")
    from app.core.summarize import answer_budget

    assert r.complete and r.chunks >= 3 and r.answer_tokens == answer_budget(ctx) == 64


def test_gui_summary_cancel_keeps_and_shows_the_parts_done(qtbot, make_window, tmp_path):
    w = make_window(max_new_tokens=3000)
    _drop(w, _long_doc(tmp_path, paragraphs=60))
    qtbot.waitUntil(lambda: w._summary_dialog is not None and w._summary_dialog.value() >= 2, timeout=300_000)
    w._summary_dialog.findChild(QPushButton).click()  # the dialog's Cancel button, as a user would
    _wait_summary_end(qtbot, w)
    r = w.last_summary
    assert r.cancelled and r.failure is None and 2 <= r.chunks_used < r.chunks
    assert len(r.chunk_summaries) == r.chunks_used
    shown = w.chat_view.widgets[-1].content
    stored = w.store.messages(w.conversation_id)[-1]
    assert stored.content == shown and stored.status == "complete"
    for k, part in enumerate(r.chunk_summaries, start=1):
        assert f"**Part {k} of {r.chunks}**" in shown and part in shown
    coverage = f"covers {r.chunks_used} of {r.chunks} parts"
    assert coverage in shown and coverage in w.banner.text()
    assert stored.stats["summary_chunks_used"] == r.chunks_used and stored.stats["summary_complete"] is False


def _watch_summary(qtbot, w, doc):
    """Run a summary of ``doc`` and sample, every 10 ms, what a user sees while it runs."""
    from PySide6.QtCore import QTimer

    seen = {"live_text": [], "labels": [], "speed": [], "steps": 0, "chart_before": len(w.gauges.chart.points)}

    def sample():
        if w._summary_dialog is None:
            return
        reply = w.chat_view.widgets[-1] if w.chat_view.widgets else None
        seen["live_text"].append(reply.content if reply is not None else "")
        seen["speed"].append(w.gauges.speed_label.text())
        seen["labels"].append(w._summary_dialog.labelText())

    def on_progress(rid, p):
        seen["steps"] = max(seen["steps"], p.done)

    timer = QTimer()
    timer.setInterval(10)
    timer.timeout.connect(sample)
    timer.start()
    w.worker.summaryProgress.connect(on_progress)
    _drop(w, doc)
    _wait_summary_end(qtbot, w)
    timer.stop()
    r = w.last_summary
    assert not r.cancelled and r.chunks_used == r.chunks >= 3
    return r, seen


def test_gui_summary_streams_each_part_and_shows_the_time_left(qtbot, make_window, tmp_path):
    w = make_window()
    r, seen = _watch_summary(qtbot, w, _long_doc(tmp_path, paragraphs=24))
    # each part's text appeared in the chat while it was being made, under its heading
    live = [t for t in seen["live_text"] if t.startswith("**Part")]
    assert live and live[0].startswith(f"**Part 1 of {r.chunks}**")
    assert any(r.chunk_summaries[0][:20] in t for t in live)
    assert any(f"**Part {r.chunks} of {r.chunks}**" in t for t in live)
    # the time left, from the measured speed, once a step is done
    assert any(re.search(r"\nAbout (\d+ s|\d+ min \d+ s) left$", label) for label in seen["labels"])
    assert all("step 0 of" not in label or label.endswith("Estimating the time left…") for label in seen["labels"])


def _paced(engine, seconds: float = 0.01) -> list[int]:
    """Every event of ``engine.generate`` ``seconds`` apart, so each summary part streams for longer than the
    gauge's 50 ms before it shows a live rate (on a fast machine a tiny model's part can take less)."""
    import functools
    import time

    real = engine.generate
    calls: list[int] = []

    @functools.wraps(real)  # the worker reads generate's signature
    def generate(*args, **kwargs):
        calls.append(1)
        for event in real(*args, **kwargs):
            time.sleep(seconds)
            yield event

    engine.generate = generate
    return calls


def test_gui_summary_feeds_the_speed_gauge_and_chart(qtbot, make_window, tmp_path):
    w = make_window()
    qtbot.waitUntil(lambda: w.worker.engine is not None, timeout=60_000)
    paced = _paced(w.worker.engine)
    live = []
    pieces_received = w.gauges.pieces_received

    def spy(count):  # the Speed gauge right after each batch of streamed text
        pieces_received(count)
        live.append(w.gauges.speed_label.text())

    w.gauges.pieces_received = spy
    r, seen = _watch_summary(qtbot, w, _long_doc(tmp_path, paragraphs=24))
    speeds = seen["speed"]
    started = [i for i, text in enumerate(speeds) if text != "–"]  # "–" only until the first part starts
    assert started and "–" not in speeds[started[0]:]
    assert any("tok/s (live)" in text for text in live)
    assert seen["steps"] >= r.chunks + 1  # one bar per generation, as for chat replies
    chart = w.gauges.chart
    assert len(chart.points) == min(seen["chart_before"] + seen["steps"], chart.points.maxlen)
    assert all(p.tok_s > 0 for p in chart.points) and "tok/s" in w.gauges.speed_label.text()
    assert len(paced) == seen["steps"]  # every part went through the paced engine


def test_gui_enter_in_the_summary_dialog_does_not_cancel(qtbot, make_window, tmp_path):
    w = make_window()
    _drop(w, _long_doc(tmp_path, paragraphs=40))
    qtbot.waitUntil(lambda: w._summary_dialog is not None and w._summary_dialog.isVisible(), timeout=60_000)
    dlg = w._summary_dialog
    button = dlg.findChild(QPushButton)
    assert not button.isDefault() and not button.autoDefault()
    token = w._summary_cancel
    qtbot.keyClick(dlg, Qt.Key.Key_Return)
    qtbot.keyClick(dlg, Qt.Key.Key_Enter)
    button.setFocus()
    qtbot.keyClick(button, Qt.Key.Key_Return)
    assert not token.cancelled
    _wait_summary_end(qtbot, w)
    assert not token.cancelled and w.last_summary.complete and not w.last_summary.cancelled


def test_gui_summary_errors_are_translated(qtbot, make_window, tiny_model_path, tmp_path):
    from PySide6.QtCore import QTranslator

    from tests.gui.conftest import settings_for

    class Marker(QTranslator):
        """Stands in for the 简体中文 catalogue: proves the message goes through the translator."""

        def translate(self, context, source, disambiguation=None, n=-1):
            if source.startswith("The context (%1 tokens) is too small to summarize"):
                return "上下文（%1 个词元）太小：%2 / %3"
            if source == "Summarizing failed: %1":
                return "生成摘要失败：%1"
            return ""

    settings = settings_for(tiny_model_path, seed=1)
    settings.hardware.context_length = 256
    w = make_window(settings=settings)
    marker = Marker()
    QApplication.instance().installTranslator(marker)
    try:
        _drop(w, _long_doc(tmp_path, paragraphs=4))
        _wait_summary_end(qtbot, w)
        qtbot.waitUntil(lambda: w.banner.isVisible(), timeout=10_000)
    finally:
        QApplication.instance().removeTranslator(marker)
    assert w.banner.text().startswith("生成摘要失败：上下文（256 个词元）太小：48 / ")
    assert w.last_summary is None and w.conversation_id is None and not w.chat_view.widgets


def test_gui_document_given_while_the_model_loads_is_summarized_once_loaded(qtbot, make_window, tiny_model_path,
                                                                            tmp_path):
    """"Open with" at start passes the document before the last model has loaded: it waits, not refused."""
    w = make_window(load=False, max_new_tokens=4)
    doc = tmp_path / "notes.txt"
    doc.write_text("\n\n".join(f"Note {i}: ternary weights are -1, 0 or +1." for i in range(6)), encoding="utf-8")
    done = []
    w.worker.summaryDone.connect(lambda *a: done.append(a))
    with qtbot.waitSignal(w.modelLoaded, timeout=120_000):
        w.load_model(tiny_model_path)
        assert w.loading and not w.model_info
        w.handle_dropped(str(doc))
        assert "as soon as the model is loaded" in w.banner.text()
    qtbot.waitUntil(lambda: bool(done) and w.last_summary is not None, timeout=180_000)
    assert w.store.messages(w.conversation_id)[-2].content == "Summarize the document notes.txt"


def test_gui_summary_in_a_new_empty_chat_is_titled_by_the_file(qtbot, make_window, tmp_path):
    """Ctrl+N, then a drop: the chat is named after the document (language-neutral), not left "New chat"."""
    w = make_window(max_new_tokens=4)
    w.new_conversation()
    cid = w.conversation_id
    doc = tmp_path / "minutes.txt"
    doc.write_text("Short minutes: ternary weights are -1, 0 or +1.", encoding="utf-8")
    with qtbot.waitSignal(w.worker.summaryDone, timeout=180_000):
        _drop(w, doc)
    qtbot.waitUntil(lambda: w.last_summary is not None, timeout=10_000)
    assert w.conversation_id == cid and w.store.conversation(cid).title == "minutes.txt"
    assert w.conversation_list.currentItem().text() == "minutes.txt"


def test_gui_escape_in_the_summary_dialog_cancels_and_keeps_the_parts(qtbot, make_window, tmp_path):
    """Enter does nothing there, but Esc (the usual key for Cancel) still cancels, keeping the work."""
    w = make_window()
    _drop(w, _long_doc(tmp_path, paragraphs=40))
    qtbot.waitUntil(lambda: w._summary_dialog is not None and w._summary_dialog.isVisible(), timeout=60_000)
    token = w._summary_cancel
    dlg = w._summary_dialog
    dlg.activateWindow()  # as on a desktop: the modal dialog has the keyboard
    qtbot.waitUntil(dlg.isActiveWindow, timeout=5000)
    qtbot.keyClick(dlg, Qt.Key.Key_Escape)
    assert token.cancelled
    _wait_summary_end(qtbot, w)
    assert w.last_summary.cancelled
