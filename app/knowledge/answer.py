"""Grounded answers: the retrieved passages that fit beside the conversation, numbered for citation.

Why a budget and not "all passages": small ternary models run with 4K-32K tokens of context, so the
prompt can hold only a few passages next to the conversation and the answer. The best passages go
first, as many as fit; whatever does not fit is listed in ``left_out`` with its reason, and if not
even one passage fits the oldest conversation turns are dropped (said in ``notes``). Nothing is ever
cut off silently. Notes and reasons are codes with numbers (:class:`BudgetNote`,
:class:`LeftOutReason`), stored that way with the answer, so each interface words them in its own
language when it shows them (the GUI through Qt's translations, the CLI in English). The instructions are in English but ask for an answer in the question's language,
which Qwen3 models follow for Chinese and other languages.

No Qt and no engine here: ``count_tokens`` is passed in (``Engine.count_tokens`` in the app and CLI,
a fake in tests), so the same rule serves the GUI, the CLI and the tests.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.knowledge.retrieval import Hit

QUOTE_CHARS = 200

GROUNDING_INSTRUCTIONS = (
    "Answer the user's question using only the numbered sources in the user's message. "
    "Cite every statement with the number of its source in square brackets, like [1] or [2][3]. "
    "If the sources do not contain the answer, say that the sources do not contain it; do not guess "
    "and do not use other knowledge. Answer in the language of the question."
)
NO_SOURCES_TEXT = "(No source passage is available for this question.)"


@dataclass
class Source:
    """A passage given to the model; ``number`` is the ``[n]`` the model cites."""

    number: int
    hit: Hit
    quote: str = ""  # the sentence that best matches the question (or the passage's beginning)


# BudgetNote codes and their numbers (the English wording is BudgetNote.english; the GUI translates)
DROPPED_MESSAGES = "dropped_messages"  # messages: how many of the oldest conversation messages were left out
NOTHING_FITS = "nothing_fits"  # context, answer_tokens: not one passage fits; answered without sources
PASSAGES_LEFT_OUT = "left_out"  # left_out, total, context: some passages did not fit
QUESTION_TOO_LONG = "question_too_long"  # tokens, limit, answer_tokens: the prompt alone is over the budget
DID_NOT_FIT = "did_not_fit"  # LeftOutReason code: needs_tokens, left_tokens


@dataclass
class BudgetNote:
    """One thing the user is told about the context budget: a code and its numbers, no words."""

    code: str
    numbers: dict[str, int]

    def english(self) -> str:
        n = self.numbers
        if self.code == DROPPED_MESSAGES:
            return f"The {n['messages']} oldest messages of the conversation were left out so that a source fits."
        if self.code == NOTHING_FITS:
            return (f"No source passage fits in the {n['context']}-token context beside the question and "
                    f"a {n['answer_tokens']}-token answer; the model answers without sources.")
        if self.code == PASSAGES_LEFT_OUT:
            return (f"{n['left_out']} of {n['total']} passages did not fit in the {n['context']}-token "
                    f"context and were left out.")
        if self.code == QUESTION_TOO_LONG:
            return (f"The question and conversation alone take {n['tokens']} tokens, more than the "
                    f"{n['limit']} left beside a {n['answer_tokens']}-token answer.")
        raise ValueError(f"unknown budget note code {self.code!r}")


@dataclass
class LeftOutReason:
    """Why a passage is not in the prompt: it needed ``needs_tokens`` with ``left_tokens`` left."""

    needs_tokens: int
    left_tokens: int
    code: str = DID_NOT_FIT

    def english(self) -> str:
        return f"did not fit: needs {self.needs_tokens} tokens, {self.left_tokens} left"

    def to_json(self) -> dict[str, Any]:
        """The stored form (language-neutral): ``reason_code``, ``needs_tokens``, ``left_tokens``."""
        return {"reason_code": self.code, "needs_tokens": self.needs_tokens, "left_tokens": self.left_tokens}


def left_out_reason_english(item: dict[str, Any]) -> str:
    """A stored left-out source's reason in English (the CLI's wording). Answers stored before the
    codes carry an English ``reason`` line, which is returned as it is."""
    if item.get("reason_code") == DID_NOT_FIT:
        try:
            return LeftOutReason(int(item["needs_tokens"]), int(item["left_tokens"])).english()
        except (KeyError, TypeError, ValueError):
            return "did not fit"
    return str(item.get("reason") or "left out")


@dataclass
class GroundedPrompt:
    """What goes to ``engine.generate`` and what the user is told about it.

    ``left_out_reasons[i]`` says why ``left_out[i]`` is not in the prompt; ``notes`` what the budget
    changed (codes; :attr:`note` words them in English). ``prompt_tokens`` is the count of
    ``messages``; ``dropped_messages`` how many of the oldest conversation messages were removed so
    that a passage fits.
    """

    messages: list[dict[str, str]]
    used: list[Source]
    left_out: list[Hit]
    notes: list[BudgetNote] = field(default_factory=list)
    left_out_reasons: list[LeftOutReason] = field(default_factory=list)
    prompt_tokens: int = 0
    dropped_messages: int = 0

    @property
    def note(self) -> str:
        """The notes in English, one sentence each ("" when the budget changed nothing)."""
        return " ".join(n.english() for n in self.notes)

    def sources_json(self, question: str = "") -> list[dict[str, Any]]:
        """:func:`sources_to_json` of this prompt, with the reasons for what was left out."""
        return sources_to_json(self.used, self.left_out, reasons=self.left_out_reasons, question=question)


# -- quotes -------------------------------------------------------------------------------------------
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|(?<=[。！？；])|\n\s*\n|\n(?=\s*[-*#>\d])")
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


def _terms(text: str) -> set[str]:
    """Comparable units of ``text``: lower-cased words, and character pairs for CJK runs (no spaces there)."""
    terms: set[str] = set()
    for word in _WORD.findall(text.lower()):
        if _CJK.search(word):
            chars = [c for c in word if _CJK.match(c)]
            terms.update(a + b for a, b in zip(chars, chars[1:], strict=False))
            if len(chars) == 1:
                terms.add(chars[0])
            rest = _CJK.sub(" ", word).split()
            terms.update(w for w in rest if len(w) > 1)
        elif len(word) > 1:
            terms.add(word)
    return terms


def _clip(text: str, limit: int = QUOTE_CHARS) -> str:
    """``text`` on one line, at most ``limit`` characters, cut at a word boundary with an ellipsis."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[:limit]
    space = cut.rfind(" ")
    if space > limit * 0.6:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "…"


