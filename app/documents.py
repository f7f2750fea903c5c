"""Text extraction from documents a user drops on the window: .txt .md .pdf .docx .html.

Why here and not in the runtime: it is an app feature with app-level messages. Every failure a
user can cause (encrypted or scanned PDF, damaged .docx, a binary file renamed to .txt, a huge
file) raises :class:`DocumentError` with a one-line message and a ``code`` the GUI translates; the
size limit is checked with ``stat`` before a single byte is read. Libraries: pypdf (BSD) and
python-docx (MIT); no AGPL code.
"""

from __future__ import annotations

import codecs
import os
import re
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from runtime.errors import TernaryError

MAX_DOCUMENT_BYTES = 100 * 1024 * 1024
SUPPORTED_SUFFIXES = (".txt", ".md", ".markdown", ".pdf", ".docx", ".html", ".htm")


class DocumentError(TernaryError):
    """A document cannot be used; ``code`` names the reason for translated UI messages."""

    def __init__(self, message: str, code: str, **params: object) -> None:
        super().__init__(message)
        self.code = code
        self.params = params


@dataclass
class Document:
    path: Path
    kind: str  # "text" | "markdown" | "pdf" | "docx" | "html"
    text: str
    pages: int = 0  # PDF pages (0 for other kinds)
    encoding: str = ""  # text/html: the detected encoding

    @property
    def name(self) -> str:
        return self.path.name


def is_supported(path: str | os.PathLike[str]) -> bool:
    return Path(path).suffix.lower() in SUPPORTED_SUFFIXES


def extract_text(path: str | os.PathLike[str], max_bytes: int = MAX_DOCUMENT_BYTES) -> Document:
    """Read a document's text. Raises :class:`DocumentError` with a user-readable reason."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise DocumentError(f"{p.name}: unsupported file type '{suffix or '(none)'}'. "
                            "Supported: .txt, .md, .pdf, .docx, .html.", "unsupported", name=p.name, suffix=suffix)
    try:
        size = p.stat().st_size
    except FileNotFoundError:
        raise DocumentError(f"{p.name}: file not found.", "missing", name=p.name) from None
    except OSError as exc:
        raise DocumentError(f"{p.name}: cannot be read ({exc.strerror}).", "unreadable", name=p.name) from None
    if size > max_bytes:
        raise DocumentError(
            f"{p.name} is {size / 2**20:.0f} MB; documents larger than {max_bytes / 2**20:.0f} MB are refused "
            "(split it into smaller files).", "too_large", name=p.name, size_mb=size / 2**20,
            limit_mb=max_bytes / 2**20)
    if suffix == ".pdf":
        return _pdf(p)
    if suffix == ".docx":
        return _docx(p)
    raw = p.read_bytes()
    text, encoding = decode_text(raw, p.name)
    if suffix in (".html", ".htm"):
        text, kind = html_to_text(text), "html"
    else:
        kind = "markdown" if suffix in (".md", ".markdown") else "text"
    if not text.strip():
        raise DocumentError(f"{p.name} contains no text.", "empty", name=p.name)
    return Document(p, kind, text, encoding=encoding)


# -- plain text --------------------------------------------------------------------------------
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
         (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


def decode_text(raw: bytes, name: str = "file") -> tuple[str, str]:
    """Decode text of unknown encoding; refuse binary data. Returns (text, encoding name)."""
    for bom, enc in _BOMS:
        if raw.startswith(bom):
            return raw.decode(enc, errors="replace"), enc
    if _looks_binary(raw):
        raise DocumentError(f"{name} is not a text file (it contains binary data; was it renamed?).",
                            "binary", name=name)
    try:
        return raw.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    try:
        from charset_normalizer import from_bytes

        best = from_bytes(raw[: 4 * 1024 * 1024]).best()
        if best is not None and best.encoding:
            return raw.decode(best.encoding, errors="replace"), best.encoding
    except ImportError:  # charset-normalizer comes with requests; fall through if it is missing
        pass
    for enc in ("gb18030", "cp1252"):
        try:
            return raw.decode(enc), enc
        except UnicodeDecodeError:
            continue
    return raw.decode("latin-1"), "latin-1"


def _looks_binary(raw: bytes) -> bool:
    head = raw[:8192]
    if not head:
        return False
    if b"\x00" in head:
        return True
    controls = sum(1 for b in head if b < 32 and b not in (9, 10, 12, 13, 27))
    return controls / len(head) > 0.1


# -- HTML --------------------------------------------------------------------------------------
_BLOCK_TAGS = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article",
               "header", "footer", "pre", "blockquote", "table", "ul", "ol", "hr", "title"}


class _TextFromHTML(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in ("script", "style", "noscript", "template"):
            self._skip += 1
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style", "noscript", "template"):
            self._skip = max(0, self._skip - 1)
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)


def html_to_text(html: str) -> str:
    """Visible text of an HTML page; scripts and styles dropped, whitespace tidied."""
    parser = _TextFromHTML()
    parser.feed(html)
    parser.close()
    text = "".join(parser.parts)
    text = re.sub(r"[ \t\r\f\v]+", " ", text)
    text = re.sub(r" *\n *", "\n", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


# -- PDF ---------------------------------------------------------------------------------------
def _pdf(p: Path) -> Document:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(str(p))
        if reader.is_encrypted:
            try:
                ok = reader.decrypt("")  # many PDFs are "encrypted" with an empty user password
            except Exception:  # noqa: BLE001 - pypdf raises various types for unsupported crypto
                ok = 0
            if not ok:
                raise DocumentError(f"{p.name} is password-protected; open it in a PDF reader, "
                                    "save an unprotected copy and drop that.", "encrypted", name=p.name)
        pages = [page.extract_text() or "" for page in reader.pages]
    except DocumentError:
        raise
    except (PdfReadError, ValueError, KeyError, OSError) as exc:
        raise DocumentError(f"{p.name} is damaged or not a PDF ({type(exc).__name__}).", "corrupt",
                            name=p.name) from None
    text = "\n\n".join(t.strip() for t in pages if t.strip())
    if not text.strip():
        raise DocumentError(f"{p.name} looks like a scanned PDF with no text layer; run OCR on it first "
                            "(no text could be extracted).", "no_text", name=p.name)
    return Document(p, "pdf", text, pages=len(pages))


# -- DOCX --------------------------------------------------------------------------------------
def _docx(p: Path) -> Document:
    import zipfile

    import docx
    from docx.opc.exceptions import PackageNotFoundError

    try:
        d = docx.Document(str(p))
    except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError, OSError) as exc:
        raise DocumentError(f"{p.name} is damaged or not a Word .docx document ({type(exc).__name__}).",
                            "corrupt", name=p.name) from None
    except Exception as exc:  # noqa: BLE001 - lxml errors for broken XML parts
        raise DocumentError(f"{p.name} is damaged or not a Word .docx document ({type(exc).__name__}).",
                            "corrupt", name=p.name) from None
    parts = [para.text for para in d.paragraphs]
    for table in d.tables:
        for row in table.rows:
            parts.append(" | ".join(cell.text.strip() for cell in row.cells))
    text = "\n".join(parts).strip()
    if not text:
        raise DocumentError(f"{p.name} contains no text.", "empty", name=p.name)
    return Document(p, "docx", text)
