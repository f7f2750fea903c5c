"""Splitting a document into passages that fit beside a conversation in a 4K-32K context.

Why ~200 tokens: a 4K context holds the question, the conversation and still 5-8 passages; a
32K context holds dozens. Sizes are estimated without a tokenizer (the index must not depend on
which chat model is loaded): one CJK character ~ one token, ~4 other characters ~ one token.
Passages end on paragraph, then sentence boundaries (never inside a word unless one "sentence"
is itself too long), overlap by about one sentence so an answer cut by a boundary is still whole
in one of them, and start afresh at every heading so a passage belongs to one section.
Each passage knows where it came from: PDF page, heading path ("Install > Linux"), start line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.core.documents import Document

TARGET_TOKENS = 200  # a passage is closed once it reaches this size...
MAX_TOKENS = 300  # ...and never grows past this (a longer paragraph is split by sentences)
OVERLAP_TOKENS = 40  # the tail of a passage repeated at the head of the next one (size breaks only)

_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]")
# A sentence ends at . ! ? (followed by space) or at CJK full stops, which need no space.
_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+|(?<=[。！？；])")
_MD_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.+?)\s*#*\s*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_CODE_DEF = re.compile(r"^(?:export\s+|pub(?:\(\w+\))?\s+|public\s+|private\s+|static\s+|async\s+)*"
                       r"(def|class|function|fn|func|struct|enum|impl|trait|interface|module|type)\s+([\w.:<>]+)")


@dataclass(frozen=True)
class Passage:
    """A piece of a document small enough to quote to the model, with where it starts."""

    ordinal: int  # 0-based position in the file
    text: str
    page: int | None  # 1-based PDF page where the passage starts (None for non-PDF)
    heading: str  # nearest heading path ("Install > Linux"), "" if none
    line: int | None  # 1-based start line for text/markdown/source code (None for PDF/docx/html)


def estimate_tokens(text: str) -> int:
    """Tokens ``text`` takes in a typical BPE vocabulary: CJK chars count 1, other chars 1/4."""
    cjk = len(_CJK.findall(text))
    other = len(text) - cjk - text.count(" ") // 2
    return cjk + (other + 3) // 4


@dataclass
class _Unit:
    """A paragraph (or a piece of one) that is never split further; passages are runs of units."""

    text: str
    page: int | None
    heading: str
    line: int | None
    tokens: int
    joiner: str  # put between this unit and the one before it in the same passage
    section: int  # changes at every heading / forced break: a passage never spans two sections


def split_document(doc: Document) -> list[Passage]:
    """The passages of ``doc`` in reading order (empty if it has no text)."""
    if doc.kind == "pdf" and doc.page_texts:
        units = _pdf_units(doc.page_texts)
    elif doc.kind == "markdown":
        units = _markdown_units(doc.text)
    elif doc.kind == "code":
        units = _code_units(doc.text)
    elif doc.kind in ("html", "docx"):
        units = _heading_list_units(doc.text, doc.headings)
    else:
        units = _plain_units(doc.text, with_lines=True)
    return _pack(units, code=doc.kind == "code")


# -- blocks ------------------------------------------------------------------------------------
def _paragraphs(lines: list[str], first_line: int) -> list[tuple[str, int]]:
    """Blank-line separated paragraphs of ``lines`` as (text, 1-based start line)."""
    out: list[tuple[str, int]] = []
    current: list[str] = []
    start = first_line
    for i, line in enumerate(lines):
        if line.strip():
            if not current:
                start = first_line + i
            current.append(line.rstrip())
        elif current:
            out.append(("\n".join(current), start))
            current = []
    if current:
        out.append(("\n".join(current), start))
    return out


def _units_of_paragraph(text: str, page: int | None, heading: str, line: int | None, section: int,
                        *, code: bool = False) -> list[_Unit]:
    """One unit, or several when the paragraph is longer than a passage may be."""
    tokens = estimate_tokens(text)
    if tokens <= MAX_TOKENS // 2 or (tokens <= MAX_TOKENS and code):
        return [_Unit(text, page, heading, line, tokens, "\n\n", section)]
    pieces = _split_lines(text) if code else _split_sentences(text)
    units: list[_Unit] = []
    offset = 0
    for n, piece in enumerate(pieces):
        at = text.find(piece, offset)
        at = offset if at < 0 else at
        offset = at + len(piece)
        piece_line = None if line is None else line + text.count("\n", 0, at)
        joiner = "\n\n" if n == 0 else ("\n" if code else " ")
        units.append(_Unit(piece, page, heading, piece_line, estimate_tokens(piece), joiner, section))
    return units


def _split_sentences(text: str) -> list[str]:
    """Sentences; a "sentence" still over half a passage is cut at spaces (or anywhere, for CJK)."""
    out: list[str] = []
    for sentence in _SENTENCE_END.split(text):
        sentence = sentence.strip()
        if not sentence:
            continue
        if estimate_tokens(sentence) <= MAX_TOKENS // 2:
            out.append(sentence)
            continue
        out.extend(_hard_split(sentence, MAX_TOKENS // 2))
    return out


def _hard_split(text: str, budget: int) -> list[str]:
    """Cut ``text`` into runs of at most ``budget`` estimated tokens, at spaces where there are any."""
    out: list[str] = []
    words = re.findall(r"\S+\s*", text)
    current = ""
    for word in words:
        if estimate_tokens(word) > budget:  # one huge "word" (CJK without spaces, a long URL)
            if current:
                out.append(current.strip())
                current = ""
            step = max(1, budget if _CJK.search(word) else budget * 4)
            out.extend(word[i:i + step].strip() for i in range(0, len(word), step) if word[i:i + step].strip())
            continue
        if current and estimate_tokens(current + word) > budget:
            out.append(current.strip())
            current = ""
        current += word
    if current.strip():
        out.append(current.strip())
    return out


def _split_lines(text: str) -> list[str]:
    """A long code block in runs of whole lines of at most half a passage."""
    out: list[str] = []
    current: list[str] = []
    size = 0
    for line in text.split("\n"):
        t = estimate_tokens(line) + 1
        if current and size + t > MAX_TOKENS // 2:
            out.append("\n".join(current))
            current, size = [], 0
        if t > MAX_TOKENS // 2:  # a single enormous line (minified code)
            out.extend(_hard_split(line, MAX_TOKENS // 2))
            continue
        current.append(line)
        size += t
    if current:
        out.append("\n".join(current))
    return [piece for piece in out if piece.strip()]


def _plain_units(text: str, *, with_lines: bool, page: int | None = None, heading: str = "",
                 section: int = 0) -> list[_Unit]:
    units: list[_Unit] = []
    for para, line in _paragraphs(text.split("\n"), 1):
        units += _units_of_paragraph(para, page, heading, line if with_lines else None, section)
    return units


def _pdf_units(page_texts: list[str]) -> list[_Unit]:
    """PDF pages: pypdf gives one line per text line, so a paragraph is a run of non-blank lines.

    Every page starts a new passage (``section`` = page number): a citation's page must be the page
    the quoted text is on, even when that leaves a short passage at the end of a page.
    """
    units: list[_Unit] = []
    for number, page_text in enumerate(page_texts, 1):
        if page_text:
            units += _plain_units(page_text, with_lines=False, page=number, section=number)
    return units


def _markdown_units(text: str) -> list[_Unit]:
    units: list[_Unit] = []
    path: list[tuple[int, str]] = []
    section = 0
    block: list[str] = []
    block_start = 1
    in_fence = False

    def flush() -> None:
        nonlocal block
        heading = " > ".join(title for _, title in path)
        for para, line in _paragraphs(block, block_start):
            units.extend(_units_of_paragraph(para, None, heading, line, section, code=para.lstrip().startswith("```")))
        block = []

    for i, line in enumerate(text.split("\n"), 1):
        if _FENCE.match(line):
            in_fence = not in_fence
        m = None if in_fence else _MD_HEADING.match(line)
        if m:
            flush()
            level, title = len(m.group(1)), m.group(2).strip()
            path = [(lv, t) for lv, t in path if lv < level] + [(level, title)]
            section += 1
            block_start = i + 1
            continue
        if not block:
            block_start = i
        block.append(line)
    flush()
    return units


def _code_units(text: str) -> list[_Unit]:
    """Source code: blocks split on blank lines; a top-level definition starts a new section."""
    units: list[_Unit] = []
    section = 0
    heading = ""
    for para, line in _paragraphs(text.split("\n"), 1):
        first = para.split("\n", 1)[0]
        m = _CODE_DEF.match(first) if first[:1].strip() else None
        if m:
            section += 1
            heading = f"{m.group(1)} {m.group(2).rstrip(':')}"
        units += _units_of_paragraph(para, None, heading, line, section, code=True)
    return units


def _heading_list_units(text: str, headings: list[tuple[int, str]]) -> list[_Unit]:
    """html/docx: lines are paragraphs; a line equal to the next expected heading opens a section."""
    units: list[_Unit] = []
    path: list[tuple[int, str]] = []
    pending = list(headings)
    section = 0
    for line in text.split("\n"):
        stripped = re.sub(r"\s+", " ", line).strip()
        if not stripped:
            continue
        if pending and stripped == pending[0][1]:
            level, title = pending.pop(0)
            path = [(lv, t) for lv, t in path if lv < level] + [(level, title)]
            section += 1
            continue
        units += _units_of_paragraph(line.strip(), None, " > ".join(t for _, t in path), None, section)
    return units


# -- packing -----------------------------------------------------------------------------------
def _pack(units: list[_Unit], *, code: bool) -> list[Passage]:
    """Runs of units up to :data:`TARGET_TOKENS`, with a sentence or so of overlap after size breaks."""
    passages: list[Passage] = []
    current: list[_Unit] = []
    size = 0

    def emit() -> None:
        text = current[0].text + "".join(u.joiner + u.text for u in current[1:])
        first = current[0]
        passages.append(Passage(len(passages), text.strip(), first.page, first.heading, first.line))

    for unit in units:
        if current:
            new_section = unit.section != current[-1].section
            too_big = size + unit.tokens > MAX_TOKENS or size >= TARGET_TOKENS
            if new_section or too_big:
                emit()
                overlap = [] if new_section else _overlap(current, code)
                current = overlap
                size = sum(u.tokens for u in current)
        current.append(unit)
        size += unit.tokens
    if current:
        emit()
    return passages


def _overlap(previous: list[_Unit], code: bool) -> list[_Unit]:
    """The last sentence (or code line run) of a closed passage, if it is short enough to repeat."""
    last = previous[-1]
    pieces = _split_lines(last.text) if code else _split_sentences(last.text)
    if not pieces:
        return []
    tail = pieces[-1]
    tokens = estimate_tokens(tail)
    if tokens > OVERLAP_TOKENS or tail == previous[0].text:
        return []
    line = None if last.line is None else last.line + last.text.count("\n", 0, max(0, last.text.rfind(tail)))
    return [_Unit(tail, last.page, last.heading, line, tokens, "\n\n", last.section)]
