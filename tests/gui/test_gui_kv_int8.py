"""Settings → Hardware → KV-cache precision: the int8 choice reaches the engine and persists."""

from __future__ import annotations

from PySide6.QtWidgets import QDialogButtonBox

from app.core.settings_model import AppSettings, HardwareSettings
from app.settings_dialog import SettingsDialog


def test_gui_kv_int8_choice_loads_int8_cache_and_persists(qtbot, make_window):
    w = make_window()
    assert w.model_info["plan"]["kv_dtype"] != "int8"
    dlg = SettingsDialog(w)
    qtbot.addWidget(dlg)
    dlg.show()
    assert dlg.kv_combo.isEnabled() and dlg.kv_combo.findData("int8") >= 0
    assert "twice the context" in dlg.kv_note.text() and "next model load" in dlg.kv_note.text()
    auto_cost = dlg.cost_label.text()
    dlg.auto_context.setChecked(False)
    dlg.fields["context_length"].edit.setText("512")
    dlg._select(dlg.kv_combo, "fp16")
    fp16_cost = dlg.cost_label.text()
    dlg._select(dlg.kv_combo, "int8")
    assert dlg.cost_label.text() != fp16_cost and auto_cost  # the memory estimate follows the choice
    dlg.auto_context.setChecked(True)
    with qtbot.waitSignal(w.modelLoaded, timeout=120_000):  # a hardware change reloads the model
        dlg.buttons.button(QDialogButtonBox.StandardButton.Ok).click()
    assert w.settings.hardware.kv_cache_precision == "int8"
    assert w.model_info["plan"]["kv_dtype"] == "int8"  # the engine planned and built an int8 cache
    w.close()

    from app.main_window import MainWindow

    w2 = MainWindow(autoload=False)  # settings read back from disk
    qtbot.addWidget(w2)
    assert w2.settings.hardware.kv_cache_precision == "int8"
    assert w2.load_options()["kv_dtype"] == "int8"
    dlg2 = SettingsDialog(w2)
    qtbot.addWidget(dlg2)
    assert dlg2.kv_combo.currentData() == "int8"
    w2.close()


def test_gui_kv_precision_validation_accepts_int8_only_known_names():
    assert HardwareSettings(kv_cache_precision="int8").validate() == []
    errors = HardwareSettings(kv_cache_precision="int4").validate()
    assert errors and errors[0][0] == "kv_cache_precision" and "int8" in errors[0][1]
    s = AppSettings()
    s.hardware.kv_cache_precision = "int8"
    assert AppSettings.from_dict(s.to_dict()).hardware.kv_cache_precision == "int8"
