"""What the context budget did, worded at display time in the interface's language.

The answer module stores codes with numbers (no English); the GUI words them with ``self.tr``.
A translator that marks every string it is asked for proves each sentence goes through Qt's
translation, with the numbers put in after it; answers stored before the codes keep their English.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QCoreApplication, QTranslator

from app.knowledge.answer import build_grounded_prompt
from app.passage_dialog import PassageDialog, resolve_source


class MarkingTranslator(QTranslator):
    """Translates every string of the named contexts to "ZH<" + string + ">" (the %n kept)."""

    def __init__(self, contexts: set[str]) -> None:
        super().__init__()
        self.contexts = contexts
        self.asked: list[str] = []

    def isEmpty(self) -> bool:  # noqa: N802 - Qt override
        return False

    def translate(self, context, source, disambiguation=None, n=-1):  # noqa: ANN001 - Qt override
        if context in self.contexts:
            self.asked.append(source)
            return f"ZH<{source}>"
        return ""


@pytest.fixture
def marking(qapp):
    translator = MarkingTranslator({"ChatKnowledge", "PassageDialog"})
    QCoreApplication.installTranslator(translator)
    yield translator
    QCoreApplication.removeTranslator(translator)


@pytest.fixture
def knowledge(qtbot, tmp_path):
    from app.attachments_bar import AttachmentsBar
    from app.chat_knowledge import ChatKnowledge
    from app.knowledge.store import KnowledgeStore

    bar = AttachmentsBar()
    qtbot.addWidget(bar)
    k = ChatKnowledge(bar, lambda text, error: None, store=KnowledgeStore(":memory:"))
    yield k
    k.shutdown()


class _Passage:
    def __init__(self, pid: int, words: int) -> None:
        self.id, self.path, self.text = pid, Path(f"/docs/p{pid}.md"), " ".join(["w"] * words)
        self.page, self.heading, self.line = None, "", None

    def location(self) -> str:
        return self.path.name


class _Hit:
    def __init__(self, pid: int, words: int) -> None:
        self.passage, self.score, self.fts_rank, self.dense_rank = _Passage(pid, words), 1.0, 1, None


def _count(messages) -> int:
    return sum(len(m["content"].split()) for m in messages)


def test_budget_notes_are_translated_with_their_numbers(knowledge, marking):
    hits = [_Hit(1, 30), _Hit(2, 400), _Hit(3, 20)]
    base = _count(build_grounded_prompt([], "q?", [], count_tokens=_count, context_length=10**6,
                                        answer_tokens=0).messages)
    prompt = build_grounded_prompt([], "q?", hits, count_tokens=_count, context_length=base + 80, answer_tokens=0)
    assert "1 of 3 passages" in prompt.note  # the CLI's English
    text = knowledge.budget_note_text(prompt)
    assert text == f"ZH<1 of 3 passages did not fit in the {base + 80}-token context and were left out.>"
    assert marking.asked == ["%1 of %2 passages did not fit in the %3-token context and were left out."]

    conversation = [{"role": "user", "content": "x " * 50}, {"role": "assistant", "content": "y " * 50}]
    tight = build_grounded_prompt(conversation, "q?", [_Hit(1, 30)], count_tokens=_count,
                                  context_length=base + 40, answer_tokens=0)
    assert knowledge.budget_note_text(tight) == \
        "ZH<The 2 oldest messages of the conversation were left out so that a source fits.>"
    nothing = build_grounded_prompt([], "q?", [_Hit(1, 500)], count_tokens=_count, context_length=base + 20,
                                    answer_tokens=10)
    assert knowledge.budget_note_text(nothing).startswith(f"ZH<No source passage fits in the {base + 20}-token "
                                                          "context beside the question and a 10-token answer;")
    long_question = build_grounded_prompt([], "word " * 300, [_Hit(1, 5)], count_tokens=_count,
                                          context_length=100, answer_tokens=10)
    assert "ZH<The question and conversation alone take" in knowledge.budget_note_text(long_question)
    assert knowledge.budget_note_text(build_grounded_prompt([], "q", [], count_tokens=_count, context_length=1000,
                                                            answer_tokens=10)) == ""


def _left_out_source(**reason) -> dict:
    return {"n": None, "passage_id": None, "path": "/nowhere/c.md", "location": "c.md, line 4", "quote": "gamma",
            "used": False, **reason}


def test_a_left_out_passage_says_why_in_the_interface_language_and_old_answers_keep_their_english(qtbot, marking):
    dialog = PassageDialog(resolve_source(_left_out_source(reason_code="did_not_fit", needs_tokens=250,
                                                           left_tokens=40), None))
    qtbot.addWidget(dialog)
    assert dialog.left_out_label.text() == ("ZH<Left out of the answer: this passage needs 250 tokens and only 40 "
                                            "were left in the context.>")
    assert not dialog.left_out_label.isHidden()
    old = PassageDialog(resolve_source(_left_out_source(reason="did not fit: needs 9 tokens, 2 left"), None))
    qtbot.addWidget(old)
    assert old.left_out_label.text() == "ZH<Left out of the answer: did not fit: needs 9 tokens, 2 left>"
    used = PassageDialog(resolve_source({**_left_out_source(), "n": 1, "used": True}, None))
    qtbot.addWidget(used)
    assert used.left_out_label.text() == "" and used.left_out_label.isHidden()


def test_indexing_problems_with_numbers_are_worded_from_the_code_and_the_stored_size(qapp):
    from app.core.documents import MAX_DOCUMENT_BYTES, MAX_UNPACKED_BYTES
    from app.knowledge_dialog import problem_text

    translator = MarkingTranslator({"DocumentErrors", "KnowledgeBasesDialog"})
    QCoreApplication.installTranslator(translator)
    try:
        big = problem_text(Path("/x/big.txt"), "too_large", "big.txt is 150 MB; files larger ...", 150 * 2**20)
        assert big == (f"ZH<big.txt is too large (150 MB); the limit is {MAX_DOCUMENT_BYTES / 2**20:.0f} MB. "
                       "Split it into smaller files.>")
        bomb = problem_text(Path("/x/bomb.docx"), "too_large_unpacked", "english")
        assert bomb.startswith("ZH<bomb.docx is too large when unpacked (more than "
                               f"{MAX_UNPACKED_BYTES / 2**20:.0f} MB of content)")
        assert problem_text(Path("/x/gone.md"), "vanished", "english") == \
            "ZH<gone.md disappeared while it was being indexed.>"
        # no size known: the indexer's English line
        assert problem_text(Path("/x/big.txt"), "too_large", "big.txt is 150 MB.") == "big.txt is 150 MB."
    finally:
        QCoreApplication.removeTranslator(translator)
