"""Map-reduce summarization logic against a small deterministic engine double.

The double follows docs/engine.md (info.context_length, count_tokens, generate yielding a
DoneEvent) with one token per whitespace-separated word, so budgets can be checked exactly; the
GUI tests run the same code against the real engine.
"""

import threading
from types import SimpleNamespace

import pytest

from app.summarize import Summarizer
from runtime.errors import ContextOverflowError
from runtime.generation import CancelToken, DoneEvent, GenerationStats, TextEvent


class WordEngine:
    def __init__(self, context_length=200, cancel_after_calls=None):
        self.info = SimpleNamespace(context_length=context_length)
        self.prompts = []
        self.cancel_after_calls = cancel_after_calls

    def count_tokens(self, messages, settings=None):
        text = messages if isinstance(messages, str) else " ".join(m["content"] for m in messages) + " <t> <t>"
        return len(text.split())

    def generate(self, messages, settings, cancel=None):
        assert self.count_tokens(messages) + settings.max_new_tokens <= self.info.context_length
        assert settings.enable_thinking is False
        self.prompts.append(messages[0]["content"])
        if self.cancel_after_calls is not None and len(self.prompts) > self.cancel_after_calls:
            cancel.cancel()
        if cancel is not None and cancel.cancelled:
            yield DoneEvent(GenerationStats(finish_reason="cancelled"))
            return
        out = f"S{len(self.prompts)}"
        yield TextEvent(out)
        yield DoneEvent(GenerationStats(finish_reason="stop"), text=out)


def _doc(n_paragraphs=12, words=40):
    return "\n\n".join(" ".join(f"p{i}w{j}" for j in range(words)) + "." for i in range(n_paragraphs))


def test_short_document_is_one_call_and_fully_used():
    eng = WordEngine(context_length=400)
    res = Summarizer(eng, answer_tokens=50).summarize("A short text.", name="a.txt")
    assert res.chunks == 1 and res.summary == "S1" and res.fraction_used == 1.0 and not res.cancelled
    assert len(eng.prompts) == 1 and "A short text." in eng.prompts[0]


def test_long_document_map_reduce_uses_every_word():
    eng = WordEngine(context_length=200)
    text = _doc()
    progress = []
    s = Summarizer(eng, answer_tokens=40)
    res = s.summarize(text, name="long.txt", progress=progress.append)
    assert res.chunks >= 4 and res.chunks_used == res.chunks
    assert res.fraction_used == 1.0 and res.used_chars == len(text)
    map_prompts = eng.prompts[: res.chunks]
    seen = " ".join(map_prompts)
    for i in range(12):  # no paragraph silently dropped
        assert f"p{i}w0" in seen and f"p{i}w39" in seen
    assert len(eng.prompts) > res.chunks  # at least one reduce call
    assert res.summary == f"S{len(eng.prompts)}"
    stages = [p.stage for p in progress]
    assert stages[0] == "map" and "reduce" in stages
    assert [p.done for p in progress if p.stage == "map"] == list(range(res.chunks + 1))


def test_one_huge_paragraph_is_cut_into_windows():
    eng = WordEngine(context_length=200)
    text = " ".join(f"w{i}" for i in range(1000))  # no paragraph or sentence breaks
    s = Summarizer(eng, answer_tokens=40)
    chunks = s.split(text, s.chunk_budget("x " * 30))
    assert "".join(chunks) == text
    res = s.summarize(text)
    assert res.fraction_used == 1.0 and res.chunks >= 6 and len(chunks) >= 6


def test_cancel_reports_how_much_was_used():
    eng = WordEngine(context_length=200, cancel_after_calls=2)
    text = _doc()
    res = Summarizer(eng, answer_tokens=40).summarize(text, cancel=CancelToken())
    assert res.cancelled and res.chunks_used == 2 and res.chunks > 2
    assert 0 < res.fraction_used < 1
    assert res.summary == "S1\n\nS2"


def test_context_too_small_is_an_explained_error():
    with pytest.raises(ContextOverflowError, match="too small to summarize"):
        Summarizer(WordEngine(context_length=60), answer_tokens=40).summarize(_doc())


def test_cancel_from_another_thread_before_start():
    tok = CancelToken()
    threading.Thread(target=tok.cancel).start()
    import time

    time.sleep(0.05)
    res = Summarizer(WordEngine(200), answer_tokens=40).summarize(_doc(), cancel=tok)
    assert res.cancelled and res.chunks_used == 0 and res.fraction_used == 0.0
