"""Chatting with the real engine in the real window: streaming, gauges, stop, errors, history."""

from __future__ import annotations

import time

from PySide6.QtCore import Qt

from app.core.history import COMPLETE, PARTIAL, HistoryStore


def _send(qtbot, w, text: str) -> None:
    w.input.setFocus()
    qtbot.keyClicks(w.input, text)
    qtbot.keyClick(w.input, Qt.Key.Key_Return)


def test_gui_message_streams_in_batches_and_gauges_update(qtbot, make_window, monkeypatch):
    from runtime.engine import Engine

    real_generate = Engine.generate

    def paced(self, *args, **kwargs):  # the tiny model can finish 16 tokens inside one 40 ms flush
        for event in real_generate(self, *args, **kwargs):
            yield event
            time.sleep(0.015)  # 8+ pieces then span >= 2 flush intervals, whatever the CPU speed

    monkeypatch.setattr(Engine, "generate", paced)
    w = make_window(max_new_tokens=16)
    assert w.gauges.context_length == 512 and "CPU" in w.gauges.layers_label.text()
    batches = []
    w.worker.tokens.connect(lambda rid, batch: batches.append(len(batch)))
    qtbot.keyClicks(w.input, "first line")
    qtbot.keyClick(w.input, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)  # Shift+Enter: new line
    assert w.input.toPlainText() == "first line\n" and not w.generating
    qtbot.keyClicks(w.input, "second line")
    with qtbot.waitSignal(w.generationFinished, timeout=120_000):
        qtbot.keyClick(w.input, Qt.Key.Key_Return)
        assert w.generating and w.send_button.text() == "Stop"
        qtbot.waitUntil(lambda: w.gauges.generated_pieces > 0, timeout=60_000)  # tokens arrive while generating
        assert w.chat_view.widgets[-1].content  # the reply widget shows them
    assert len(batches) >= 2  # streamed, not delivered at once
    msgs = w.store.messages(w.conversation_id)
    assert [m.role for m in msgs] == ["user", "assistant"]
    assert msgs[0].content == "first line\nsecond line"
    assert msgs[1].status == COMPLETE and msgs[1].stats["generated_tokens"] > 0
    assert w.chat_view.widgets[-1].content == msgs[1].content
    # gauges: numbers from the engine
    assert "tok/s" in w.gauges.speed_label.text() and w.gauges.ttft_label.text().endswith((" s", " ms"))
    assert len(w.gauges.chart.points) == 1 and w.gauges.chart.points[0].tok_s > 0
    assert int(w.gauges.prompt_label.text()) == msgs[1].stats["prompt_tokens"]
    assert w.gauges.context_bar.value() > 0 and "/ 512" in w.gauges.context_bar.format()
    before = w.gauges.updates
    qtbot.waitUntil(lambda: w.gauges.updates > before, timeout=5000)  # idle refresh on a timer
    assert "iB" in w.gauges.ram_bar.format()
    assert w.gauges.vram_process_bar.format() == "no GPU in use"
    assert w.conversation_list.count() == 1 and w.conversation_list.item(0).text().startswith("first line")


def _no_eos(monkeypatch):
    """The tiny model is random: its end-of-text token comes at random. Ignore it so a reply is long."""
    import dataclasses

    import app.main_window as mw

    original = mw.generation_settings
    monkeypatch.setattr(mw, "generation_settings", lambda s: dataclasses.replace(original(s), ignore_eos=True))


def test_gui_stop_mid_stream_takes_effect_quickly(qtbot, make_window, monkeypatch):
    _no_eos(monkeypatch)
    w = make_window(max_new_tokens=400)
    _send(qtbot, w, "write a long story")
    qtbot.waitUntil(lambda: w.gauges.generated_pieces >= 2, timeout=60_000)
    t0 = time.monotonic()
    with qtbot.waitSignal(w.generationFinished, timeout=30_000):
        qtbot.keyClick(w, Qt.Key.Key_Escape)
    stopped_after = time.monotonic() - t0
    reply = w.store.messages(w.conversation_id)[-1]
    assert reply.stats["finish_reason"] == "cancelled"
    assert reply.stats["generated_tokens"] < 400
    # within one token: no slower than the slowest token seen plus queueing slack
    per_token = reply.stats["total_s"] / max(reply.stats["generated_tokens"], 1)
    assert stopped_after < 3 * per_token + 2.0
    assert "stopped" in w.chat_view.widgets[-1].stats_label.text()
    assert not w.generating and w.send_button.text() == "Send"


def test_gui_worker_exception_is_shown_and_next_message_works(qtbot, make_window):
    w = make_window(max_new_tokens=6)
    engine = w.worker.engine

    def broken_generate(*args, **kwargs):
        raise RuntimeError("injected failure in generate")

    engine.generate = broken_generate  # the real engine, one method replaced
    with qtbot.waitSignal(w.generationFinished, timeout=60_000):
        _send(qtbot, w, "hello")
    assert w.banner.isVisible() and "injected failure in generate" in w.banner.text()
    assert "RuntimeError" not in w.banner.text()  # the user reads the message, not the exception class
    assert w.worker.engine is engine and w.host.thread.isRunning()
    del engine.generate  # back to the class method
    with qtbot.waitSignal(w.generationFinished, timeout=120_000):
        _send(qtbot, w, "hello again")
    assert not w.banner.isVisible()
    last = w.store.messages(w.conversation_id)[-1]
    assert last.status == COMPLETE and last.stats.get("finish_reason") in ("length", "stop")
    assert last.stats.get("generated_tokens", 0) > 0


