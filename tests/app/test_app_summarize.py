"""Map-reduce summarization logic against a small deterministic engine double.

The double follows docs/engine.md (info.context_length, count_tokens, generate yielding a
DoneEvent) with one token per whitespace-separated word, so budgets can be checked exactly; the
GUI tests run the same code against the real engine.
"""

import threading
from types import SimpleNamespace

import pytest

from app.core.summarize import Summarizer
from runtime.errors import ContextOverflowError
from runtime.generation import CancelToken, DoneEvent, GenerationSettings, GenerationStats, TextEvent


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
    assert res.summary == "" and res.chunk_summaries == ["S1", "S2"] and not res.complete
    assert res.partial_text(lambda k, n: f"Part {k} of {n}") == (
        f"**Part 1 of {res.chunks}**\n\nS1\n\n**Part 2 of {res.chunks}**\n\nS2")


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


class LongReplyEngine(WordEngine):
    """Replies with every token it may (a random model never stops early). ``map_inflate`` /
    ``reduce_inflate`` words per generated token model what byte-level tokenizers do to random
    output (an invalid UTF-8 byte comes back as a three-byte replacement character): the reply
    counts as more tokens than were generated. ``fail_on_call`` raises there; ``clock`` is advanced
    by ``prefill_s`` per prompt token before the first piece and ``decode_s`` per piece."""

    def __init__(self, context_length, map_inflate=1, reduce_inflate=1, fail_on_call=None,
                 cancel_after_calls=None, prefill_s=0.001, decode_s=0.05):
        super().__init__(context_length, cancel_after_calls)
        self.map_inflate, self.reduce_inflate, self.fail_on_call = map_inflate, reduce_inflate, fail_on_call
        self.prefill_s, self.decode_s = prefill_s, decode_s
        self.now = 0.0

    def clock(self):
        return self.now

    def generate(self, messages, settings, cancel=None):
        assert self.count_tokens(messages) + settings.max_new_tokens <= self.info.context_length
        self.prompts.append(messages[0]["content"])
        call = len(self.prompts)
        if call == self.fail_on_call:
            raise RuntimeError("the device was lost")
        if self.cancel_after_calls is not None and call > self.cancel_after_calls:
            cancel.cancel()
        if cancel is not None and cancel.cancelled:
            yield DoneEvent(GenerationStats(finish_reason="cancelled"))
            return
        self.now += self.prefill_s * self.count_tokens(messages)
        inflate = self.reduce_inflate if messages[0]["content"].startswith("Below are") else self.map_inflate
        pieces = []
        for j in range(settings.max_new_tokens):
            piece = " ".join([f"c{call}t{j}"] * inflate) + " "
            pieces.append(piece)
            self.now += self.decode_s
            yield TextEvent(piece)
        text = "".join(pieces)
        yield DoneEvent(GenerationStats(prompt_tokens=self.count_tokens(messages), finish_reason="length",
                                        generated_tokens=len(pieces), decode_tok_s=1 / self.decode_s,
                                        token_ids=list(range(len(pieces)))), text=text)


def test_answer_budget_comes_from_the_context_not_the_chat_max_new_tokens():
    text = _doc(n_paragraphs=200, words=40)
    big = Summarizer(WordEngine(4096), GenerationSettings(max_new_tokens=3000))
    small = Summarizer(WordEngine(4096), GenerationSettings(max_new_tokens=4))
    assert big.answer_tokens == small.answer_tokens == 512 and big.settings.max_new_tokens == 512
    a, b = big.summarize(text), small.summarize(text)
    assert a.chunks == b.chunks == 3 and a.answer_tokens == 512 and a.complete and b.complete
    from app.core.summarize import answer_budget

    assert (answer_budget(4096), answer_budget(512), answer_budget(256), answer_budget(131072)) == (512, 64, 48, 1024)


def test_cancel_while_reading_keeps_the_parts_even_when_they_could_not_be_combined():
    # The partial summaries are too long to go two in a prompt; Cancel after 3 parts must still keep them.
    eng = LongReplyEngine(1000, map_inflate=4, cancel_after_calls=3)
    res = Summarizer(eng).summarize(_doc(n_paragraphs=40, words=60), cancel=CancelToken())
    assert res.cancelled and res.failure is None and res.chunks > 3
    assert res.chunks_used == 3 and len(res.chunk_summaries) == 3 and res.summary == ""
    assert all(s.startswith(f"c{k + 1}t0") for k, s in enumerate(res.chunk_summaries))


