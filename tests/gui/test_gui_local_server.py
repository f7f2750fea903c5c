"""Settings → Local server: the app serves its loaded model; API requests and the user's chat take
turns on the one engine; a taken port or a public address without a key fails cleanly; the key is
kept out of the settings file."""

from __future__ import annotations

import socket

import requests

from app.core.secrets import SERVER_KEY, clear_key, get_key


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post_chat(url: str, model: str, key: str | None = None) -> requests.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return requests.post(url + "/v1/chat/completions", headers=headers, timeout=60,
                         json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
                         proxies={"http": "", "https": ""})


def test_gui_server_serves_the_loaded_model_and_stops_with_it(qtbot, make_window):
    w = make_window(max_new_tokens=4)
    w.settings.server.port = _free_port()
    w.settings.server.enabled = True
    w.sync_server()
    assert w.server.running and w.server.url == f"http://127.0.0.1:{w.settings.server.port}"
    models = requests.get(w.server.url + "/v1/models", timeout=10, proxies={"http": ""}).json()
    model_id = models["data"][0]["id"]
    assert model_id == w.server.model_id
    r = _post_chat(w.server.url, w.server.model_id)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] > 0
    w._poll_gauges()
    assert w.gauges.server_label.text().startswith("1 requests")

    # the user's chat waits while an API request holds the engine, and says so
    w.worker.lock.acquire()
    try:
        with qtbot.waitSignal(w.generationFinished, timeout=60_000):
            assert w.send("hello")
            qtbot.waitUntil(lambda: w.status_label.text() == "Waiting for an API request to finish…", timeout=10_000)
            w.worker.lock.release()
    finally:
        if w.worker.lock._is_owned():
            w.worker.lock.release()
    assert w.store.messages(w.conversation_id)[-1].stats["generated_tokens"] > 0

    # Stop while waiting for the engine ends the reply at once, without ever taking the engine
    w.worker.lock.acquire()
    try:
        assert w.send("never mind")
        qtbot.waitUntil(lambda: w.status_label.text() == "Waiting for an API request to finish…", timeout=10_000)
        with qtbot.waitSignal(w.generationFinished, timeout=5_000):
            w.stop()
    finally:
        w.worker.lock.release()
    assert w.store.messages(w.conversation_id)[-1].stats["finish_reason"] == "cancelled"

    # loading the model again restarts the server for it; turning it off stops it
    with qtbot.waitSignal(w.modelLoaded, timeout=120_000):
        w.load_model(w.model_path)
    assert w.server.running
    assert _post_chat(w.server.url, w.server.model_id).status_code == 200
    url = w.server.url
    w.settings.server.enabled = False
    w.sync_server()
    assert not w.server.running and w.gauges.server_label.text() == "off"
    try:
        requests.get(url + "/health", timeout=2, proxies={"http": ""})
        raise AssertionError("the server still answers after it was switched off")
    except requests.ConnectionError:
        pass


def test_gui_server_port_taken_fails_cleanly(qtbot, make_window):
    w = make_window(max_new_tokens=4)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        w.settings.server.port = taken.getsockname()[1]
        w.settings.server.enabled = True
        w.sync_server()
        assert not w.server.running
        assert not w.settings.server.enabled  # the toggle went back off
        assert "cannot listen" in w.banner.text() and str(w.settings.server.port) in w.banner.text()


def test_gui_server_settings_page_key_and_url(qtbot, make_window, isolated_home):
    from PySide6.QtGui import QGuiApplication
    from PySide6.QtWidgets import QDialogButtonBox

    from app.settings_dialog import SettingsDialog

    w = make_window(load=False)
    w.settings_path = isolated_home / "settings.json"
    dlg = SettingsDialog(w)
    qtbot.addWidget(dlg)
    page = dlg.server_page
    ok = dlg.buttons.button(QDialogButtonBox.StandardButton.Ok)
    assert page.url_edit.text() == "http://127.0.0.1:8731/v1" and page.key_status.text() == "none"
    page.enabled.setChecked(True)
    page.host.setText("0.0.0.0")
    assert not ok.isEnabled() and "API key" in page.problem_label.text()  # a public address needs a key
    page.key_edit.setText("my-server-key-42")
    page.save_key()
    try:
        assert get_key(SERVER_KEY).reveal() == "my-server-key-42" and page.key_edit.text() == ""
        dlg._update_buttons()
        assert ok.isEnabled() and page.key_status.text() == "stored: ••••••••"
        page.port.setValue(9123)
        page.copy_url()
        assert QGuiApplication.clipboard().text() == "http://0.0.0.0:9123/v1"
        assert dlg.apply()
        assert w.settings.server.host == "0.0.0.0" and w.settings.server.port == 9123
        saved = w.settings_path.read_text(encoding="utf-8")
        assert '"port": 9123' in saved and "my-server-key-42" not in saved  # the key is in the keyring only
    finally:
        clear_key(SERVER_KEY)
    dlg.close()


def test_gui_remotes_page_adds_a_remote_with_its_key_in_the_keyring(qtbot, make_window, isolated_home):
    from app.core.secrets import remote_key_name
    from app.settings_dialog import SettingsDialog

    w = make_window(load=False)
    w.settings_path = isolated_home / "settings.json"
    dlg = SettingsDialog(w)
    qtbot.addWidget(dlg)
    page = dlg.remotes_page
    page.name_edit.setText("lab")
    page.url_edit.setText("ftp://nope")
    assert not page.add_remote() and "http://" in page.message.text()
    page.url_edit.setText(f"http://127.0.0.1:{_free_port()}/v1")
    page.key_edit.setText("lab-key-77")
    try:
        assert page.add_remote() and page.list.count() == 1
        with qtbot.waitSignal(w.remoteModelsListed, timeout=30_000):
            assert dlg.apply()
        assert "lab" in w.remote_errors and "Could not connect" in w.remote_errors["lab"]  # nothing listens there
        saved = w.settings_path.read_text(encoding="utf-8")
        assert '"lab"' in saved and "lab-key-77" not in saved
        assert get_key(remote_key_name("lab")).reveal() == "lab-key-77"
        page.list.setCurrentRow(0)
        page.remove_remote()
        assert page.list.count() == 0 and get_key(remote_key_name("lab")) is None
    finally:
        clear_key(remote_key_name("lab"))
    dlg.close()
