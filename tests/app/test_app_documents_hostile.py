"""Hostile documents: bombs, folders, FIFOs, devices and BOM-less UTF-16 (issue 26, items 14 and 17).

Every bomb is built here and stays small on disk (< 1 MB); each case must end in a
:class:`DocumentError` with a specific code (or the right text), fast, and without hanging.
"""

from __future__ import annotations

import io
import os
import threading
import time
import zipfile
import zlib
from pathlib import Path

import pytest

from app.core import documents
from app.core.documents import DocumentError, extract_text

posix_only = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")


def _code(path: Path) -> tuple[str, str]:
    with pytest.raises(DocumentError) as e:
        extract_text(path)
    return e.value.code, str(e.value)


# -- zip / docx bombs --------------------------------------------------------------------------
def _docx_bytes(text: str = "hello") -> bytes:
    import docx

    d = docx.Document()
    d.add_paragraph(text)
    buf = io.BytesIO()
    d.save(buf)
    return buf.getvalue()


def docx_bomb(path: Path, unpacked_mb: int = 300, members: int = 1) -> Path:
    """A real .docx plus members of zeros: ~1 KB on disk per 1 MB unpacked."""
    good = zipfile.ZipFile(io.BytesIO(_docx_bytes()))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for info in good.infolist():
            z.writestr(info.filename, good.read(info.filename))
        per = unpacked_mb // members
        for k in range(members):
            with z.open(f"word/media/pad{k}.bin", "w", force_zip64=True) as m:
                for _ in range(per):
                    m.write(bytes(1 << 20))
    return path


def docx_forged_sizes(path: Path, unpacked_mb: int = 300) -> Path:
    """A bomb whose central directory *declares* a tiny size for the big member."""
    docx_bomb(path, unpacked_mb)
    data = bytearray(path.read_bytes())
    name = b"word/media/pad0.bin"
    # patch every central-directory record of the pad member: uncompressed size (offset 24) = 1000
    pos = 0
    while (pos := data.find(b"PK\x01\x02", pos)) >= 0:
        name_len = int.from_bytes(data[pos + 28: pos + 30], "little")
        if bytes(data[pos + 46: pos + 46 + name_len]) == name:
            data[pos + 24: pos + 28] = (1000).to_bytes(4, "little")
        pos += 4
    path.write_bytes(bytes(data))
    return path


def test_docx_bomb_is_too_large_when_unpacked(tmp_path):
    bomb = docx_bomb(tmp_path / "bomb.docx", unpacked_mb=300)
    assert bomb.stat().st_size < 1024 * 1024
    t0 = time.monotonic()
    code, msg = _code(bomb)
    assert code == "too_large_unpacked" and "too large when unpacked" in msg and "bomb.docx" in msg
    assert time.monotonic() - t0 < 5  # refused from the declared sizes, nothing inflated


def test_docx_bomb_split_over_many_members(tmp_path):
    code, _ = _code(docx_bomb(tmp_path / "many.docx", unpacked_mb=300, members=30))
    assert code == "too_large_unpacked"


def test_docx_with_forged_small_sizes_is_not_inflated(tmp_path, monkeypatch):
    """Declared sizes lie; the counting read stops at the limit (small here to keep the test fast)."""
    monkeypatch.setattr(documents, "MAX_UNPACKED_BYTES", 8 * 1024 * 1024)
    code, msg = _code(docx_forged_sizes(tmp_path / "forged.docx", unpacked_mb=20))
    assert code in ("too_large_unpacked", "corrupt"), msg
    assert "Traceback" not in msg


def test_docx_with_too_many_members(tmp_path):
    path = tmp_path / "members.docx"
    good = zipfile.ZipFile(io.BytesIO(_docx_bytes()))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for info in good.infolist():
            z.writestr(info.filename, good.read(info.filename))
        for k in range(documents.MAX_DOCX_MEMBERS + 1):
            z.writestr(f"x/{k}", b"")
    assert _code(path)[0] == "too_large_unpacked"


def test_normal_docx_still_reads(tmp_path):
    path = tmp_path / "ok.docx"
    path.write_bytes(_docx_bytes("Quarterly report 你好"))
    assert "Quarterly report 你好" in extract_text(path).text


