"""Settings gaps closed: offload policy reaching the engine, a user-chosen models folder, live language."""

from __future__ import annotations

import functools
import json
import os

from PySide6.QtWidgets import QDialogButtonBox

from app.core.settings_model import AppSettings
from app.settings_dialog import SettingsDialog
from runtime.devices import GPUInfo
from runtime.hub.paths import HubPaths
from runtime.hub.store import ModelStore
from tests.gui.test_gui_model_manager import REPO, _dialog
from tests.hub.hub_fake_server import FakeHub, tiny_gguf

GIB = 1024**3


def _fake_gpu(monkeypatch) -> None:
    """Pretend this machine has a GPU so the offload control is enabled (the model still loads on CPU)."""
    gpu = GPUInfo(index=0, name="Test GPU", capability=(9, 0), total_bytes=8 * GIB, free_bytes=7 * GIB)
    monkeypatch.setattr("runtime.devices.detect_gpus", lambda: [gpu])


def _spy_engine_load(monkeypatch) -> list[dict]:
    """Wrap the real ``Engine.load`` (signature kept, so the worker still sees ``offload``)."""
    from runtime.engine import Engine

    real = Engine.load.__func__
    calls: list[dict] = []

    @functools.wraps(real)
    def spy(cls, path, *args, **kwargs):
        calls.append(dict(kwargs))
        return real(cls, path, *args, **kwargs)

    monkeypatch.setattr(Engine, "load", classmethod(spy))
    return calls


def _apply(qtbot, window, dlg) -> None:
    with qtbot.waitSignal(window.modelLoaded, timeout=120_000):  # hardware changes reload the model
        dlg.buttons.button(QDialogButtonBox.StandardButton.Apply).click()


def test_gui_offload_policy_persists_and_reaches_engine_load(qtbot, make_window, monkeypatch):
    _fake_gpu(monkeypatch)
    calls = _spy_engine_load(monkeypatch)
    w = make_window()
    dlg = SettingsDialog(w)
    qtbot.addWidget(dlg)
    dlg.show()
    texts = [dlg.offload_combo.itemText(i) for i in range(dlg.offload_combo.count())]
    assert texts == ["Automatic (planner decides)", "Stream layers to the GPU", "Read layers from host memory (zero-copy)",
                     "Compute offloaded layers on the CPU"]
    assert dlg.offload_combo.isEnabled()
    assert "0 on GPU, 2 on CPU" in dlg.placement_label.text()  # what the current plan chose
    dlg._select(dlg.offload_combo, "cpu")
    _apply(qtbot, w, dlg)
    assert calls[-1]["offload"] == "cpu"
    assert w.settings.hardware.offload_policy == "cpu"
    assert AppSettings.load().hardware.offload_policy == "cpu"  # persisted (isolated config dir)
    dlg._select(dlg.offload_combo, "mapped")
    _apply(qtbot, w, dlg)
    assert calls[-1]["offload"] == "mapped" and AppSettings.load().hardware.offload_policy == "mapped"
    dlg._select(dlg.offload_combo, "stream")
    _apply(qtbot, w, dlg)
    assert calls[-1]["offload"] == "stream" and AppSettings.load().hardware.offload_policy == "stream"
    dlg2 = SettingsDialog(w)  # reopened: shows the saved choice
    qtbot.addWidget(dlg2)
    assert dlg2.offload_combo.currentData() == "stream"


def test_gui_offload_disabled_on_cpu_only_machine_and_gauges_show_mode(qtbot, make_window, monkeypatch):
    monkeypatch.setattr("runtime.devices.detect_gpus", lambda: [])
    w = make_window(load=False)
    dlg = SettingsDialog(w)
    qtbot.addWidget(dlg)
    assert not dlg.offload_combo.isEnabled()
    assert "applies to GPUs" in dlg.offload_combo.toolTip()
    w.gauges.set_model({"name": "m", "device": "cuda:0",
                        "plan": {"layers_on_gpu": 5, "layers_on_cpu": 31, "offload_mode": "stream"}})
    assert w.gauges.layers_label.text() == "5 on GPU, 31 on CPU (offloaded layers streamed to the GPU)"
    w.gauges.set_model({"name": "m", "device": "cuda:0",
                        "plan": {"layers_on_gpu": 7, "layers_on_cpu": 29, "offload_mode": "cpu"}})
    assert "computed on the CPU" in w.gauges.layers_label.text()
    w.gauges.set_model({"name": "m", "device": "cuda:0",
                        "plan": {"layers_on_gpu": 0, "layers_on_cpu": 36, "offload_mode": "mapped"}})
    assert w.gauges.layers_label.text() == "0 on GPU, 36 on CPU (offloaded layers read by the GPU from host memory)"