def make_quote(text: str, question: str = "", limit: int = QUOTE_CHARS) -> str:
    """The sentence of ``text`` sharing most terms with ``question``; else the beginning of ``text``."""
    wanted = _terms(question)
    if wanted:
        best, best_score = "", 0
        for sentence in _SENTENCE_END.split(text):
            score = len(wanted & _terms(sentence))
            if score > best_score:
                best, best_score = sentence, score
        if best_score:
            return _clip(best, limit)
    return _clip(text, limit)


# -- the prompt ---------------------------------------------------------------------------------------
def _location(hit: Hit) -> str:
    try:
        return str(hit.passage.location())
    except (AttributeError, TypeError, ValueError):
        return str(getattr(hit.passage, "path", ""))


def _source_block(number: int, hit: Hit) -> str:
    return f"[{number}] {_location(hit)}\n{hit.passage.text.strip()}"


def _user_message(question: str, blocks: list[str]) -> str:
    sources = "\n\n".join(blocks) if blocks else NO_SOURCES_TEXT
    return f"Sources:\n\n{sources}\n\nQuestion: {question.strip()}"


def _drop_oldest(turns: list[dict[str, str]]) -> list[dict[str, str]]:
    """``turns`` without its oldest exchange (a user message and the replies after it)."""
    rest = turns[1:]
    while rest and rest[0].get("role") != "user":
        rest = rest[1:]
    return rest


@dataclass
class _Selection:
    messages: list[dict[str, str]]
    used: list[Source]
    left_out: list[Hit]
    reasons: list[LeftOutReason]
    tokens: int


def _select(system: str, turns: list[dict[str, str]], question: str, hits: list[Hit],
            count_tokens: Callable[[list[dict[str, str]]], int], limit: int) -> _Selection:
    """Add passages best first while the prompt stays within ``limit`` tokens; skip those that do not fit."""
    head = [{"role": "system", "content": system}, *turns]

    def build(blocks: list[str]) -> list[dict[str, str]]:
        return [*head, {"role": "user", "content": _user_message(question, blocks)}]

    blocks: list[str] = []
    used: list[Source] = []
    left_out: list[Hit] = []
    reasons: list[LeftOutReason] = []
    tokens = count_tokens(build(blocks))
    for hit in hits:
        block = _source_block(len(used) + 1, hit)
        with_it = count_tokens(build([*blocks, block]))
        if with_it <= limit:
            blocks.append(block)
            used.append(Source(len(used) + 1, hit, make_quote(hit.passage.text, question)))
            tokens = with_it
        else:
            left_out.append(hit)
            reasons.append(LeftOutReason(with_it - tokens, max(0, limit - tokens)))
    return _Selection(build(blocks), used, left_out, reasons, tokens)


