"""Grounded prompts (app.knowledge.answer): the context budget, citations, quotes, the stored sources."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from app.knowledge.answer import (
    DID_NOT_FIT,
    DROPPED_MESSAGES,
    GROUNDING_INSTRUCTIONS,
    NOTHING_FITS,
    PASSAGES_LEFT_OUT,
    QUESTION_TOO_LONG,
    BudgetNote,
    build_grounded_prompt,
    cited_numbers,
    left_out_reason_english,
    link_citations,
    make_quote,
    sources_to_json,
)


@dataclass
class FakePassage:
    """The fields of app.knowledge.store.StoredPassage that the answer module reads."""

    id: int
    path: Path
    text: str
    page: int | None = None
    heading: str = ""
    line: int | None = None

    def location(self) -> str:
        return f"{self.path.name}, p. {self.page}" if self.page else self.path.name


@dataclass
class FakeHit:
    passage: FakePassage
    score: float = 1.0
    fts_rank: int | None = 1
    dense_rank: int | None = None


def words(messages: list[dict[str, str]]) -> int:
    """A stand-in tokenizer: one token per word plus 3 per message (its role markers)."""
    return sum(len(m["content"].split()) + 3 for m in messages)


def hit(pid: int, n_words: int, name: str = "notes.md", first: str = "") -> FakeHit:
    text = " ".join([first] * bool(first) + [f"w{pid}"] * (n_words - bool(first)))
    return FakeHit(FakePassage(pid, Path("/docs") / name, text))


def user_text(prompt) -> str:
    assert prompt.messages[-1]["role"] == "user"
    return prompt.messages[-1]["content"]


def test_everything_fits_numbered_best_first():
    hits = [hit(1, 20, "a.md"), hit(2, 30, "b.md"), hit(3, 10, "c.md")]
    p = build_grounded_prompt([], "what is w2?", hits, count_tokens=words, context_length=4096, answer_tokens=512)
    assert [s.number for s in p.used] == [1, 2, 3]
    assert [s.hit.passage.id for s in p.used] == [1, 2, 3]
    assert p.left_out == [] and p.note == "" and p.dropped_messages == 0
    assert p.messages[0] == {"role": "system", "content": GROUNDING_INSTRUCTIONS}
    text = user_text(p)
    assert text.index("[1] a.md") < text.index("[2] b.md") < text.index("[3] c.md") < text.index("what is w2?")
    assert "w1 " * 5 in text and "w3" in text
    assert p.prompt_tokens == words(p.messages)
    for word in ("only", "[1]", "do not contain", "language of the question"):
        assert word in GROUNDING_INSTRUCTIONS


def test_passages_that_do_not_fit_are_left_out_with_a_reason_and_a_smaller_one_still_used():
    hits = [hit(1, 40, "a.md"), hit(2, 300, "big.md"), hit(3, 30, "c.md")]
    base = words(build_grounded_prompt([], "q?", [], count_tokens=words, context_length=10**6,
                                       answer_tokens=0).messages)
    ctx = base + 100 + 64  # room for ~100 words of sources beside a 64-token answer
    p = build_grounded_prompt([], "q?", hits, count_tokens=words, context_length=ctx, answer_tokens=64)
    assert [(s.number, s.hit.passage.id) for s in p.used] == [(1, 1), (2, 3)]  # renumbered without the gap
    assert [h.passage.id for h in p.left_out] == [2]
    [reason] = p.left_out_reasons
    assert reason.code == DID_NOT_FIT and reason.needs_tokens > reason.left_tokens >= 0
    assert reason.english() == f"did not fit: needs {reason.needs_tokens} tokens, {reason.left_tokens} left"
    assert [(n.code, n.numbers) for n in p.notes] == [(PASSAGES_LEFT_OUT, {"left_out": 1, "total": 3, "context": ctx})]
    assert "1 of 3 passages" in p.note and str(ctx) in p.note
    assert p.prompt_tokens == words(p.messages) <= ctx - 64
    assert "w2" not in user_text(p) and "[2] c.md" in user_text(p)  # never a truncated passage


def test_tiny_context_drops_oldest_turns_first_and_says_so():
    conversation = [{"role": "system", "content": "Be kind."}]
    for i in range(3):
        conversation += [{"role": "user", "content": f"question {i} " + "x " * 40},
                         {"role": "assistant", "content": f"answer {i} " + "y " * 40}]
    hits = [hit(1, 50)]
    alone = build_grounded_prompt(conversation[:1], "q?", hits, count_tokens=words, context_length=10**6,
                                  answer_tokens=0)
    ctx = alone.prompt_tokens + 100 + 32  # the passage and one exchange fit, not three
    p = build_grounded_prompt(conversation, "q?", hits, count_tokens=words, context_length=ctx, answer_tokens=32)
    assert len(p.used) == 1 and p.left_out == []
    assert p.dropped_messages == 4 and "4 oldest messages" in p.note
    assert [(n.code, n.numbers) for n in p.notes] == [(DROPPED_MESSAGES, {"messages": 4})]
    assert p.messages[0]["content"].startswith("Be kind.\n\n") and GROUNDING_INSTRUCTIONS in p.messages[0]["content"]
    kept = p.messages[1:-1]
    assert [m["content"].split()[:2] for m in kept] == [["question", "2"], ["answer", "2"]]  # the newest exchange
    assert p.prompt_tokens <= ctx - 32


def test_nothing_fits_keeps_the_conversation_and_answers_without_sources():
    conversation = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    hits = [hit(1, 500), hit(2, 400)]
    p = build_grounded_prompt(conversation, "q?", hits, count_tokens=words, context_length=200, answer_tokens=50)
    assert p.used == [] and [h.passage.id for h in p.left_out] == [1, 2] and len(p.left_out_reasons) == 2
    assert p.dropped_messages == 0 and p.messages[1:3] == conversation
    assert "No source passage fits in the 200-token context" in p.note
    assert [(n.code, n.numbers) for n in p.notes] == [(NOTHING_FITS, {"context": 200, "answer_tokens": 50})]
    assert "No source passage is available" in user_text(p)


def test_question_alone_too_long_is_reported():
    p = build_grounded_prompt([], "word " * 300, [hit(1, 5)], count_tokens=words, context_length=100,
                              answer_tokens=10)
    assert p.used == [] and "more than the 90 left" in p.note
    too_long = p.notes[-1]
    assert too_long.code == QUESTION_TOO_LONG and too_long.numbers["limit"] == 90
    assert too_long.numbers["answer_tokens"] == 10 and too_long.numbers["tokens"] > 90
    with pytest.raises(ValueError, match="unknown"):
        BudgetNote("no_such_code", {}).english()


def test_duplicate_passages_are_given_once_and_bad_budget_is_refused():
    p = build_grounded_prompt([], "q", [hit(1, 5), hit(1, 5), hit(2, 5)], count_tokens=words,
                              context_length=1000, answer_tokens=10)
    assert [s.hit.passage.id for s in p.used] == [1, 2] and p.left_out == []
    with pytest.raises(ValueError):
        build_grounded_prompt([], "q", [], count_tokens=words, context_length=0, answer_tokens=10)


def test_no_hits_gives_a_prompt_that_says_there_are_no_sources():
    p = build_grounded_prompt([], "q", [], count_tokens=words, context_length=1000, answer_tokens=10)
    assert p.used == [] and p.left_out == [] and p.note == ""
    assert "No source passage is available" in user_text(p)


def test_quote_is_the_sentence_matching_the_question_in_english_and_chinese():
    text = ("The warranty lasts two years. Returns are accepted within 30 days of purchase. "
            "Shipping is free above 50 euros.")
    assert make_quote(text, "How many days do I have for returns?") == \
        "Returns are accepted within 30 days of purchase."
    assert make_quote(text, "zzz") == text  # no overlap: the beginning (short passage: all of it)
    zh = "本产品保修两年。退货须在购买后三十天内办理。运费满五十欧元免费。"
    assert make_quote(zh, "退货期限是多少天？") == "退货须在购买后三十天内办理。"
    long = "word " * 100
    quote = make_quote(long)
    assert len(quote) <= 201 and quote.endswith("…")


def test_cited_numbers_edge_cases():
    assert cited_numbers("See [1].") == [1]
    assert cited_numbers("Both [2, 3] and [1][4].") == [1, 2, 3, 4]
    assert cited_numbers("[3][1] again [1]") == [1, 3]
    assert cited_numbers("range [1-3] and [5–6]") == [1, 2, 3, 5, 6]
    assert cited_numbers("中文引用【2】和［1］，以及[3，4]") == [1, 2, 3, 4]
    assert cited_numbers("made up [7] and [0]", limit=3) == []
    assert cited_numbers("[2] ok, [9] invented", limit=3) == [2]
    assert cited_numbers("code `a[1]` and\n```\nx[2]\n```\nbut [3]") == [3]
    assert cited_numbers("no citations, [a], [], [1.5x]") == []
    assert cited_numbers("[1-100000]") == []  # not a citation range
    assert cited_numbers("[1-60]") == []  # wider than MAX_RANGE
    assert cited_numbers("[1](https://x)") == []  # the model's own Markdown link
    assert cited_numbers("") == []


@pytest.mark.parametrize("text", ["[1-3]", "[1–3]", "【1-3】", "【1–3】", "[1 - 3]", "[1—3]", "［1－3］", "[1～3]",
                                  "[1至3]", "[3-1]", "[1]-[3]", "[1]–[3]", "【1】–【3】"])
def test_every_number_of_a_cited_range_counts_and_is_linked(text):
    assert cited_numbers(f"The gate code changes [x] every spring {text}.") == [1, 2, 3]
    linked = link_citations(f"Spring {text}.", {1, 2, 3})
    for n in (1, 2, 3):
        assert linked.count(f"](cite:{n})") == 1, linked
    opening = "【" if "【" in text else "［" if "［" in text else "\\["
    assert linked.startswith(f"Spring [{opening}1")  # written out one bracket per source: [1][2][3]


def test_link_citations_mixed_lists_missing_sources_and_code():
    assert cited_numbers("see [1, 3-5]") == [1, 3, 4, 5]
    assert link_citations("see [1, 3-5]", {1, 3}) == "see [\\[1\\]](cite:1)[\\[3\\]](cite:3)\\[4\\]\\[5\\]"
    assert link_citations("both [1, 2]", {1, 2}) == "both \\[[1](cite:1), [2](cite:2)\\]"
    assert link_citations("[2]", {2}, scheme="x") == "[\\[2\\]](x:2)"
    assert link_citations("none [4-6] here", {1, 2}) == "none [4-6] here"  # no source: left as text
    assert link_citations("`a[1-2]` and\n```\n[1-2]\n```\n[1-2]", {1, 2}) == \
        "`a[1-2]` and\n```\n[1-2]\n```\n[\\[1\\]](cite:1)[\\[2\\]](cite:2)"
    assert link_citations("[1]: https://x\nsee [1](https://y)", {1}) == "[1]: https://x\nsee [1](https://y)"
    assert link_citations("中文【2】", {2}) == "中文[【2】](cite:2)"
    assert link_citations("[1-3]", set()) == "[1-3]"


def test_sources_to_json_used_and_left_out():
    hits = [hit(1, 40, "a.md", first="Alpha."), hit(2, 300, "big.md"), hit(3, 30, "c.pdf")]
    hits[2].passage.page = 4
    base = words(build_grounded_prompt([], "q?", [], count_tokens=words, context_length=10**6,
                                       answer_tokens=0).messages)
    p = build_grounded_prompt([], "q?", hits, count_tokens=words, context_length=base + 100, answer_tokens=0)
    items = p.sources_json("q?")
    assert [(i["n"], i["passage_id"], i["used"]) for i in items] == [(1, 1, True), (2, 3, True), (None, 2, False)]
    assert items[1]["location"] == "c.pdf, p. 4" and items[1]["page"] == 4
    assert items[0]["path"] == str(Path("/docs/a.md")) and items[0]["quote"].startswith("Alpha.")
    reason = p.left_out_reasons[0]
    # stored language-neutral: a code and its numbers, no English words
    assert {k: items[2][k] for k in ("reason_code", "needs_tokens", "left_tokens")} == \
        {"reason_code": DID_NOT_FIT, "needs_tokens": reason.needs_tokens, "left_tokens": reason.left_tokens}
    assert "reason" not in items[2] and "reason_code" not in items[0]
    assert left_out_reason_english(items[2]) == reason.english()
    for item in items:
        assert {"n", "passage_id", "path", "location", "quote", "used"} <= set(item)
    plain = sources_to_json(p.used, p.left_out)
    assert plain[2]["reason_code"] == "left_out" and left_out_reason_english(plain[2]) == "left out"
    # answers stored before the codes: their English line is kept as it is
    assert left_out_reason_english({"reason": "did not fit: needs 9 tokens, 2 left"}) == \
        "did not fit: needs 9 tokens, 2 left"
    assert left_out_reason_english({"reason_code": DID_NOT_FIT}) == "did not fit"
