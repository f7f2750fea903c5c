"""The app against a remote: a real ``ternary serve`` server (runtime.server over the tiny model, on
127.0.0.1) added as a remote backend; the window lists its models, chats, stops and regenerates
through it, with the key from the keyring (this test's in-memory fallback) and the history stored
like a local answer."""

from __future__ import annotations

import contextlib
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
    ref = remote_ref("box", "tiny")
    w = _remote_window(qtbot, served)  # the model listed from GET /v1/models, then loaded
    try:
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


@contextlib.contextmanager
def _serve_recorded(model_path: str):
    """The model behind ``ternary serve`` with a key; it records each prompt's length and the max_tokens asked,
    then answers briefly (12 tokens at most) to keep the test fast."""
    from runtime.engine import Engine
    from runtime.server import EngineAccess, ServerConfig, start_server

    engine = Engine.load(model_path, device="cpu")
    real = engine.generate_tokens
    runs: list[tuple[int, int]] = []

    def recorded(prompt_ids, settings=None, cancel=None, **kw):
        runs.append((len(prompt_ids), settings.max_new_tokens))
        yield from real(prompt_ids, dataclasses.replace(settings, max_new_tokens=min(settings.max_new_tokens, 12)),
                        cancel, **kw)

    engine.generate_tokens = recorded
    handle = start_server(EngineAccess(engine, "tiny"), ServerConfig(port=0, api_key=KEY))
    handle.runs, handle.context = runs, engine.request_context
    try:
        yield handle
    finally:
        handle.stop()
        engine.close()
        clear_key(remote_key_name("box"))


@pytest.fixture
def served_plain(tiny_model_path):
    """The tiny model, 512-token context."""
    with _serve_recorded(tiny_model_path) as handle:
        yield handle


@pytest.fixture
def served_roomy(kb_model_path):
    """The tiny model with a 4,096-token context: room for passages fitted by a byte upper bound."""
    with _serve_recorded(kb_model_path) as handle:
        yield handle


def _remote_window(qtbot, served):
    from app.main_window import MainWindow

    settings = AppSettings()
    settings.remotes = {"box": served.url}
    set_key(remote_key_name("box"), KEY)
    ref = remote_ref("box", "tiny")
    settings.sampling[ref] = dataclasses.replace(settings.sampling_for(ref), max_new_tokens=8, seed=1)
    w = MainWindow(settings=settings, autoload=False)
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.model_combo.findData(ref) >= 0, timeout=30_000)
    with qtbot.waitSignal(w.modelLoaded, timeout=30_000):
        w.load_model(ref)
    return w


def test_gui_summary_and_document_answer_through_a_remote(qtbot, served_plain, tmp_path):
    from app.core.remote import COUNT_EXACT
    from tests.gui.test_gui_documents import _drop
    from tests.gui.test_gui_knowledge_chat import ANSWER, _ask, _attach, _documents

    w = _remote_window(qtbot, served_plain)
    try:
        assert w.model_info["remote"] and w.model_info["context_length"] == served_plain.context == 512
        assert w.model_info["token_counting"] == COUNT_EXACT

        # a dropped document is summarized in parts by the remote; every prompt fits its context
        doc = tmp_path / "long report.txt"
        doc.write_text("\n\n".join(f"Paragraph {i}: ternary weights are -1, 0 or +1, said the report of day {i}."
                                   for i in range(30)), encoding="utf-8")
        with qtbot.waitSignal(w.worker.summaryDone, timeout=180_000):
            _drop(w, doc)
        qtbot.waitUntil(lambda: w.last_summary is not None, timeout=10_000)
        r = w.last_summary
        assert r.complete and r.chunks >= 2 and r.chunks_used == r.chunks, r.failure
        assert "whole document was read" in w.store.messages(w.conversation_id)[-1].content
        assert served_plain.runs and all(n + m <= 512 for n, m in served_plain.runs)
        assert "need a local model" not in w.banner.text() and "cannot count" not in w.banner.text()

        # a question about attached documents: passages fitted by the remote's count, cited sources stored
        w.new_conversation()
        served_plain.runs.clear()
        md, pdf = _documents(tmp_path / "docs")
        _attach(qtbot, w, [md, pdf])
        _ask(qtbot, w, "What is the harbour gate code?")
        msgs = w.store.messages(w.conversation_id)
        assert msgs[-2].content == "What is the harbour gate code?" and msgs[-1].status == COMPLETE
        used = [s for s in msgs[-1].sources if s["used"]]
        assert used and any(ANSWER in w.knowledge.store.passage(s["passage_id"]).text for s in used)
        assert len(served_plain.runs) == 1 and served_plain.runs[0][0] + 8 <= 512
    finally:
        w.close()


def test_gui_remote_that_cannot_count_or_has_no_context(qtbot, served_roomy, tmp_path, monkeypatch):
    """A remote without a tokenize endpoint: answers from documents work, fitted by the byte upper bound, and the
    first one says so once; a remote that does not report its context length gets a clear error instead."""
    from app.core import remote as R
    from tests.gui.test_gui_knowledge_chat import _ask, _attach, _documents

    def absent(self, what, settings):
        raise R._Absent

    monkeypatch.setattr(R.RemoteEngine, "_count_tokenize", absent)  # as if the server had no such endpoints
    monkeypatch.setattr(R.RemoteEngine, "_count_llama", absent)
    w = _remote_window(qtbot, served_roomy)
    try:
        assert w.model_info["token_counting"] == R.COUNT_UPPER_BOUND
        md, pdf = _documents(tmp_path / "docs")
        _attach(qtbot, w, [md, pdf])
        notice = "box cannot count tokens; passages are fitted by a safe upper bound."
        _ask(qtbot, w, "What is the harbour gate code?")
        assert w.banner.isVisible() and notice in w.banner.text()
        msgs = w.store.messages(w.conversation_id)
        assert msgs[-1].status == COMPLETE and any(s["used"] for s in msgs[-1].sources)
        assert served_roomy.runs[-1][0] + 8 <= 4096
        _ask(qtbot, w, "And when does the ferry leave?")
        assert not (w.banner.isVisible() and notice in w.banner.text())  # said once
        assert w.store.messages(w.conversation_id)[-1].status == COMPLETE
    finally:
        w.close()

    monkeypatch.setattr(R, "context_of_entry", lambda entry: 0)  # /v1/models without a context (no /props either)
    w = _remote_window(qtbot, served_roomy)
    try:
        assert w.model_info["context_length"] == 0
        doc = tmp_path / "short.txt"
        doc.write_text("A short text.", encoding="utf-8")
        runs = len(served_roomy.runs)
        w.summarize_file(str(doc))
        assert w.banner.isVisible() and "box does not report its context length" in w.banner.text()
        assert w._summary_cancel is None and len(served_roomy.runs) == runs  # nothing started
        md, pdf = _documents(tmp_path / "docs2")
        _attach(qtbot, w, [md])
        w.clear_banner()
        before = len(w.store.messages(w.conversation_id))
        assert w.send("What is the harbour gate code?")
        assert w.banner.isVisible() and "box does not report its context length" in w.banner.text()
        assert not w.generating and len(served_roomy.runs) == runs
        after = w.store.messages(w.conversation_id)
        assert len(after) == before + 1 and after[-1].role == "user"  # no reply was started
    finally:
        w.close()
