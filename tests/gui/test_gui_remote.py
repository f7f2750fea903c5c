"""The app against a remote: a real ``ternary serve`` server (runtime.server over the tiny model, on
127.0.0.1) added as a remote backend; the window lists its models, chats, stops and regenerates
through it, with the key from the keyring (this test's in-memory fallback) and the history stored
like a local answer."""

from __future__ import annotations

import dataclasses
import time

import pytest

from app.core.history import COMPLETE
from app.core.remote import remote_ref
from app.core.secrets import clear_key, remote_key_name, set_key
from app.core.settings_model import AppSettings

KEY = "remote-test-key-789"


@pytest.fixture
def served(tiny_model_path):
    """The tiny model behind a real API server with a key; its decode paced so Stop lands mid-answer."""
    from runtime.engine import Engine
    from runtime.server import EngineAccess, ServerConfig, start_server

    engine = Engine.load(tiny_model_path, device="cpu")
    real = engine.generate_tokens

    def paced(prompt_ids, settings=None, cancel=None, **kw):
        settings = dataclasses.replace(settings, ignore_eos=True)  # the random model's EOS comes at random
        for event in real(prompt_ids, settings, cancel, **kw):
            yield event
            time.sleep(0.01)

    engine.generate_tokens = paced
    handle = start_server(EngineAccess(engine, "tiny"), ServerConfig(port=0, api_key=KEY))
    yield handle
    handle.stop()
    engine.close()
    clear_key(remote_key_name("box"))


def test_gui_chats_stops_and_regenerates_through_a_remote(qtbot, served):
    from app.main_window import MainWindow

    settings = AppSettings()
    settings.remotes = {"box": served.url}
    set_key(remote_key_name("box"), KEY)
    ref = remote_ref("box", "tiny")
    settings.sampling[ref] = dataclasses.replace(settings.sampling_for(ref), max_new_tokens=8, seed=1)
    w = MainWindow(settings=settings, autoload=False)
    qtbot.addWidget(w)
    w.show()
    try:
        qtbot.waitUntil(lambda: w.model_combo.findData(ref) >= 0, timeout=30_000)  # listed from GET /v1/models
        with qtbot.waitSignal(w.modelLoaded, timeout=30_000):
            w.load_model(ref)
        assert w.model_info["remote"] and "remote" in w.status_label.text()
        qtbot.waitUntil(lambda: w.gauges.vram_process_bar.format() == "remote: not reported", timeout=10_000)

        # chat: streamed, stored with the remote model's name
        with qtbot.waitSignal(w.generationFinished, timeout=60_000):
            assert w.send("hello there")
        msgs = w.store.messages(w.conversation_id)
        assert [m.role for m in msgs] == ["user", "assistant"] and msgs[1].status == COMPLETE
        assert msgs[1].content and msgs[1].stats["generated_tokens"] == 8
        assert w.chat_view.widgets[-1].content == msgs[1].content
        assert w.store.conversation(w.conversation_id).model == "tiny @ box"
        assert "tok/s" in w.gauges.speed_label.text() and w.gauges.ttft_label.text().endswith((" s", " ms"))
        first_answer = msgs[1].content

        # stop mid-answer: the stream is closed, what arrived is kept
        w.settings.sampling[ref].max_new_tokens = 2000
        assert w.send("a long one please")
        qtbot.waitUntil(lambda: w.gauges.generated_pieces >= 2, timeout=60_000)
        t0 = time.monotonic()
        with qtbot.waitSignal(w.generationFinished, timeout=10_000):
            w.stop()
        assert time.monotonic() - t0 < 5.0
        stopped = w.store.messages(w.conversation_id)[-1]
        assert stopped.stats["finish_reason"] == "cancelled" and stopped.content
        assert "stopped" in w.chat_view.widgets[-1].stats_label.text()
        qtbot.waitUntil(lambda: served.stats().active == 0, timeout=10_000)  # the server freed its slot

        # regenerate the first answer: same seed and settings -> the same reply, history replaced from there
        w.settings.sampling[ref].max_new_tokens = 8
        with qtbot.waitSignal(w.generationFinished, timeout=60_000):
            w.regenerate(msgs[1].id)
        after = w.store.messages(w.conversation_id)
        assert [m.role for m in after] == ["user", "assistant"] and after[1].status == COMPLETE
        assert after[1].content == first_answer
        assert served.stats().requests_served == 2  # the two finished replies; the stopped one was cut off
    finally:
        w.close()


def test_gui_remote_errors_are_shown_and_nothing_breaks(qtbot, served):
    from app.main_window import MainWindow

    settings = AppSettings()
    settings.remotes = {"box": served.url}
    set_key(remote_key_name("box"), "wrong-key-000")
    w = MainWindow(settings=settings, autoload=False)
    qtbot.addWidget(w)
    w.show()
    try:
        qtbot.waitUntil(lambda: "box" in w.remote_errors, timeout=30_000)
        assert "refused the API key" in w.banner.text() and "wrong-key-000" not in w.banner.text()
        with qtbot.waitSignal(w.modelLoadFailed, timeout=30_000) as failed:
            w.load_model(remote_ref("box", "tiny"))
        assert "401" in failed.args[0]
        assert not w.model_info and w.send_button.isEnabled() is False
    finally:
        w.close()


def test_gui_last_remote_model_loads_at_start_once_listed(qtbot, served):
    from app.main_window import MainWindow

    settings = AppSettings()
    settings.remotes = {"box": served.url}
    settings.last_model = remote_ref("box", "tiny")
    set_key(remote_key_name("box"), KEY)
    w = MainWindow(settings=settings, autoload=True)
    qtbot.addWidget(w)
    try:
        with qtbot.waitSignal(w.modelLoaded, timeout=30_000):
            w.show()
        assert w.model_path == remote_ref("box", "tiny") and w.send_button.isEnabled()
    finally:
        w.close()
