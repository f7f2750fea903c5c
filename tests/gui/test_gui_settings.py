"""Settings dialog: inline refusal of invalid values, persistence across a restart, live theme."""

from __future__ import annotations

from PySide6.QtWidgets import QApplication, QDialogButtonBox

from app.core.settings_model import model_key
from app.settings_dialog import SettingsDialog


def test_gui_invalid_values_refused_inline(qtbot, make_window):
    w = make_window()
    dlg = SettingsDialog(w)
    qtbot.addWidget(dlg)
    dlg.show()
    ok = dlg.buttons.button(QDialogButtonBox.StandardButton.Ok)
    temp = dlg.fields["temperature"]
    assert "model default: 0.5" in temp.edit.placeholderText()  # from the model file via the engine
    temp.edit.setText("3")
    assert not ok.isEnabled() and temp.error.isVisible() and "between 0" in temp.error.text()
    temp.edit.setText("0.7")
    assert ok.isEnabled() and not temp.error.isVisible()
    dlg.fields["top_k"].edit.setText("2000")
    assert not ok.isEnabled() and "Top-k" in dlg.fields["top_k"].error.text()
    dlg.fields["top_k"].edit.setText("")
    dlg.auto_context.setChecked(False)
    dlg.fields["context_length"].edit.setText("100")
    assert not ok.isEnabled() and "at least 256" in dlg.fields["context_length"].error.text()
    dlg.fields["context_length"].edit.setText("4096")
    assert "at most 512" in dlg.fields["context_length"].error.text()  # the model's own maximum
    dlg.fields["context_length"].edit.setText("384")
    assert ok.isEnabled()
    assert "384 tokens need a" in dlg.cost_label.text() and "RAM" in dlg.cost_label.text()
    dlg.hf_endpoint.setText("hf-mirror.com")
    assert not ok.isEnabled() and "https://" in dlg.endpoint_error.text()
    dlg.hf_endpoint.setText("https://hf-mirror.com")
    assert ok.isEnabled()


def test_gui_settings_persist_across_restart_and_apply_live(qtbot, make_window, tiny_model_path):
    w = make_window()
    dlg = SettingsDialog(w)
    qtbot.addWidget(dlg)
    dlg.show()
    dlg.fields["temperature"].edit.setText("0.7")
    dlg.fields["seed"].edit.setText("42")
    dlg.system_prompt.setPlainText("Answer in one sentence.")
    dlg._select(dlg.theme_combo, "dark")
    dlg._select(dlg.language_combo, "zh_CN")
    dlg.hf_endpoint.setText("https://hf-mirror.com")
    dlg.auto_context.setChecked(False)
    dlg.fields["context_length"].edit.setText("256")
    with qtbot.waitSignal(w.modelLoaded, timeout=120_000):  # hardware change reloads the model
        dlg.buttons.button(QDialogButtonBox.StandardButton.Ok).click()
    assert w.model_info["context_length"] == 256
    assert QApplication.instance().property("ternaryTheme") == "dark"  # applied without restart
    qtbot.waitUntil(lambda: w.send_button.text() == "发送")  # the language switched live, no restart
    from runtime.hub.settings import HubSettings

    assert HubSettings.load().hf_endpoint == "https://hf-mirror.com"  # the hub module sees the mirror
    w.close()

    from app.main_window import MainWindow

    w2 = MainWindow(autoload=False)  # settings read from disk (isolated config dir)
    qtbot.addWidget(w2)
    s = w2.settings.sampling_for(model_key(tiny_model_path))
    assert (s.temperature, s.seed, s.system_prompt) == (0.7, 42, "Answer in one sentence.")
    assert w2.settings.interface.theme == "dark" and w2.settings.interface.language == "zh_CN"
    assert w2.settings.hardware.context_length == 256
    assert w2.settings.last_model == tiny_model_path
    w2.model_path = tiny_model_path
    dlg2 = SettingsDialog(w2)
    qtbot.addWidget(dlg2)
    assert dlg2.fields["temperature"].edit.text() == "0.7"
    dlg2.reset_sampling()
    dlg2.apply()
    assert w2.settings.sampling_for(model_key(tiny_model_path)).is_default()
    w2.close()
    from app.theme import apply_theme

    apply_theme("light")
