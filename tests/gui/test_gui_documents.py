"""Dropping documents on the window: long ones are summarized in several chunks with progress."""

from __future__ import annotations

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
    assert QApplication.sendEvent(w, event)


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
