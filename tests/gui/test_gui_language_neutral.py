"""Language-neutral data (issue 26, item 7): a new chat's title, the model picker's suffixes and
error details are stored without a language and translated when shown, so switching between
English and 简体中文 changes them too."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QCoreApplication
from PySide6.QtWidgets import QApplication

from app.main import install_translation
from runtime.errors import ContextOverflowError, OutOfMemoryError
from tests.gui.conftest import settings_for


def _switch(qtbot, w, language: str, new_chat_text: str) -> None:
    install_translation(QApplication.instance(), language)
    qtbot.waitUntil(lambda: w.new_chat_button.text() == new_chat_text, timeout=5000)


def test_new_chat_title_and_model_suffix_follow_the_language(make_window, qtbot, tiny_model_path):
    s = settings_for(tiny_model_path, seed=1, max_new_tokens=4)
    s.local_models = [str(Path(tiny_model_path).resolve())]
    w = make_window(settings=s)
    w.new_conversation()
    assert w.store.conversation(w.conversation_id).title == ""  # stored without a language
    legacy = w.store.create_conversation("新对话")  # written by an older version in the Chinese UI
    w.refresh_conversations()
    titles = [w.conversation_list.item(i).text() for i in range(w.conversation_list.count())]
    assert titles == ["New chat", "New chat"]
    assert w.model_combo.itemText(0).endswith("(imported)")

    _switch(qtbot, w, "zh_CN", "新对话")
    titles = [w.conversation_list.item(i).text() for i in range(w.conversation_list.count())]
    assert titles == ["新对话", "新对话"]
    assert w.model_combo.itemText(0).endswith("（已导入）")

    _switch(qtbot, w, "en", "New chat")
    titles = [w.conversation_list.item(i).text() for i in range(w.conversation_list.count())]
    assert titles == ["New chat", "New chat"]
    assert w.model_combo.itemText(0).endswith("(imported)")
    # the first message names an untitled chat, whichever language made it
    w.open_conversation(legacy.id)
    w.input.setPlainText("what is a ternary weight")
    with qtbot.waitSignal(w.generationFinished, timeout=60_000):
        w.send()
    assert w.store.conversation(legacy.id).title == "what is a ternary weight"


def test_generation_error_is_stored_as_a_code_and_shown_in_the_interface_language(make_window, qtbot,
                                                                                   monkeypatch):
    from app.errors import UserError, error_text

    w = make_window()

    def out_of_memory(*_args, **_kwargs):
        raise OutOfMemoryError("out of CPU memory while generating; load with a smaller context")

    monkeypatch.setattr(w.worker.engine, "generate", out_of_memory)
    _switch(qtbot, w, "zh_CN", "新对话")
    w.input.setPlainText("hello")
    with qtbot.waitSignal(w.generationFinished, timeout=60_000):
        w.send()
    stats = w.store.messages(w.conversation_id)[-1].stats
    assert stats["error_code"] == "out_of_memory" and "CPU memory" in stats["error"]  # English kept for logs
    shown = error_text(UserError("out_of_memory", ""))
    assert w.last_error == QCoreApplication.translate("MainWindow", "Generation failed: %1").replace("%1", shown)
    assert "out of CPU memory" not in w.last_error  # the runtime's English line is not what the user reads
    footer = w.chat_view.widgets[-1].stats_label
    assert shown in footer.text()

    _switch(qtbot, w, "en", "New chat")  # the footer is rebuilt from the code in the new language
    assert footer.text() == "Error: " + error_text(UserError("out_of_memory", ""))
    assert footer.text().startswith("Error: The computer ran out of memory")


def test_common_errors_have_their_own_words():
    from app.errors import UserError, describe, error_text

    missing = FileNotFoundError(2, "No such file or directory", "/models/gone.gguf")
    assert error_text(describe(missing)) == "gone.gguf: file not found."
    assert "Errno" not in error_text(describe(missing))
    overflow = ContextOverflowError("the prompt is 600 tokens but the context holds 512 (at least one token "
                                    "must be left for the answer); shorten the conversation")
    assert describe(overflow).params == {"prompt": "600", "context": "512"}
    assert error_text(describe(overflow)).startswith("The conversation is 600 tokens long but the context holds 512.")
    gpu = OutOfMemoryError("out of CUDA memory while generating; load with a smaller context")
    assert describe(gpu).code == "out_of_memory_gpu"
    weird = ValueError("bad value\nsecond line")
    text = error_text(describe(weird))
    assert "ValueError" not in text and "bad value" in text and "second line" not in text
    old = UserError.from_stats({"finish_reason": "error", "error": "Something from an old version"})
    assert error_text(old) == "Something from an old version"  # stored before codes existed
