"""Window layout (issue 26, item 6): the Performance panel keeps one width while numbers change,
the window has a minimum size at which nothing clips, long titles end in "…", and the panel can be
hidden from the View menu or with Ctrl+Shift+P — remembered for the next start."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QPushButton, QToolButton

from app.core.settings_model import AppSettings


def test_performance_panel_width_does_not_follow_the_numbers(make_window, qtbot):
    w = make_window(max_new_tokens=40)
    w.resize(1280, 800)
    qtbot.wait(50)
    panel, chat = w.gauges.width(), w.chat_view.width()
    widths = set()
    w.worker.tokens.connect(lambda *_: widths.add((w.gauges.width(), w.chat_view.width())))
    w.input.setPlainText("stream something")
    with qtbot.waitSignal(w.generationFinished, timeout=60_000):
        w.send()
    qtbot.wait(50)
    widths.add((w.gauges.width(), w.chat_view.width()))
    # numbers far wider than usual: a fast GPU, a long model name
    w.gauges.generation_done({"decode_tok_s": 12345.6, "prefill_tok_s": 1234567, "ttft_s": 0.0123,
                              "prompt_tokens": 123456, "generated_tokens": 7890, "peak_memory_bytes": 2**40})
    w.gauges.set_model(dict(w.model_info, name="Ternary-Bonsai-8B-Instruct-with-a-very-long-file-name-Q2_0"))
    w.gauges.pieces_received(1)
    qtbot.wait(50)
    widths.add((w.gauges.width(), w.chat_view.width()))
    assert widths == {(panel, chat)}


def _clipped(w):
    return [b.text() for b in w.findChildren(QPushButton) + w.findChildren(QToolButton)
            if b.isVisible() and b.width() < b.minimumSizeHint().width()]


def test_minimum_size_keeps_everything_usable(make_window, qtbot):
    w = make_window()
    w.input.setPlainText("a question")
    with qtbot.waitSignal(w.generationFinished, timeout=60_000):
        w.send()
    w.resize(640, 480)  # smaller than the minimum: the window stops at its minimum
    qtbot.wait(50)
    minimum = w.minimumSize()
    assert w.width() == max(640, minimum.width()) and w.height() == max(480, minimum.height())
    w.resize(1, 1)
    qtbot.wait(50)
    assert w.size() == minimum
    assert minimum.width() <= 1024 and minimum.height() <= 600  # fits a small laptop screen
    assert _clipped(w) == []
    line = w.fontMetrics().lineSpacing()
    assert w.input.height() >= w.input.minimumHeight() >= 56  # the composer is not a sliver
    assert w.chat_view.height() >= 8 * line
    sidebar = w.centralWidget().widget(0)
    assert sidebar.width() >= 20 * w.fontMetrics().averageCharWidth()  # titles stay readable
    viewport = w.chat_view.viewport()
    for m in w.chat_view.widgets:  # every message's buttons are inside the visible chat column
        for b in (m.copy_button, m.edit_button, m.regen_button):
            if b is not None:
                right = b.mapTo(viewport, b.rect().topRight()).x()
                assert 0 <= right < viewport.width(), b.text()
    # hiding the panel leaves a narrower minimum, still without clipping
    w.set_performance_panel_visible(False)
    qtbot.wait(50)
    assert w.minimumSize().width() < minimum.width()
    w.resize(1, 1)
    qtbot.wait(50)
    assert _clipped(w) == []


def test_long_titles_are_elided(make_window, qtbot):
    w = make_window()
    w.input.setPlainText("A rather long first message that becomes the title of this conversation for sure")
    with qtbot.waitSignal(w.generationFinished, timeout=60_000):
        w.send()
    w.resize(900, 600)
    qtbot.wait(50)
    lst = w.conversation_list
    item = lst.item(0)
    assert lst.fontMetrics().horizontalAdvance(item.text()) > lst.viewport().width()  # it does not fit
    assert lst.horizontalScrollBar().maximum() == 0  # no sideways scrolling
    assert lst.visualItemRect(item).width() <= lst.viewport().width()  # so the delegate elides it…
    assert lst.textElideMode() == Qt.TextElideMode.ElideRight  # …with "…" at the end
    assert item.text() in item.toolTip()  # and the whole title is in the tooltip


def test_performance_panel_can_be_hidden_and_is_remembered(make_window, qtbot):
    w = make_window(load=False)
    assert w.gauges.isVisible() and w.panel_action.isChecked()
    assert w.panel_action in w.view_menu.actions()
    assert w.panel_action.shortcut().toString() == "Ctrl+Shift+P"
    chat_before = w.centralWidget().widget(1).width()
    w.activateWindow()
    qtbot.waitUntil(w.isActiveWindow, timeout=5000)
    qtbot.keyClick(w, Qt.Key.Key_P, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    assert not w.gauges.isVisible() and not w.panel_action.isChecked()
    qtbot.wait(50)
    assert w.centralWidget().widget(1).width() > chat_before  # the chat takes the room
    assert AppSettings.load().interface.show_performance_panel is False  # saved
    again = make_window(load=False, settings=AppSettings.load())
    assert not again.gauges.isVisible() and not again.panel_action.isChecked()
    again.panel_action.trigger()  # View → Show performance panel
    assert again.gauges.isVisible() and AppSettings.load().interface.show_performance_panel is True
