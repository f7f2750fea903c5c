import os

import pytest

from app.core.documents import DocumentError, decode_text, extract_text, html_to_text
from tests.app.pdf_samples import blank_pdf, text_pdf


def _code(path, **kw):
    with pytest.raises(DocumentError) as e:
        extract_text(path, **kw)
    return e.value.code, str(e.value)


def test_text_encodings(tmp_path):
    (tmp_path / "u.txt").write_text("héllo 你好", encoding="utf-8")
    (tmp_path / "g.txt").write_bytes("这是一个用国标编码保存的中文文件，里面有很多汉字。".encode("gb18030") * 4)
    (tmp_path / "b.md").write_bytes("\ufeff# Title\nbody".encode("utf-16"))
    assert extract_text(tmp_path / "u.txt").text == "héllo 你好"
    g = extract_text(tmp_path / "g.txt")
    assert "国标编码" in g.text and g.encoding.lower().replace("_", "") in ("gb18030", "gbk", "gb2312")
    md = extract_text(tmp_path / "b.md")
    assert md.kind == "markdown" and "# Title" in md.text


def test_binary_renamed_txt_is_refused(tmp_path):
    (tmp_path / "photo.txt").write_bytes(bytes(range(256)) * 64)
    code, msg = _code(tmp_path / "photo.txt")
    assert code == "binary" and "not a text file" in msg
    with pytest.raises(DocumentError):
        decode_text(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")


def test_huge_file_refused_before_reading(tmp_path):
    big = tmp_path / "big.txt"
    with open(big, "wb") as f:  # sparse: 500 MB of nothing on disk
        f.truncate(500 * 1024 * 1024)
    code, msg = _code(big)
    assert code == "too_large" and "500 MB" in msg and "100 MB" in msg


def test_missing_unsupported_and_empty(tmp_path):
    assert _code(tmp_path / "nope.txt")[0] == "missing"
    (tmp_path / "a.exe").write_bytes(b"MZ")
    assert _code(tmp_path / "a.exe")[0] == "unsupported"
    (tmp_path / "e.txt").write_text("  \n ", encoding="utf-8")
    assert _code(tmp_path / "e.txt")[0] == "empty"


def test_html_strips_scripts_and_styles(tmp_path):
    html = ("<html><head><title>T</title><style>body{color:red}</style><script>alert('x')</script></head>"
            "<body><h1>Heading</h1><p>First &amp; second</p><ul><li>one</li><li>two</li></ul></body></html>")
    text = html_to_text(html)
    assert "alert" not in text and "color" not in text
    assert "Heading" in text and "First & second" in text and "one\n" in text
    (tmp_path / "p.html").write_text(html, encoding="utf-8")
    assert extract_text(tmp_path / "p.html").kind == "html"


def test_pdf_text_encrypted_and_scanned(tmp_path):
    doc = extract_text(text_pdf(tmp_path / "t.pdf", ["Ternary weights are -1, 0 or +1.", "Second line"]))
    assert doc.kind == "pdf" and doc.pages == 1 and "Ternary weights" in doc.text and "Second line" in doc.text
    code, msg = _code(blank_pdf(tmp_path / "enc.pdf", password="secret"))
    assert code == "encrypted" and "password" in msg
    code, msg = _code(blank_pdf(tmp_path / "scan.pdf"))
    assert code == "no_text" and "scanned PDF" in msg
    (tmp_path / "bad.pdf").write_bytes(b"%PDF-1.4\n garbage")
    assert _code(tmp_path / "bad.pdf")[0] == "corrupt"


def test_docx_good_and_corrupt(tmp_path):
    import docx

    d = docx.Document()
    d.add_paragraph("Quarterly report")
    t = d.add_table(rows=1, cols=2)
    t.rows[0].cells[0].text, t.rows[0].cells[1].text = "revenue", "42"
    d.save(tmp_path / "r.docx")
    doc = extract_text(tmp_path / "r.docx")
    assert "Quarterly report" in doc.text and "revenue | 42" in doc.text
    (tmp_path / "bad.docx").write_bytes(os.urandom(2048))
    code, msg = _code(tmp_path / "bad.docx")
    assert code == "corrupt" and "damaged" in msg