def test_partial_summaries_too_long_to_pair_are_condensed_then_combined():
    eng = LongReplyEngine(1000, map_inflate=4)  # each partial summary fits a prompt alone, never two together
    s = Summarizer(eng)
    res = s.summarize(_doc(n_paragraphs=40, words=60))
    assert res.complete and res.chunks_used == res.chunks >= 3 and res.failure is None
    reduces = [p for p in eng.prompts if p.startswith("Below are")]
    assert len(reduces) >= res.chunks  # each alone first (condensed), then combined
    assert any("[Part summary 2]" in p for p in reduces)  # ...and then combined in groups
    assert res.summary.startswith(f"c{len(eng.prompts)}t0")


def test_a_partial_summary_too_long_even_alone_keeps_the_work_and_says_so():
    eng = LongReplyEngine(1000, map_inflate=8)  # 125 generated tokens come back as 1000 words
    res = Summarizer(eng).summarize(_doc(n_paragraphs=40, words=60))
    from app.core.summarize import SummaryError

    assert isinstance(res.failure, SummaryError) and res.failure.code == "part_too_long"
    assert res.failure.params["tokens"] == 1000 and 0 < res.failure.params["room"] < 1000
    assert res.chunks_used == res.chunks == len(res.chunk_summaries) and not res.complete and not res.cancelled
    assert "too long to combine" in str(res.failure)


def test_an_engine_error_keeps_the_finished_parts():
    eng = LongReplyEngine(1000, fail_on_call=3)
    res = Summarizer(eng).summarize(_doc(n_paragraphs=40, words=60))
    assert isinstance(res.failure, RuntimeError) and "device was lost" in str(res.failure)
    assert res.chunks_used == 2 == len(res.chunk_summaries) and res.chunks > 2 and not res.complete
    assert 0 < res.fraction_used < 1


def test_cancel_while_combining_keeps_every_part():
    eng = LongReplyEngine(1000)
    n = Summarizer(eng).summarize(_doc(n_paragraphs=40, words=60)).chunks
    eng = LongReplyEngine(1000, cancel_after_calls=n)  # the first combining step is cancelled
    res = Summarizer(eng).summarize(_doc(n_paragraphs=40, words=60), cancel=CancelToken())
    assert res.cancelled and res.chunks_used == res.chunks == n == len(res.chunk_summaries) and res.summary == ""


def test_each_generation_is_streamed_reported_and_timed():
    eng = LongReplyEngine(1000, prefill_s=0.002, decode_s=0.1)
    steps, pieces, progress = [], [], []
    s = Summarizer(eng, clock=eng.clock)
    res = s.summarize(_doc(n_paragraphs=40, words=60), progress=lambda p: progress.append((p, eng.now)),
                      on_step=steps.append, on_text=pieces.append)
    assert res.complete
    started = [x for x in steps if x.stats is None]
    ended = [x for x in steps if x.stats is not None]
    assert len(started) == len(ended) == len(eng.prompts)
    assert [x.step for x in started] == list(range(1, len(eng.prompts) + 1))
    assert [x.part for x in started if x.stage == "map"] == list(range(1, res.chunks + 1))
    assert all(x.prompt_tokens > 0 for x in started)
    assert [x.text for x in ended if x.stage == "map"] == [t.strip() for t in res.chunk_summaries]
    assert "".join(pieces).split() == " ".join(x.text for x in ended).split()  # every piece, in order
    assert ended[0].stats["generated_tokens"] == s.answer_tokens and "token_ids" not in ended[0].stats
    # Time left: measured speed x remaining work, against the real remaining time of the fake clock.
    first = next(p for p, _ in progress if p.done == 1)
    assert progress[0][0].eta_s is None  # nothing measured yet
    at = next(t for p, t in progress if p.done == 1)
    actual = eng.now - at
    assert first.eta_s is not None and abs(first.eta_s - actual) <= 0.2 * actual
    assert first.elapsed_s == pytest.approx(at)
    assert progress[-1][0].eta_s == pytest.approx(0.0)


def test_context_too_small_names_the_numbers_for_translation():
    from app.core.summarize import SummaryError

    with pytest.raises(SummaryError) as e:
        Summarizer(WordEngine(context_length=120), answer_tokens=40).summarize(_doc())
    assert e.value.code == "context_too_small" and e.value.params["context"] == 120
    assert e.value.params["answer"] == 40 and e.value.params["room"] >= 0
