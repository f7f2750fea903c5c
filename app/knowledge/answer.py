"""Grounded answers: the retrieved passages that fit beside the conversation, numbered for citation.

Why a budget and not "all passages": small ternary models run with 4K-32K tokens of context, so the
prompt can hold only a few passages next to the conversation and the answer. The best passages go
first, as many as fit; whatever does not fit is listed in ``left_out`` with its reason, and if not
even one passage fits the oldest conversation turns are dropped (said in ``note``). Nothing is ever
cut off silently. The instructions are in English but ask for an answer in the question's language,
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


@dataclass
class GroundedPrompt:
    """What goes to ``engine.generate`` and what the user is told about it.

    ``left_out_reasons[i]`` says why ``left_out[i]`` is not in the prompt. ``prompt_tokens`` is the
    count of ``messages``; ``dropped_messages`` how many of the oldest conversation messages were
    removed so that a passage fits.
    """

    messages: list[dict[str, str]]
    used: list[Source]
    left_out: list[Hit]
    note: str
    left_out_reasons: list[str] = field(default_factory=list)
    prompt_tokens: int = 0
    dropped_messages: int = 0

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
    reasons: list[str]
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
    reasons: list[str] = []
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
            reasons.append(f"did not fit: needs {with_it - tokens} tokens, {max(0, limit - tokens)} left")
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

    notes = []
    if dropped:
        notes.append(f"The {dropped} oldest messages of the conversation were left out so that a source fits.")
    if unique and not chosen.used:
        notes.append(f"No source passage fits in the {context_length}-token context beside the question and "
                     f"a {answer_tokens}-token answer; the model answers without sources.")
    elif chosen.left_out:
        notes.append(f"{len(chosen.left_out)} of {len(unique)} passages did not fit in the {context_length}-token "
                     f"context and were left out.")
    if chosen.tokens > limit:
        notes.append(f"The question and conversation alone take {chosen.tokens} tokens, more than the "
                     f"{limit} left beside a {answer_tokens}-token answer.")
    return GroundedPrompt(chosen.messages, chosen.used, chosen.left_out, " ".join(notes), chosen.reasons,
                          chosen.tokens, dropped)


# -- citations ------------------------------------------------------------------------------------------
_FENCED = re.compile(r"```.*?(?:```|$)", re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_BRACKETS = re.compile(r"[\[［【]\s*(\d+(?:\s*(?:[-–~]|[,，、;]|and)\s*\d+)*)\s*[\]］】]")
_RANGE = re.compile(r"(\d+)\s*[-–~]\s*(\d+)")
MAX_RANGE = 50  # "[1-3]" cites 1, 2, 3; a "range" wider than this is not a citation


def cited_numbers(answer: str, limit: int | None = None) -> list[int]:
    """Source numbers cited in ``answer`` ([1], [2, 3], [1][4], [1-3], 【1】), sorted, unique.

    ``limit`` = how many sources there are: only 1..limit count (a model may invent [7]); without
    it every positive number counts. Brackets inside code (``a[1]``) are not citations.
    """
    text = _INLINE_CODE.sub(" ", _FENCED.sub(" ", answer))
    found: set[int] = set()
    for match in _BRACKETS.finditer(text):
        body = match.group(1)
        for a, b in _RANGE.findall(body):
            lo, hi = int(a), int(b)
            if lo <= hi and hi - lo <= MAX_RANGE:
                found.update(range(lo, hi + 1))
        found.update(int(n) for n in re.findall(r"\d+", _RANGE.sub(" ", body)))
    return sorted(n for n in found if n >= 1 and (limit is None or n <= limit))


# -- stored form ----------------------------------------------------------------------------------------
def _hit_json(hit: Hit, quote: str) -> dict[str, Any]:
    p = hit.passage
    return {"passage_id": getattr(p, "id", None), "path": str(getattr(p, "path", "")), "location": _location(hit),
            "quote": quote, "page": getattr(p, "page", None), "line": getattr(p, "line", None),
            "heading": getattr(p, "heading", "") or "", "score": float(getattr(hit, "score", 0.0) or 0.0),
            "fts_rank": getattr(hit, "fts_rank", None), "dense_rank": getattr(hit, "dense_rank", None)}


def sources_to_json(used: list[Source], left_out: list[Hit], *, reasons: list[str] | None = None,
                    question: str = "") -> list[dict[str, Any]]:
    """The sources as stored with the assistant message: used ones numbered, then those left out.

    Each item: ``n`` (the cited number; None when left out), ``passage_id``, ``path``, ``location``,
    ``quote``, ``used``, plus ``page``, ``line``, ``heading``, ``score``, ``fts_rank``, ``dense_rank`` and,
    for left-out passages,
    ``reason`` - enough to show and open the citation even after its knowledge base is gone.
    """
    items = []
    for source in used:
        quote = source.quote or make_quote(source.hit.passage.text, question)
        items.append({"n": source.number, **_hit_json(source.hit, quote), "used": True})
    for i, hit in enumerate(left_out):
        item = {"n": None, **_hit_json(hit, make_quote(hit.passage.text, question)), "used": False}
        item["reason"] = reasons[i] if reasons is not None and i < len(reasons) else "left out"
        items.append(item)
    return items
