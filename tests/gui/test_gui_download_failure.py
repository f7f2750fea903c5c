"""The first-run page after a failed download: what failed in the user's words, Retry, "Use a mirror…" and
"Import a file you already have" (issue 26, item 9). Real window, the hub's loopback fake server."""

from __future__ import annotations

import socket

from app.core.model_fit import Hardware
from runtime.hub.fetch import ModelFetcher
from runtime.hub.paths import HubPaths
from runtime.hub.settings import HubSettings
from runtime.hub.store import ModelStore
from runtime.hub.tokens import TokenStore
from tests.gui.test_gui_model_manager import GIB, REPO, _catalog
from tests.hub.hub_fake_server import FAST_RETRY, FakeHub, tiny_gguf

HW = Hardware(ram_total_bytes=16 * GIB, ram_available_bytes=12 * GIB)  # CPU only: "Tiny Good" is recommended


def _dead_endpoint() -> str:
    """An http URL on 127.0.0.1 where nothing listens (connection refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _first_run_page(qtbot, make_window, hf_endpoint: str):
    """The window's welcome page recommending "Tiny Good", downloading with the saved hub settings."""
    HubSettings(source="hf", hf_endpoint=hf_endpoint).save()
    w = make_window(load=False)
    w.settings.downloads.source = "hf"
    page = w.welcome
    page.catalog = _catalog()
    page.fetcher_factory = lambda: ModelFetcher(HubPaths.resolve(), HubSettings.load(), TokenStore(),
                                                retry=FAST_RETRY, stall_timeout_s=10.0, metadata_timeout_s=20.0)
    page.set_hardware(HW)
    assert page.recommendation[0].name == "Tiny Good" and page.start_button.isVisible()
    return w, page


def _visible(page) -> dict[str, bool]:
    return {name: getattr(page, name).isVisible()
            for name in ("start_button", "retry_button", "mirror_button", "import_button")}


def test_gui_failed_download_says_what_failed_and_offers_retry_mirror_import(qtbot, make_window, monkeypatch,
                                                                             tmp_path):
    w, page = _first_run_page(qtbot, make_window, _dead_endpoint())
    page.start_button.click()
    qtbot.waitUntil(lambda: page.failure_label.isVisible(), timeout=60_000)
    text = page.failure_label.text()
    assert text == "The download of Tiny Good failed: could not reach 127.0.0.1 (no network or blocked)."
    assert _visible(page) == {"start_button": False, "retry_button": True, "mirror_button": True,
                              "import_button": True}
    assert page.retry_button.text() == "Retry" and page.download_dialog is None  # the dialog closed itself

    with FakeHub() as hub:
        content = tiny_gguf(300_000, seed=7)
        hub.add(REPO, "good.gguf", content)
        # Use a mirror…: another Hugging Face mirror, saved where the downloader reads it
        page.mirror_button.click()
        dlg = page.mirror_dialog
        assert dlg.isVisible() and dlg.hf_radio.isChecked() is False  # the dead endpoint is a custom mirror
        dlg.custom_edit.setText("not a web address at all")
        dlg.custom_radio.setChecked(True)
        dlg.ok_button.click()
        assert dlg.isVisible() and "is not a web address" in dlg.error_label.text()
        dlg.custom_edit.setText(hub.url)
        dlg.ok_button.click()
        assert not dlg.isVisible()
        assert w.settings.downloads.hf_endpoint == hub.url and HubSettings.load().hf_endpoint == hub.url
        assert page.failure_label.text().endswith("Downloads now come from 127.0.0.1: press Retry.")
        # Retry downloads from the mirror and the failure goes away
        page.retry_button.click()
        qtbot.waitUntil(lambda: page.download_dialog is None, timeout=60_000)
        assert [i.filename for i in ModelStore().installed()] == ["good.gguf"]
        assert not page.failure_label.isVisible() and page.failure is None

    # Import a file you already have: the file dialog, then the checked import of the main window
    bad = tmp_path / "old-download.gguf"
    bad.write_bytes(b"<html>not a model</html>")
    monkeypatch.setattr("app.welcome.QFileDialog.getOpenFileName", lambda *a, **k: (str(bad), ""))
    page.show_failure(page.failure or _unreachable())
    page.import_button.click()
    qtbot.waitUntil(lambda: not w.importing, timeout=60_000)
    assert w.banner.text().startswith("old-download.gguf was not imported: not a GGUF file: it is an HTML page")


def _unreachable():
    from runtime.hub.errors import UNREACHABLE, DownloadFailure

    return DownloadFailure(UNREACHABLE, host="huggingface.co")


def test_gui_dropped_download_says_how_much_is_kept_and_retry_resumes(qtbot, make_window):
    with FakeHub() as hub:
        content = tiny_gguf(600_000, seed=8)
        # the first response breaks after 200 kB, the next ones at once: the retries give up with 200 kB kept
        hub.add(REPO, "good.gguf", content, drop_after=[200_000, 0, 0, 0, 0, 0], drop_times=6)
        w, page = _first_run_page(qtbot, make_window, hub.url)
        page.start_button.click()
        qtbot.waitUntil(lambda: page.failure_label.isVisible(), timeout=60_000)
        text = page.failure_label.text()
        assert text == "The download of Tiny Good failed: the connection to 127.0.0.1 dropped after 195.31 KiB; " \
                       "Retry resumes.", text
        assert page.retry_button.text() == "Retry (resumes)" and page.failure.kept_bytes == 200_000
        hub.files[(REPO, "good.gguf")].drop_times = 0
        page.retry_button.click()
        qtbot.waitUntil(lambda: page.download_dialog is None, timeout=60_000)
        installed = ModelStore().installed()
        assert [i.filename for i in installed] == ["good.gguf"] and installed[0].path.read_bytes() == content
        ranges = [r["headers"].get("range") for r in hub.requests if r["server"] == "cdn"]
        assert "bytes=200000-" in ranges  # Retry continued from the kept bytes
