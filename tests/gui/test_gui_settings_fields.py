"""Settings fields (issue 26, item 8): typed text is never silently changed, the interface hint is
true, Max new tokens is bounded by the context, a "System" theme follows the desktop, and
per-model sampling belongs to one model file, not to every file of the same name."""

from __future__ import annotations

import shutil
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QApplication, QDialogButtonBox, QLabel

from app.core.settings_model import AppSettings, SamplingSettings, model_key
from app.settings_dialog import SettingsDialog
from app.theme import palette
from tests.gui.conftest import settings_for


def _dialog(qtbot, w) -> SettingsDialog:
    dlg = SettingsDialog(w)
    qtbot.addWidget(dlg)
    dlg.show()
    return dlg


def test_typed_text_stays_and_the_reason_is_shown(make_window, qtbot):
    w = make_window()
    dlg = _dialog(qtbot, w)
    ok = dlg.buttons.button(QDialogButtonBox.StandardButton.Ok)
    temp = dlg.fields["temperature"]
    temp.edit.clear()
    qtbot.keyClicks(temp.edit, "-1")
    assert temp.edit.text() == "-1"  # not silently "1"
    assert temp.error.isVisible() and "between 0" in temp.error.text() and not ok.isEnabled()
    temp.edit.clear()
    qtbot.keyClicks(temp.edit, "abc")
    assert temp.edit.text() == "abc"  # not silently dropped
    assert "“abc” is not a number" in temp.error.text() and "between 0" in temp.error.text()
    assert not ok.isEnabled()
    top_k = dlg.fields["top_k"]
    qtbot.keyClicks(top_k.edit, "2.5")
    assert top_k.edit.text() == "2.5" and "is not a whole number" in top_k.error.text()
    top_k.edit.clear()
    temp.edit.clear()
    qtbot.keyClicks(temp.edit, "0,7")  # a decimal comma is a number too
    assert temp.problem is None and ok.isEnabled() and temp.value() == 0.7
    seed = dlg.fields["seed"]
    seed.edit.setText(str(2**62 + 1))  # exact beyond float precision
    assert seed.problem is None and seed.value() == 2**62 + 1


def test_max_new_tokens_is_bounded_by_the_context_in_use(make_window, qtbot):
    w = make_window()
    ctx = w.model_info["context_length"]
    dlg = _dialog(qtbot, w)
    ok = dlg.buttons.button(QDialogButtonBox.StandardButton.Ok)
    field = dlg.fields["max_new_tokens"]
    field.edit.setText("262144")
    assert not ok.isEnabled() and field.error.isVisible()
    assert f"At most {ctx - 1}" in field.error.text() and f"holds {ctx} tokens" in field.error.text()
    field.edit.setText(str(ctx - 1))
    assert field.problem is None and ok.isEnabled()
    # a manual context typed on the Hardware tab is the one the next reply will have
    dlg.auto_context.setChecked(False)
    dlg.fields["context_length"].edit.setText("256")
    assert field.problem is not None and "At most 255" in field.error.text()
    dlg.auto_context.setChecked(True)
    assert field.problem is None


def test_interface_hint_is_true(make_window, qtbot):
    w = make_window(load=False)
    dlg = _dialog(qtbot, w)
    tab = dlg.tabs.widget(dlg.tabs.count() - 1)
    notes = [lab.text() for lab in tab.findChildren(QLabel) if "theme" in lab.text().lower()]
    assert notes and all("at once" not in n for n in notes) and any("Apply" in n for n in notes)
    before = QApplication.instance().property("ternaryTheme")
    dlg._select(dlg.theme_combo, "dark" if before != "dark" else "light")
    assert QApplication.instance().property("ternaryTheme") == before  # as the hint says: not yet
    dlg.apply()
    assert QApplication.instance().property("ternaryTheme") != before


def test_system_theme_follows_the_desktop(make_window, qtbot):
    w = make_window(load=False)
    dlg = _dialog(qtbot, w)
    assert dlg.theme_combo.findData("system") >= 0
    dlg._select(dlg.theme_combo, "system")
    assert dlg.apply()
    assert AppSettings.load().interface.theme == "system"
    app = QApplication.instance()
    hints = QGuiApplication.styleHints()
    window_color = palette("dark").color(palette("dark").ColorRole.Window)
    hints.colorSchemeChanged.emit(Qt.ColorScheme.Dark)  # the desktop switches to dark
    assert app.property("ternaryTheme") == "dark" and app.palette().color(app.palette().ColorRole.Window) == window_color
    hints.colorSchemeChanged.emit(Qt.ColorScheme.Light)
    assert app.property("ternaryTheme") == "light"
    dlg._select(dlg.theme_combo, "dark")
    dlg.apply()
    hints.colorSchemeChanged.emit(Qt.ColorScheme.Light)  # a fixed theme ignores the desktop
    assert app.property("ternaryTheme") == "dark"


def test_sampling_overrides_belong_to_one_model_file(make_window, qtbot, tiny_model_path, tmp_path):
    a = tmp_path / "a" / "model"
    b = tmp_path / "b" / "model"  # another file of the same name
    shutil.copytree(tiny_model_path, a)
    shutil.copytree(tiny_model_path, b)
    s = settings_for(str(a))
    s.sampling = {"model": SamplingSettings(temperature=0.3)}  # an older version keyed by the bare name
    w = make_window(load=False, settings=s)
    with qtbot.waitSignal(w.modelLoaded, timeout=120_000):
        w.load_model(str(a))
    assert w.sampling().temperature == 0.3  # the first model of that name takes the old overrides
    assert "model" not in w.settings.sampling and str(a.resolve()) in w.settings.sampling
    assert str(a.resolve()) in AppSettings.load().sampling  # and the move is saved
    dlg = _dialog(qtbot, w)
    assert a.name in dlg.sampling_caption.text() and dlg.sampling_caption.toolTip() == model_key(str(a))
    dlg.fields["temperature"].edit.setText("0.9")
    assert dlg.apply()
    with qtbot.waitSignal(w.modelLoaded, timeout=120_000):
        w.load_model(str(b))
    assert w.sampling().temperature is None  # b has its own (default) settings
    dlg = _dialog(qtbot, w)
    assert dlg.fields["temperature"].edit.text() == ""
    with qtbot.waitSignal(w.modelLoaded, timeout=120_000):
        w.load_model(str(a))
    assert w.sampling().temperature == 0.9
    assert model_key(str(a)) != model_key(str(b)) and Path(model_key(str(a))).is_absolute()


def test_typing_starts_in_the_first_field(make_window, qtbot):
    """Ctrl+, then typing goes into Temperature, not onto the tab bar where keys are lost."""
    w = make_window()
    dlg = _dialog(qtbot, w)
    dlg.activateWindow()
    qtbot.waitUntil(dlg.isActiveWindow, timeout=5000)
    qtbot.keyClicks(QApplication.focusWidget(), "0.3")
    assert dlg.fields["temperature"].edit.text() == "0.3"
