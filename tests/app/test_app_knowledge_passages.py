"""Splitting documents into passages: sizes, boundaries, overlap, and where each passage starts."""

from pathlib import Path

import docx

from app.core.documents import Document, extract_text
from app.knowledge.passages import MAX_TOKENS, TARGET_TOKENS, estimate_tokens, split_document
from tests.app.pdf_samples import pages_pdf


def _doc(kind, text, **kw):
    return Document(Path(f"f.{kind}"), kind, text, **kw)


def test_token_estimate_counts_cjk_denser():
    assert estimate_tokens("a" * 400) == 100
    assert estimate_tokens("知" * 100) == 100
    assert 140 <= estimate_tokens("知" * 100 + " word" * 100) <= 230


def test_long_text_splits_on_sentences_within_size_with_overlap():
    sentences = [f"Sentence {i} says something about topic {i % 7} in plain words." for i in range(200)]
    text = " ".join(sentences[:100]) + "\n\n" + " ".join(sentences[100:])
    passages = split_document(_doc("text", text))
    assert len(passages) >= 8 and [p.ordinal for p in passages] == list(range(len(passages)))
    for p in passages:
        assert estimate_tokens(p.text) <= MAX_TOKENS and p.text.endswith(".")
        assert p.text.startswith("Sentence")  # never cut inside a sentence
    assert all(estimate_tokens(p.text) >= TARGET_TOKENS * 0.5 for p in passages[:-1])
    for a, b in zip(passages, passages[1:], strict=False):  # one sentence of overlap after a size break
        if b.line == a.line:
            assert a.text.rsplit(". ", 1)[-1].rstrip(".") in b.text.split(". ", 1)[0] + "."
    assert passages[0].line == 1 and passages[-1].line == 3
    joined = " ".join(p.text for p in passages)
    assert all(s in joined for s in sentences)


def test_chinese_without_spaces_is_split_by_its_full_stops():
    text = "".join(f"第{i}句话讲的是知识库的检索方法和向量存储。" for i in range(120))
    passages = split_document(_doc("text", text))
    assert len(passages) > 5
    assert all(estimate_tokens(p.text) <= MAX_TOKENS and p.text.endswith("。") for p in passages)


def test_markdown_headings_and_lines():
    text = ("# Guide\n\nIntro.\n\n## Install\n\n### Linux\n\nUse apt.\n\n```\n# not a heading\nmake\n```\n\n"
            "### Windows\n\nRun setup.\n\n## Use\n\nType a question.\n")
    passages = split_document(_doc("markdown", text))
    got = [(p.heading, p.line, p.text.split("\n")[0]) for p in passages]
    assert got == [("Guide", 3, "Intro."), ("Guide > Install > Linux", 9, "Use apt."),
                   ("Guide > Install > Windows", 18, "Run setup."), ("Guide > Use", 22, "Type a question.")]
    assert "# not a heading" in passages[1].text and all(p.page is None for p in passages)


def test_code_splits_at_definitions_with_start_lines():
    body = "\n".join(f"    x{i} = {i}" for i in range(5))
    text = f"import os\n\n\ndef first():\n{body}\n\n\nclass Second:\n    pass\n\n\nasync def third():\n    return 1\n"
    passages = split_document(_doc("code", text))
    assert [(p.heading, p.line) for p in passages] == [("", 1), ("def first", 4), ("class Second", 12),
                                                       ("def third", 16)]
    long = "\n".join(f"    value_{i} = compute_something({i}, {i + 1})" for i in range(300))
    big = split_document(_doc("code", f"def huge():\n{long}\n"))
    assert len(big) > 3 and all(estimate_tokens(p.text) <= MAX_TOKENS for p in big)
    assert all(p.heading == "def huge" for p in big) and big[1].line > big[0].line


def test_pdf_passages_know_their_page(tmp_path):
    pages = [[f"Page {n} line {i} about the subject of chapter {n}." for i in range(8)] for n in range(1, 4)]
    doc = extract_text(pages_pdf(tmp_path / "m.pdf", pages))
    assert doc.pages == 3 and len(doc.page_texts) == 3 and "Page 2 line 0" in doc.page_texts[1]
    passages = split_document(doc)
    assert [p.page for p in passages] == [1, 2, 3] and all(p.line is None for p in passages)
    assert passages[1].text.startswith("Page 2 line 0")


def test_html_and_docx_headings(tmp_path):
    (tmp_path / "p.html").write_text("<h1>Top</h1><p>Alpha.</p><h2>Sub</h2><p>Beta.</p><h1>Next</h1><p>Gamma.</p>",
                                     encoding="utf-8")
    html = extract_text(tmp_path / "p.html")
    assert html.headings == [(1, "Top"), (2, "Sub"), (1, "Next")]
    assert [(p.heading, p.text) for p in split_document(html)] == [("Top", "Alpha."), ("Top > Sub", "Beta."),
                                                                    ("Next", "Gamma.")]
    d = docx.Document()
    d.add_paragraph("Chapter", style="Heading 1")
    d.add_paragraph("Body text.")
    d.add_paragraph("Part", style="Heading 2")
    d.add_paragraph("More text.")
    d.save(str(tmp_path / "w.docx"))
    word = extract_text(tmp_path / "w.docx")
    assert word.headings == [(1, "Chapter"), (2, "Part")]
    assert [(p.heading, p.text, p.line) for p in split_document(word)] == [
        ("Chapter", "Body text.", None), ("Chapter > Part", "More text.", None)]


def test_code_suffixes_read_as_code_and_binary_refused(tmp_path):
    (tmp_path / "m.rs").write_text("fn main() {}\n", encoding="utf-8")
    assert extract_text(tmp_path / "m.rs").kind == "code"
    (tmp_path / "x.py").write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00")
    try:
        extract_text(tmp_path / "x.py")
    except Exception as exc:  # noqa: BLE001
        assert getattr(exc, "code", "") == "binary"
    else:
        raise AssertionError("a binary .py was read as text")