# -- PDF bombs ---------------------------------------------------------------------------------
def _pdf_with_streams(path: Path, streams: list[bytes]) -> Path:
    """A PDF with one page per (already flate-compressed) content stream, xref computed."""
    n = len(streams)
    objs: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>",
                         b"<< /Type /Pages /Kids [" + b" ".join(f"{3 + 2 * i} 0 R".encode() for i in range(n))
                         + f"] /Count {n} >>".encode()]
    for i, data in enumerate(streams):
        objs.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * i} 0 R "
                    "/Resources << /Font << /F1 << /Type /Font /Subtype /Type1 /BaseFont /Helvetica >> >> >> >>"
                    .encode())
        objs.append(f"<< /Length {len(data)} /Filter /FlateDecode >>\nstream\n".encode() + data + b"\nendstream")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for k, body in enumerate(objs, start=1):
        offsets.append(len(out))
        out += f"{k} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objs) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += f"trailer\n<< /Size {len(objs) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    path.write_bytes(bytes(out))
    return path


def _flate(text: bytes, padding_mb: int) -> bytes:
    c = zlib.compressobj(9)
    parts = [c.compress(text)]
    block = b" " * (1 << 20)
    for _ in range(padding_mb):
        parts.append(c.compress(block))
    parts.append(c.flush())
    return b"".join(parts)


def test_pdf_flate_bomb_is_too_large_when_unpacked(tmp_path):
    bomb = _pdf_with_streams(tmp_path / "bomb.pdf", [_flate(b"BT /F1 12 Tf 72 720 Td (hi) Tj ET\n", 100)])
    assert bomb.stat().st_size < 1024 * 1024
    code, msg = _code(bomb)
    assert code == "too_large_unpacked" and "too large when unpacked" in msg


def test_pdf_many_pages_each_under_the_stream_limit(tmp_path, monkeypatch):
    """Each stream passes pypdf's per-stream limit; all together they pass ours."""
    monkeypatch.setattr(documents, "MAX_UNPACKED_BYTES", 6 * 1024 * 1024)
    pages = [_flate(b"BT /F1 12 Tf 72 720 Td (page) Tj ET\n", 2) for _ in range(5)]
    assert _code(_pdf_with_streams(tmp_path / "pages.pdf", pages))[0] == "too_large_unpacked"


def test_pdf_small_stream_still_reads(tmp_path):
    pdf = _pdf_with_streams(tmp_path / "ok.pdf", [_flate(b"BT /F1 12 Tf 72 720 Td (Ternary hello) Tj ET\n", 0)])
    assert "Ternary hello" in extract_text(pdf).text


@pytest.mark.parametrize("blob", [b"%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 1 0 R >> endobj\ntrailer << /Root 1 0 R >>",
                                  b"%PDF-1.7\n" + b"[" * 5000, b"%PDF-" + os.urandom(3000)])
def test_broken_pdfs_are_damaged_not_tracebacks(tmp_path, blob):
    path = tmp_path / "broken.pdf"
    path.write_bytes(blob)
    code, msg = _code(path)
    assert code in ("corrupt", "no_text"), msg


# -- folders and special files -----------------------------------------------------------------
def test_folder_named_like_a_document(tmp_path):
    for name in ("x.txt", "y.pdf", "z.docx", "w.html"):
        (tmp_path / name).mkdir()
        code, msg = _code(tmp_path / name)
        assert code == "folder" and "is a folder" in msg


def _in_thread(fn, timeout: float = 5.0):
    """Run ``fn`` in a thread: a hang fails the test instead of freezing it."""
    result: dict = {}

    def run() -> None:
        try:
            result["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            result["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), "extract_text hung"
    return result


@posix_only
@pytest.mark.parametrize("name", ["pipe.txt", "pipe.pdf", "pipe.docx", "pipe.html"])
def test_fifo_is_refused_without_hanging(tmp_path, name):
    os.mkfifo(tmp_path / name)
    result = _in_thread(lambda: extract_text(tmp_path / name))
    assert isinstance(result.get("error"), DocumentError) and result["error"].code == "not_file"


@posix_only
def test_device_and_symlinks(tmp_path):
    (tmp_path / "null.txt").symlink_to("/dev/null")
    (tmp_path / "zero.txt").symlink_to("/dev/zero")
    (tmp_path / "loop.txt").symlink_to(tmp_path / "loop.txt")
    (tmp_path / "dangling.txt").symlink_to(tmp_path / "nowhere.txt")
    for name in ("null.txt", "zero.txt"):
        result = _in_thread(lambda n=name: extract_text(tmp_path / n))
        assert isinstance(result.get("error"), DocumentError) and result["error"].code == "not_file"
    assert _code(tmp_path / "loop.txt")[0] == "unreadable"
    assert _code(tmp_path / "dangling.txt")[0] == "missing"


# -- UTF-16 without a byte-order mark ------------------------------------------------------------
@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be"])
@pytest.mark.parametrize("text", ["Hello world, this is a plain English note.\nSecond line.",
                                  "Grüße aus Köln – Привет, мир! Καλημέρα.",
                                  "这是一个没有字节顺序标记的中文文件，一二三。",
                                  "Mixed 中文 and English, 一 line.\n"])
def test_utf16_without_bom_is_decoded(tmp_path, encoding, text):
    path = tmp_path / "note.txt"
    path.write_bytes(text.encode(encoding))
    doc = extract_text(path)
    assert doc.text == text.strip() or doc.text == text
    assert doc.encoding == encoding


def test_binary_still_refused_after_utf16_detection(tmp_path):
    for k, blob in enumerate([bytes(range(256)) * 64, os.urandom(8192), b"\x00" * 4096,
                              b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + os.urandom(2000)]):
        path = tmp_path / f"b{k}.txt"
        path.write_bytes(blob)
        assert _code(path)[0] in ("binary", "empty")
