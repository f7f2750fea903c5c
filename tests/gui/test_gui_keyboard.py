"""Keyboard reach (issue 26, item 3): Tab leaves the message box for Send, and every message's
Copy / Edit / Regenerate buttons are Tab stops in reading order, between the chat and Attach."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QTextCursor
from PySide6.QtWidgets import QApplication


def _focused():
    return QApplication.focusWidget()


def _chat(make_window, qtbot):
    w = make_window()
    w.activateWindow()
    qtbot.waitUntil(w.isActiveWindow, timeout=5000)
    w.input.setPlainText("hello there")
    with qtbot.waitSignal(w.generationFinished, timeout=60_000):
        w.send()
    return w


def test_tab_in_the_message_box_moves_to_send_and_shift_tab_back(make_window, qtbot):
    w = _chat(make_window, qtbot)
    w.input.setPlainText("draft")
    w.input.setFocus()
    qtbot.keyClick(w.input, Qt.Key.Key_Tab)
    assert _focused() is w.send_button
    assert w.input.toPlainText() == "draft"  # no tab character typed
    qtbot.keyClick(w.send_button, Qt.Key.Key_Backtab, Qt.KeyboardModifier.ShiftModifier)
    assert _focused() is w.input
    w.input.moveCursor(QTextCursor.MoveOperation.End)
    qtbot.keyClick(w.input, Qt.Key.Key_Tab, Qt.KeyboardModifier.ControlModifier)  # Ctrl+Tab types one
    assert w.input.toPlainText() == "draft\t" and _focused() is w.input
    # Send by keyboard alone: Tab to the button, Space presses it
    w.input.setPlainText("second question")
    w.input.setFocus()
    qtbot.keyClick(w.input, Qt.Key.Key_Tab)
    with qtbot.waitSignal(w.generationFinished, timeout=60_000):
        qtbot.keyClick(w.send_button, Qt.Key.Key_Space)
    assert [m.content for m in w.store.messages(w.conversation_id) if m.role == "user"][-1] == "second question"


def test_message_buttons_are_tab_stops_in_reading_order(make_window, qtbot):
    w = _chat(make_window, qtbot)
    user, reply = w.chat_view.widgets
    w.settings_button.setFocus()
    order = []
    for _ in range(20):
        qtbot.keyClick(_focused(), Qt.Key.Key_Tab)
        order.append(_focused())
        if order[-1] is w.send_button:
            break
    expected = [user.copy_button, user.edit_button, user.body, reply.copy_button, reply.regen_button, reply.body,
                w.attach_button, w.input, w.send_button]
    assert [x for x in order if x in expected] == expected
    assert order.index(reply.regen_button) < order.index(w.attach_button)
    # a message added later (the next reply) joins the chain before Attach too
    w.input.setPlainText("more")
    with qtbot.waitSignal(w.generationFinished, timeout=60_000):
        w.send()
    last = w.chat_view.widgets[-1]
    last.regen_button.setFocus()
    qtbot.keyClick(last.regen_button, Qt.Key.Key_Tab)
    assert _focused() is last.body
    qtbot.keyClick(last.body, Qt.Key.Key_Tab)
    assert _focused() is w.attach_button
    # the buttons keep their screen-reader names
    assert last.regen_button.accessibleName() == "Generate this reply again"


def test_enter_on_a_focused_button_presses_it(make_window, qtbot):
    """Outside a dialog Qt buttons ignore Return; a keyboard user presses Enter on Send and Copy."""
    w = _chat(make_window, qtbot)
    w.input.setPlainText("sent with Enter on the Send button")
    w.input.setFocus()
    qtbot.keyClick(w.input, Qt.Key.Key_Tab)
    assert _focused() is w.send_button
    with qtbot.waitSignal(w.generationFinished, timeout=60_000):
        qtbot.keyClick(w.send_button, Qt.Key.Key_Return)
    assert [m.content for m in w.store.messages(w.conversation_id)
            if m.role == "user"][-1] == "sent with Enter on the Send button"
    QApplication.clipboard().clear()
    reply = w.chat_view.widgets[-1]
    reply.copy_button.setFocus()
    qtbot.keyClick(reply.copy_button, Qt.Key.Key_Enter, Qt.KeyboardModifier.KeypadModifier)
    qtbot.waitUntil(lambda: QApplication.clipboard().text() != "", timeout=5000)
