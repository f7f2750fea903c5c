"""Gauges tell the truth (issue 26, item 4): the Context gauge belongs to the chat on screen, and
the time to first token is wall time from Send, the same in the gauge, the footer and the history."""

from __future__ import annotations

import time

from app.gauges import format_seconds


def test_context_gauge_follows_the_chat_on_screen(make_window, qtbot):
    w = make_window()
    w.input.setPlainText("hello there, a first question")
    with qtbot.waitSignal(w.generationFinished, timeout=60_000):
        w.send()
    first = w.conversation_id
    stats = w.store.messages(first)[-1].stats
    used = stats["prompt_tokens"] + stats["generated_tokens"]
    assert w.gauges.context_bar.format().startswith(f"{used} / ")

    w.new_conversation()
    assert w.gauges.context_bar.value() == 0 and w.gauges.context_bar.format().startswith("0 / ")
    before = w.gauges.updates
    qtbot.waitUntil(lambda: w.gauges.updates > before + 1, timeout=5000)  # idle memory refreshes
    assert w.gauges.context_bar.format().startswith("0 / "), "the engine's cache is not this chat's fill"

    w.open_conversation(first)
    assert w.gauges.context_bar.format().startswith(f"{used} / ")


def test_time_to_first_token_is_wall_time_from_send(make_window, qtbot, monkeypatch):
    w = make_window()
    engine = w.worker.engine
    real_count = engine.count_tokens

    def busy_count(*args, **kwargs):  # the worker is busy for 0.3 s before the engine starts
        time.sleep(0.3)
        return real_count(*args, **kwargs)

    monkeypatch.setattr(engine, "count_tokens", busy_count)
    t0 = time.perf_counter()
    w.input.setPlainText("how long until the first token?")
    with qtbot.waitSignal(w.generationFinished, timeout=60_000):
        w.send()
    wall = time.perf_counter() - t0
    reply = w.store.messages(w.conversation_id)[-1]
    ttft = reply.stats["ttft_s"]
    assert 0.3 <= ttft <= wall  # waiting, tokenizing and prefill included; never more than the user saw
    shown = format_seconds(ttft)
    assert w.gauges.ttft_label.text() == shown  # the gauge keeps the same figure
    assert f"first token {shown}" in w.chat_view.widgets[-1].stats_label.text()  # so does the footer
    w.open_conversation(w.conversation_id)  # and the footer rebuilt from the history
    assert f"first token {shown}" in w.chat_view.widgets[-1].stats_label.text()

    # regenerate: the prompt is already in the cache, nothing is prefilled
    with qtbot.waitSignal(w.generationFinished, timeout=60_000):
        w.regenerate(w.chat_view.widgets[-1].message_id)
    again = w.store.messages(w.conversation_id)[-1].stats
    assert again["reused_prompt_tokens"] == again["prompt_tokens"] and again["prefill_tok_s"] == 0
    assert again["ttft_s"] >= 0.3
    assert w.gauges.prefill_label.text() == "prompt already in the cache"  # not "prefill 0 tok/s"
    assert w.gauges.ttft_label.text() == format_seconds(again["ttft_s"])
