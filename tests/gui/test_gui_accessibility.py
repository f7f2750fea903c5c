"""Every control has an accessible name; the keyboard shortcuts and focus order work; 简体中文 loads."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractItemView,
    QApplication,
    QComboBox,
    QLineEdit,
    QPlainTextEdit,
    QTabBar,
    QWidget,
)

from app.settings_dialog import SettingsDialog

CONTROLS = (QAbstractButton, QLineEdit, QComboBox, QPlainTextEdit, QAbstractItemView)


def _unnamed(root: QWidget) -> list[str]:
    missing = []
    for wid in root.findChildren(QWidget):
        if not isinstance(wid, CONTROLS) or isinstance(wid.parent(), QTabBar):
            continue
        if type(wid).__name__ in ("QScrollBar",) or wid.objectName().startswith("qt_"):
            continue
        if isinstance(wid, QAbstractButton) and wid.parent() is not None and type(wid.parent()).__name__ in (
                "QDialogButtonBox", "QLineEdit", "QComboBox", "QAbstractSpinBox"):
            continue  # standard buttons get their accessible name from their text; clear buttons from Qt
        if not wid.isVisibleTo(root):
            continue
        if not (wid.accessibleName() or (isinstance(wid, QAbstractButton) and wid.text())):
            missing.append(f"{type(wid).__name__} {wid.objectName()!r} {getattr(wid, 'text', lambda: '')()!r}")
    return missing


def test_gui_every_control_has_an_accessible_name(qtbot, make_window):
    w = make_window(max_new_tokens=3)
    with qtbot.waitSignal(w.generationFinished, timeout=120_000):
        w.send("hello")  # message widgets with copy / regenerate / edit buttons exist
    assert _unnamed(w) == []
    dlg = SettingsDialog(w)
    qtbot.addWidget(dlg)
    dlg.show()
    for i in range(dlg.tabs.count()):
        dlg.tabs.setCurrentIndex(i)
        assert _unnamed(dlg.tabs.currentWidget()) == [], dlg.tabs.tabText(i)
    from app.core.model_fit import Hardware
    from app.model_manager import ModelManagerDialog

    mm = ModelManagerDialog(w, hardware=Hardware(ram_available_bytes=8 * 1024**3))
    qtbot.addWidget(mm)
    mm.show()
    assert _unnamed(mm) == []
    assert _unnamed(w.welcome) == []


def test_gui_keyboard_shortcuts_and_focus_order(qtbot, make_window):
    w = make_window(load=False)
    with qtbot.waitActive(w):
        w.activateWindow()
    assert w.conversation_list.count() == 0
    qtbot.keyClick(w, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    assert w.conversation_list.count() == 1 and QApplication.focusWidget() is w.input
    qtbot.keyClick(w, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    assert QApplication.focusWidget() is w.search_edit
    # Tab walks sidebar -> model picker -> buttons -> chat -> attach -> input -> send
    order = [w.search_edit.nextInFocusChain()]
    expected = [w.conversation_list, w.model_combo, w.models_button, w.settings_button, w.chat_view,
                w.attach_button, w.input, w.send_button]
    chain, cur = [], w.search_edit
    for _ in range(40):
        cur = cur.nextInFocusChain()
        if cur in expected and cur not in chain:
            chain.append(cur)
    assert chain == expected, order
    actions = {a.shortcut().toString() for a in w.actions()}
    assert {"Ctrl+N", "Ctrl+F", "Ctrl+,", "Esc", "Ctrl+Return"} <= actions


def test_gui_chinese_translation_loads(qapp):
    from PySide6.QtCore import QCoreApplication

    from app.main import install_translation

    app = QApplication.instance()
    assert install_translation(app, "zh_CN")
    try:
        assert QCoreApplication.translate("MainWindow", "New chat") == "新对话"
        assert QCoreApplication.translate("GaugePanel", "Context fill") == "上下文占用"
        assert QCoreApplication.translate("DocumentErrors", "%1 contains no text.") == "%1 不包含任何文本。"
    finally:
        from PySide6.QtCore import QTranslator

        for tr in app.findChildren(QTranslator):
            app.removeTranslator(tr)
            tr.deleteLater()