def test_gui_models_folder_change_persists_and_downloads_land_there(qtbot, make_window, tmp_path):
    w = make_window(load=False)
    old = HubPaths.resolve().models_dir
    chosen = tmp_path / "my models"  # does not exist yet: creatable
    dlg = SettingsDialog(w)
    qtbot.addWidget(dlg)
    dlg.show()
    assert dlg.models_dir_edit.text() == str(old)
    dlg.models_dir_edit.setText(str(chosen))
    ok = dlg.buttons.button(QDialogButtonBox.StandardButton.Ok)
    assert ok.isEnabled() and "free" in dlg.models_dir_info.text() and "created" in dlg.models_dir_info.text()
    ok.click()
    assert chosen.is_dir()
    assert str(old) in w.banner.text() and str(chosen) in w.banner.text()  # old models stay; the user is told
    assert AppSettings.load().downloads.models_dir == str(chosen.resolve())
    stored = json.loads(HubPaths.resolve().settings_file.read_text())
    assert stored["models_dir"] == str(chosen.resolve())
    paths = HubPaths.resolve()
    assert paths.models_dir == chosen.resolve()
    assert paths.partial_dir.parent == paths.quarantine_dir.parent == chosen.resolve()  # same filesystem

    with FakeHub() as hub:
        good = tiny_gguf(200_000, seed=4)
        hub.add(REPO, "good.gguf", good)
        mgr = _dialog(qtbot, w, hub)
        mgr.select_key(("tiny-good", "good.gguf"))
        mgr.download_button.click()
        qtbot.waitUntil(lambda: mgr.job is None, timeout=60_000)
        assert mgr.last_result is not None and not mgr.last_error
    installed = ModelStore().installed()
    assert [i.filename for i in installed] == ["good.gguf"]
    assert installed[0].path.is_relative_to(chosen.resolve()) and installed[0].path.read_bytes() == good
    assert not any(old.rglob("good.gguf"))  # nothing went to the old folder
    assert any(str(installed[0].path) == p for _label, p in w.available_models())


def test_gui_unwritable_models_folder_refused_with_explanation(qtbot, make_window, tmp_path):
    w = make_window(load=False)
    dlg = SettingsDialog(w)
    qtbot.addWidget(dlg)
    dlg.show()
    ok = dlg.buttons.button(QDialogButtonBox.StandardButton.Ok)
    if os.geteuid() == 0:  # root writes through permission bits; /proc refuses everyone
        unwritable = "/proc/ternary-chat-models"
    else:
        ro = tmp_path / "read-only"
        ro.mkdir()
        ro.chmod(0o500)
        unwritable = str(ro)
    dlg.models_dir_edit.setText(unwritable)
    assert not ok.isEnabled()
    assert "not writable" in dlg.models_dir_info.text() or "cannot be created" in dlg.models_dir_info.text()
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    dlg.models_dir_edit.setText(str(a_file))
    assert not ok.isEnabled() and "is a file" in dlg.models_dir_info.text()
    dlg.models_dir_edit.setText("relative/models")
    assert not ok.isEnabled() and "full path" in dlg.models_dir_info.text()
    dlg.models_dir_edit.setText(str(tmp_path))
    assert ok.isEnabled()


def test_gui_language_switches_live_and_back(qtbot, make_window):
    w = make_window(load=False)
    assert (w.send_button.text(), w.new_chat_button.text(), w.settings_action.text()) == ("Send", "New chat", "Settings")
    dlg = SettingsDialog(w)
    qtbot.addWidget(dlg)
    dlg.show()
    dlg._select(dlg.language_combo, "zh_CN")
    dlg.buttons.button(QDialogButtonBox.StandardButton.Apply).click()
    qtbot.waitUntil(lambda: w.send_button.text() == "发送", timeout=5000)  # same window, no restart
    assert w.new_chat_button.text() == "新对话"
    assert w.settings_action.text() == "设置"  # the window's actions (shortcut menu entries)
    assert w.gauges.title.text() != "Performance"
    qtbot.waitUntil(lambda: dlg.tabs.tabText(1) != "Hardware", timeout=5000)  # the open dialog follows
    assert dlg.language_combo.currentData() == "zh_CN"  # values kept across the rebuild
    dlg._select(dlg.language_combo, "en")
    dlg.buttons.button(QDialogButtonBox.StandardButton.Apply).click()
    qtbot.waitUntil(lambda: w.send_button.text() == "Send", timeout=5000)
    assert (w.new_chat_button.text(), w.settings_action.text(), w.gauges.title.text()) == \
        ("New chat", "Settings", "Performance")
    qtbot.waitUntil(lambda: dlg.tabs.tabText(1) == "Hardware", timeout=5000)