def build_grounded_prompt(conversation: list[dict[str, str]], question: str, hits: list[Hit], *,
                          count_tokens: Callable[[list[dict[str, str]]], int], context_length: int,
                          answer_tokens: int) -> GroundedPrompt:
    """Messages answering ``question`` from ``hits`` (best first) beside ``conversation`` (earlier turns).

    Budget: a passage is used only if the whole prompt with it stays within
    ``context_length - answer_tokens`` tokens as ``count_tokens`` counts them. A leading system
    message of ``conversation`` is kept (the grounding instructions are appended to it).
    """
    if context_length < 1 or answer_tokens < 0:
        raise ValueError(f"context length must be positive and answer tokens not negative, "
                         f"got {context_length} and {answer_tokens}")
    turns = [{"role": m["role"], "content": m["content"]} for m in conversation]
    system = GROUNDING_INSTRUCTIONS
    if turns and turns[0]["role"] == "system":
        system = f"{turns.pop(0)['content'].rstrip()}\n\n{GROUNDING_INSTRUCTIONS}"
    unique: list[Hit] = []
    seen: set[Any] = set()
    for hit in hits:  # the same passage found twice (two bases, two queries) is given once
        key = getattr(hit.passage, "id", id(hit))
        if key not in seen:
            seen.add(key)
            unique.append(hit)
    limit = context_length - answer_tokens

    full = _select(system, turns, question, unique, count_tokens, limit)
    chosen, dropped = full, 0
    if unique and not full.used:  # not even one passage fits: drop the oldest turns until one does
        shorter = turns
        while shorter and not chosen.used:
            shorter = _drop_oldest(shorter)
            chosen = _select(system, shorter, question, unique, count_tokens, limit)
        if chosen.used:
            dropped = len(turns) - len(shorter)
        else:
            chosen = full  # dropping the conversation did not help: keep it

    notes: list[BudgetNote] = []
    if dropped:
        notes.append(BudgetNote(DROPPED_MESSAGES, {"messages": dropped}))
    if unique and not chosen.used:
        notes.append(BudgetNote(NOTHING_FITS, {"context": context_length, "answer_tokens": answer_tokens}))
    elif chosen.left_out:
        notes.append(BudgetNote(PASSAGES_LEFT_OUT, {"left_out": len(chosen.left_out), "total": len(unique),
                                                    "context": context_length}))
    if chosen.tokens > limit:
        notes.append(BudgetNote(QUESTION_TOO_LONG, {"tokens": chosen.tokens, "limit": limit,
                                                    "answer_tokens": answer_tokens}))
    return GroundedPrompt(chosen.messages, chosen.used, chosen.left_out, notes, chosen.reasons,
                          chosen.tokens, dropped)


# -- citations ------------------------------------------------------------------------------------------
# One reading of the model's citations for counting them (cited_numbers) and for linking them in the
# GUI (link_citations): [1], [2, 3], [1][4], 【1】, ［1］, and ranges [1-3], [1–3], 【1-3】, [1]–[3].
_DASH = r"(?:[-–—~～〜－]|至|到|to)"
_LIST = r"(?:[,，、;；]|and|和)"
_OPENING, _CLOSING = r"\[［【", r"\]］】"  # for character classes
_NUMBER = r"\d{1,4}"
_CITATION = re.compile(
    rf"([{_OPENING}])(\s*{_NUMBER}(?:\s*(?:{_DASH}|{_LIST})\s*{_NUMBER})*\s*)([{_CLOSING}])"
    rf"(?:\s*{_DASH}\s*[{_OPENING}]\s*({_NUMBER})\s*[{_CLOSING}])?"  # [1]–[3]: a range over two brackets
    r"(?!\()")  # [1](url) is the model's own Markdown link
