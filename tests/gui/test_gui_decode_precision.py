"""Settings → Hardware → Decode precision: the choice reaches Engine.load and persists."""

from __future__ import annotations

import functools

from PySide6.QtWidgets import QDialogButtonBox

from app.core.settings_model import AppSettings, HardwareSettings
from app.settings_dialog import SettingsDialog


def test_gui_decode_precision_choice_reloads_and_persists(qtbot, make_window, monkeypatch):
    import runtime.engine

    seen: list[object] = []
    real_load = runtime.engine.Engine.load.__func__

    @functools.wraps(real_load)  # keeps Engine.load's signature: the app inspects it for supported options
    def spy(cls, *a, **kw):
        seen.append(kw.get("decode_activations"))
        return real_load(cls, *a, **kw)

    monkeypatch.setattr(runtime.engine.Engine, "load", classmethod(spy))
    w = make_window()
    assert w.settings.hardware.decode_precision == "int8"  # the default: llama.cpp-style 8-bit activations
    dlg = SettingsDialog(w)
    qtbot.addWidget(dlg)
    dlg.show()
    assert dlg.decode_combo.isEnabled() and dlg.decode_combo.currentData() == "int8"
    assert "next model load" in dlg.decode_combo.toolTip()
    dlg._select(dlg.decode_combo, "exact")
    with qtbot.waitSignal(w.modelLoaded, timeout=120_000):  # a hardware change reloads the model
        dlg.buttons.button(QDialogButtonBox.StandardButton.Ok).click()
    assert w.settings.hardware.decode_precision == "exact"
    assert seen and seen[-1] == "exact"
    w.close()

    from app.main_window import MainWindow

    w2 = MainWindow(autoload=False)  # settings read back from disk
    qtbot.addWidget(w2)
    assert w2.load_options()["decode_activations"] == "exact"
    dlg2 = SettingsDialog(w2)
    qtbot.addWidget(dlg2)
    assert dlg2.decode_combo.currentData() == "exact"
    w2.close()


def test_gui_decode_precision_validation():
    assert HardwareSettings(decode_precision="exact").validate() == []
    errors = HardwareSettings(decode_precision="fp8").validate()
    assert errors and errors[0][0] == "decode_precision"
    s = AppSettings()
    s.hardware.decode_precision = "exact"
    assert AppSettings.from_dict(s.to_dict()).hardware.decode_precision == "exact"