def test_gui_history_survives_restart_and_marks_interrupted_replies(qtbot, make_window, tmp_path):
    w = make_window(max_new_tokens=6)
    with qtbot.waitSignal(w.generationFinished, timeout=120_000):
        _send(qtbot, w, "remember me")
    cid = w.conversation_id
    reply = w.store.messages(cid)[-1].content
    w.close()
    # a reply that was streaming when the app died: partial row left behind
    store = HistoryStore()
    crashed = store.create_conversation("crashed chat")
    store.add_message(crashed.id, "user", "question")
    store.add_message(crashed.id, "assistant", "half an ans", status=PARTIAL)
    store.close()

    w2 = make_window(load=False)
    titles = [w2.conversation_list.item(i).text() for i in range(w2.conversation_list.count())]
    assert titles == ["crashed chat", "remember me"]
    assert w2.conversation_id == crashed.id
    assert "Interrupted" in w2.chat_view.widgets[-1].stats_label.text()
    w2.open_conversation(cid)
    assert [x.content for x in w2.chat_view.widgets] == ["remember me", reply]
    # search, rename, export, delete from the sidebar
    w2.search_edit.setText("remember")
    assert w2.conversation_list.count() == 1
    w2.search_edit.clear()
    w2.rename_conversation(cid, "Renamed chat")
    assert w2.store.conversation(cid).title == "Renamed chat"
    out = w2.export_conversation("markdown", cid, str(tmp_path / "c.md"))
    assert "# Renamed chat" in out.read_text(encoding="utf-8")
    w2.delete_conversation(cid, confirm=False)
    assert w2.store.conversation(cid) is None and w2.conversation_list.count() == 1


def test_gui_regenerate_and_edit_resend(qtbot, make_window):
    w = make_window(max_new_tokens=4)
    with qtbot.waitSignal(w.generationFinished, timeout=120_000):
        _send(qtbot, w, "original question")
    user_id, reply_id = [m.id for m in w.store.messages(w.conversation_id)]
    with qtbot.waitSignal(w.generationFinished, timeout=120_000):
        w.chat_view.widgets[-1].regen_button.click()
    msgs = w.store.messages(w.conversation_id)
    assert [m.role for m in msgs] == ["user", "assistant"] and msgs[1].id != reply_id
    w.chat_view.widgets[0].edit_button.click()
    assert w.input.toPlainText() == "original question"
    w.input.setPlainText("edited question")
    with qtbot.waitSignal(w.generationFinished, timeout=120_000):
        qtbot.keyClick(w.input, Qt.Key.Key_Return)
    msgs = w.store.messages(w.conversation_id)
    assert [m.content for m in msgs][0] == "edited question" and len(msgs) == 2 and msgs[0].id != user_id
    w.chat_view.widgets[1].copy_button.click()
    from PySide6.QtGui import QGuiApplication

    assert QGuiApplication.clipboard().text() == msgs[1].content


def test_gui_corrupt_or_missing_model_is_explained_and_app_stays_usable(qtbot, make_window, tmp_path, tiny_model_path):
    w = make_window(load=False)
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + bytes(range(256)) * 8)
    w.handle_dropped(str(bad))  # dropping a model file checks it, then imports and loads it
    qtbot.waitUntil(lambda: not w.importing and not w.loading, timeout=60_000)
    assert w.banner.isVisible() and w.banner.text().startswith("broken.gguf was not imported:")
    assert "GGUF" in w.banner.text() and str(bad) not in w.settings.local_models
    assert not w.model_info and not w.loading and not w.send_button.isEnabled()
    w.load_model(str(tmp_path / "gone.ternary"))
    qtbot.waitUntil(lambda: not w.loading, timeout=60_000)
    assert "gone.ternary: no such file" in w.banner.text()
    with qtbot.waitSignal(w.modelLoaded, timeout=60_000):
        w.load_model(tiny_model_path)
    assert w.send_button.isEnabled() and not w.banner.isVisible()


def test_gui_switching_conversation_mid_stream_keeps_the_reply(qtbot, make_window, monkeypatch):
    _no_eos(monkeypatch)
    w = make_window(max_new_tokens=300)
    _send(qtbot, w, "long one")
    first = w.conversation_id
    qtbot.waitUntil(lambda: w.gauges.generated_pieces >= 2, timeout=60_000)
    with qtbot.waitSignal(w.generationFinished, timeout=30_000):
        w.new_action.trigger()  # Ctrl+N: a new chat stops the reply
    assert w.conversation_id != first and w.chat_view.widgets == []
    reply = w.store.messages(first)[-1]
    assert reply.status == COMPLETE and reply.stats["finish_reason"] == "cancelled" and reply.content