_PIECE = re.compile(rf"({_NUMBER})(?:\s*{_DASH}\s*({_NUMBER}))?")  # a number or a range of a citation
_FENCED = re.compile(r"```.*?(?:```|$)", re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_FENCE_LINE = re.compile(r"^ {0,3}(```|~~~)")
MAX_RANGE = 50  # "[1-3]" cites 1, 2, 3; a "range" wider than this is not a citation


def _span(a: int, b: int) -> list[int]:
    lo, hi = min(a, b), max(a, b)
    return list(range(lo, hi + 1)) if hi - lo <= MAX_RANGE else []


def _citation_numbers(match: re.Match[str]) -> tuple[list[int], bool]:
    """The numbers one citation stands for, in its order and once each, and whether it holds a range."""
    body, end = match.group(2), match.group(4)
    numbers: list[int] = []
    ranged = end is not None
    for piece in _PIECE.finditer(body):
        if piece.group(2) is None:
            numbers.append(int(piece.group(1)))
        else:
            numbers += _span(int(piece.group(1)), int(piece.group(2)))
            ranged = True
    if end is not None:  # [a]–[b]: from the bracket's last number to b
        numbers = [*numbers[:-1], *_span(numbers[-1], int(end))]
    return list(dict.fromkeys(numbers)), ranged


def cited_numbers(answer: str, limit: int | None = None) -> list[int]:
    """Source numbers cited in ``answer`` ([1], [2, 3], [1][4], [1-3], 【1-3】, [1]–[3]), sorted, unique.

    Every number of a range counts. ``limit`` = how many sources there are: only 1..limit count (a
    model may invent [7]); without it every positive number counts. Brackets inside code (``a[1]``)
    are not citations.
    """
    text = _INLINE_CODE.sub(" ", _FENCED.sub(" ", answer))
    found: set[int] = set()
    for match in _CITATION.finditer(text):
        found.update(_citation_numbers(match)[0])
    return sorted(n for n in found if n >= 1 and (limit is None or n <= limit))


def link_citations(markdown: str, numbers: set[int], scheme: str = "cite") -> str:
    """The answer's Markdown with each citation number that has a source (in ``numbers``) made a link
    ``scheme:n`` — the forms :func:`cited_numbers` reads.

    Why Markdown and not HTML: Qt renders the Markdown itself, so the links must be Markdown links.
    ``[n]`` becomes one link (a bigger target); in ``[1, 2]`` each number is a link; a range is
    written out, ``[1-3]`` → ``[1][2][3]`` (``【1-3】`` → ``【1】【2】【3】``), so every source it
    cites can be clicked. Code blocks and spans are left alone, and so are ``[n](url)`` links and
    ``[n]: url`` reference definitions the model wrote itself. Numbers without a source stay text.
    """
    if not numbers:
        return markdown

    def esc(bracket: str) -> str:
        return "\\" + bracket if bracket in "[]" else bracket

    def one(opening: str, n: int, closing: str) -> str:
        shown = f"{esc(opening)}{n}{esc(closing)}"
        return f"[{shown}]({scheme}:{n})" if n in numbers else shown

    def replace(m: re.Match[str]) -> str:
        opening, inner, closing = m.group(1), m.group(2), m.group(3)
        definition = m.string[m.end():m.end() + 1] == ":" and not m.string[:m.start()].strip()
        found, ranged = _citation_numbers(m)
        if definition or not any(n in numbers for n in found):
            return m.group(0)
        if ranged:
            return "".join(one(opening, n, closing) for n in found)
        if inner.strip().isdigit():
            return one(opening, found[0], closing)
        linked = re.sub(r"\d+", lambda d: f"[{d.group(0)}]({scheme}:{d.group(0)})"
                        if int(d.group(0)) in numbers else d.group(0), inner)
        return esc(opening) + linked + esc(closing)

    out: list[str] = []
    fenced = False
    for line in markdown.split("\n"):
        if _FENCE_LINE.match(line):
            fenced = not fenced
            out.append(line)
            continue
        if fenced:
            out.append(line)
            continue
        pieces, last = [], 0
        for code in _CODE_SPAN.finditer(line):
            pieces.append(_CITATION.sub(replace, line[last:code.start()]))
            pieces.append(code.group(0))
            last = code.end()
        pieces.append(_CITATION.sub(replace, line[last:]))
        out.append("".join(pieces))
    return "\n".join(out)


# -- stored form ----------------------------------------------------------------------------------------
def _hit_json(hit: Hit, quote: str) -> dict[str, Any]:
    p = hit.passage
    return {"passage_id": getattr(p, "id", None), "path": str(getattr(p, "path", "")), "location": _location(hit),
            "quote": quote, "page": getattr(p, "page", None), "line": getattr(p, "line", None),
            "heading": getattr(p, "heading", "") or "", "score": float(getattr(hit, "score", 0.0) or 0.0),
            "fts_rank": getattr(hit, "fts_rank", None), "dense_rank": getattr(hit, "dense_rank", None)}


def sources_to_json(used: list[Source], left_out: list[Hit], *, reasons: list[LeftOutReason] | None = None,
                    question: str = "") -> list[dict[str, Any]]:
    """The sources as stored with the assistant message: used ones numbered, then those left out.

    Each item: ``n`` (the cited number; None when left out), ``passage_id``, ``path``, ``location``,
    ``quote``, ``used``, plus ``page``, ``line``, ``heading``, ``score``, ``fts_rank``, ``dense_rank`` and,
    for left-out passages, the reason as a code with its numbers (:meth:`LeftOutReason.to_json`;
    ``reason_code`` "left_out" when none is known) - enough to show and open the citation even after
    its knowledge base is gone, and to word the reason in the reader's language.
    """
    items = []
    for source in used:
        quote = source.quote or make_quote(source.hit.passage.text, question)
        items.append({"n": source.number, **_hit_json(source.hit, quote), "used": True})
    for i, hit in enumerate(left_out):
        item = {"n": None, **_hit_json(hit, make_quote(hit.passage.text, question)), "used": False}
        if reasons is not None and i < len(reasons):
            item.update(reasons[i].to_json())
        else:
            item["reason_code"] = "left_out"
        items.append(item)
    return items
