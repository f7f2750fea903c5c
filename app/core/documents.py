"""Text extraction from documents a user drops on the window or adds to a knowledge base:
.txt .md .pdf .docx .html, and source code / plain-text files (kind "code") for knowledge bases.

Why here and not in the runtime: it is an app feature with app-level messages. Every failure a
user can cause (encrypted or scanned PDF, damaged .docx, a binary file renamed to .txt, a huge
file) raises :class:`DocumentError` with a one-line message and a ``code`` the GUI translates; the
size limit is checked with ``stat`` before a single byte is read. Libraries: pypdf (BSD) and
python-docx (MIT); no AGPL code.

Hostile files: only regular files are opened (a folder named ``x.txt``, a FIFO or a device would
raise or block forever), and the file is opened non-blocking and checked again by descriptor, so a
swap between the check and the open cannot block either. A .docx is a zip and a PDF holds
compressed streams, so a 1 MB file can unpack to gigabytes: the *unpacked* size is bounded while
reading (:data:`MAX_UNPACKED_BYTES`, "too large when unpacked"), not only the size on disk.
"""

from __future__ import annotations

import codecs
import os
import re
import stat
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import BinaryIO

from runtime.errors import TernaryError

MAX_DOCUMENT_BYTES = 100 * 1024 * 1024
# What a .docx's zip members or a PDF's page content streams may unpack to, all together. Real
# documents stay far below (a 300-page report: ~20 MB of XML); zip and flate bombs go far above.
MAX_UNPACKED_BYTES = 256 * 1024 * 1024
MAX_DOCX_MEMBERS = 10_000
SUPPORTED_SUFFIXES = (".txt", ".md", ".markdown", ".pdf", ".docx", ".html", ".htm")
# Source code and plain-text formats a knowledge base indexes (read as text, kind "code"). The
# summary drop keeps SUPPORTED_SUFFIXES: summarising a source file is not what that feature is for.
CODE_SUFFIXES = (".py", ".pyi", ".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".hh", ".cs", ".java", ".kt", ".kts",
                 ".scala", ".go", ".rs", ".rb", ".php", ".pl", ".lua", ".swift", ".m", ".mm", ".js", ".jsx",
                 ".mjs", ".cjs", ".ts", ".tsx", ".vue", ".css", ".scss", ".less", ".sh", ".bash", ".zsh",
                 ".fish", ".ps1", ".bat", ".cmd", ".sql", ".r", ".jl", ".dart", ".ex", ".exs", ".erl", ".hs",
                 ".ml", ".clj", ".el", ".vim", ".toml", ".yaml", ".yml", ".json", ".ini", ".cfg", ".conf",
                 ".xml", ".csv", ".tsv", ".rst", ".tex", ".org", ".adoc", ".log", ".cmake", ".gradle",
                 ".proto", ".graphql", ".zig", ".nim", ".v", ".sv", ".vhd", ".f90", ".asm", ".s")
INDEXABLE_SUFFIXES = SUPPORTED_SUFFIXES + CODE_SUFFIXES


class DocumentError(TernaryError):
    """A document cannot be used; ``code`` names the reason for translated UI messages."""

    def __init__(self, message: str, code: str, **params: object) -> None:
        super().__init__(message)
        self.code = code
        self.params = params


@dataclass
class Document:
    path: Path
    kind: str  # "text" | "markdown" | "pdf" | "docx" | "html" | "code"
    text: str
    pages: int = 0  # PDF pages (0 for other kinds)
    encoding: str = ""  # text/html: the detected encoding
    # PDF: each page's text (stripped; "" for a page without text), so passages know their page.
    # ``text`` is the non-empty ones joined by blank lines.
    page_texts: list[str] = field(default_factory=list)
    # html/docx: the headings in reading order as (level 1-6, title); each title is also a line of
    # ``text``, so a passage can find the heading it sits under.
    headings: list[tuple[int, str]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.path.name


def is_supported(path: str | os.PathLike[str]) -> bool:
    """A document the summary drop reads (prose formats)."""
    return Path(path).suffix.lower() in SUPPORTED_SUFFIXES


def is_indexable(path: str | os.PathLike[str]) -> bool:
    """A file a knowledge base reads: the documents plus source code and plain-text formats."""
    return Path(path).suffix.lower() in INDEXABLE_SUFFIXES


def extract_text(path: str | os.PathLike[str], max_bytes: int = MAX_DOCUMENT_BYTES) -> Document:
    """Read a document's text. Raises :class:`DocumentError` with a user-readable reason.

    Source-code suffixes (:data:`CODE_SUFFIXES`) are read as text with kind "code".
    """
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in INDEXABLE_SUFFIXES:
        raise DocumentError(f"{p.name}: unsupported file type '{suffix or '(none)'}'. "
                            "Supported: .txt, .md, .pdf, .docx, .html.", "unsupported", name=p.name, suffix=suffix)
    with _open_regular_file(p, max_bytes) as f:
        if suffix == ".pdf":
            return _pdf(p, f)
        if suffix == ".docx":
            return _docx(p, f)
        raw = f.read(max_bytes + 1)
    if len(raw) > max_bytes:  # grew after the size check
        raise _too_large(p, len(raw), max_bytes)
    text, encoding = decode_text(raw, p.name)
    headings: list[tuple[int, str]] = []
    if suffix in (".html", ".htm"):
        text, headings = html_to_text_and_headings(text)
        kind = "html"
    elif suffix in CODE_SUFFIXES:
        kind = "code"
    else:
        kind = "markdown" if suffix in (".md", ".markdown") else "text"
    if not text.strip():
        raise DocumentError(f"{p.name} contains no text.", "empty", name=p.name)
    return Document(p, kind, text, encoding=encoding, headings=headings)


def _too_large(p: Path, size: int, max_bytes: int) -> DocumentError:
    return DocumentError(
        f"{p.name} is {size / 2**20:.0f} MB; documents larger than {max_bytes / 2**20:.0f} MB are refused "
        "(split it into smaller files).", "too_large", name=p.name, size_mb=size / 2**20, limit_mb=max_bytes / 2**20)


def _too_large_unpacked(p: Path) -> DocumentError:
    limit_mb = MAX_UNPACKED_BYTES / 2**20
    return DocumentError(f"{p.name} is too large when unpacked (more than {limit_mb:.0f} MB of content); "
                         "it may be a compression bomb, or split it into smaller files.", "too_large_unpacked",
                         name=p.name, limit_mb=limit_mb)


def _open_regular_file(p: Path, max_bytes: int) -> BinaryIO:
    """Open ``p`` for reading only if it is a regular file within the size limit.

    Why ``O_NONBLOCK`` and a second ``fstat``: opening a FIFO for reading blocks until a writer
    appears (forever); checking the path first and the descriptor after closes the gap in which
    the path could be swapped for one.
    """
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise DocumentError(f"{p.name}: file not found.", "missing", name=p.name) from None
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise DocumentError(f"{p.name}: cannot be read ({reason}).", "unreadable", name=p.name) from None
    _refuse_special(p, st.st_mode)
    if st.st_size > max_bytes:
        raise _too_large(p, st.st_size, max_bytes)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(p, flags)
    except OSError as exc:
        raise DocumentError(f"{p.name}: cannot be read ({exc.strerror}).", "unreadable", name=p.name) from None
    try:
        _refuse_special(p, os.fstat(fd).st_mode)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)  # a regular file: plain reads from here on
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def _refuse_special(p: Path, mode: int) -> None:
    if stat.S_ISDIR(mode):
        raise DocumentError(f"{p.name} is a folder, not a document; drop the files inside it instead.", "folder",
                            name=p.name)
    if not stat.S_ISREG(mode):
        raise DocumentError(f"{p.name} is not a regular file (it is a pipe, socket or device), so it cannot be "
                            "read as a document.", "not_file", name=p.name)


# -- plain text --------------------------------------------------------------------------------
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
         (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


def decode_text(raw: bytes, name: str = "file") -> tuple[str, str]:
    """Decode text of unknown encoding; refuse binary data. Returns (text, encoding name)."""
    for bom, enc in _BOMS:
        if raw.startswith(bom):
            return raw.decode(enc, errors="replace"), enc
    utf16 = _utf16_without_bom(raw)
    if utf16 is not None:
        return raw.decode(utf16, errors="replace"), utf16
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


def _utf16_without_bom(raw: bytes) -> str | None:
    """"utf-16-le"/"utf-16-be" when ``raw`` looks like UTF-16 text saved without a byte-order mark.

    Why this works: text in Latin, Cyrillic, Greek... has a zero high byte in almost every UTF-16
    code unit, so NUL bytes crowd onto odd offsets (little-endian) or even ones (big-endian); binary
    data has NULs on both. CJK text has few NULs, so a decoded sample must also look like text.
    """
    head = raw[:8192]
    head = head[: len(head) - len(head) % 2]
    if len(head) < 4:
        return None
    even, odd = head[0::2], head[1::2]
    units = len(head) // 2
    even_nul, odd_nul = even.count(0), odd.count(0)
    if odd_nul >= 0.3 * units and even_nul <= 0.02 * units:
        candidates = ["utf-16-le"]
    elif even_nul >= 0.3 * units and odd_nul <= 0.02 * units:
        candidates = ["utf-16-be"]
    elif even_nul + odd_nul and units >= 8:
        candidates = ["utf-16-le", "utf-16-be"]  # CJK: a NUL only where a code unit ends in 00
    else:
        return None
    for encoding in candidates:
        try:
            sample = head.decode(encoding)
        except UnicodeDecodeError:
            continue
        plausible = sum(1 for ch in sample if _plausible_text_char(ord(ch)))
        if plausible >= 0.95 * len(sample):
            return encoding
    return None


# Code points that make up real text: printable ASCII and whitespace, Latin/Greek/Cyrillic/Hebrew/
# Arabic letters, general punctuation, CJK (kana, ideographs, Hangul, full-width forms).
_TEXT_RANGES = ((0x20, 0x7E), (0xA0, 0x6FF), (0x2000, 0x206F), (0x3000, 0x30FF), (0x3400, 0x4DBF),
                (0x4E00, 0x9FFF), (0xAC00, 0xD7AF), (0xFF00, 0xFFEF))


def _plausible_text_char(cp: int) -> bool:
    return cp in (9, 10, 13) or any(low <= cp <= high for low, high in _TEXT_RANGES)


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


_HEADING_TAGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}


class _TextFromHTML(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.headings: list[tuple[int, str]] = []
        self._skip = 0
        self._heading: tuple[int, list[str]] | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in ("script", "style", "noscript", "template"):
            self._skip += 1
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n")
            if tag in _HEADING_TAGS:
                self._heading = (_HEADING_TAGS[tag], [])

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style", "noscript", "template"):
            self._skip = max(0, self._skip - 1)
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n")
            if tag in _HEADING_TAGS and self._heading is not None:
                title = re.sub(r"\s+", " ", "".join(self._heading[1])).strip()
                if title:
                    self.headings.append((self._heading[0], title))
                self._heading = None

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)
            if self._heading is not None:
                self._heading[1].append(data)


def html_to_text(html: str) -> str:
    """Visible text of an HTML page; scripts and styles dropped, whitespace tidied."""
    return html_to_text_and_headings(html)[0]


def html_to_text_and_headings(html: str) -> tuple[str, list[tuple[int, str]]]:
    """Visible text of an HTML page and its h1-h6 headings as (level, title) in reading order."""
    parser = _TextFromHTML()
    parser.feed(html)
    parser.close()
    text = "".join(parser.parts)
    text = re.sub(r"[ \t\r\f\v]+", " ", text)
    text = re.sub(r" *\n *", "\n", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip(), parser.headings


# -- PDF ---------------------------------------------------------------------------------------
def _pdf(p: Path, f: BinaryIO) -> Document:
    from pypdf import PdfReader
    from pypdf.errors import LimitReachedError

    try:
        reader = PdfReader(f)
        if reader.is_encrypted:
            try:
                ok = reader.decrypt("")  # many PDFs are "encrypted" with an empty user password
            except Exception:  # noqa: BLE001 - pypdf raises various types for unsupported crypto
                ok = 0
            if not ok:
                raise DocumentError(f"{p.name} is password-protected; open it in a PDF reader, "
                                    "save an unprotected copy and drop that.", "encrypted", name=p.name)
        pages = []
        unpacked = 0
        for page in reader.pages:
            # pypdf bounds each stream (LimitReachedError) and keeps every decoded page stream
            # cached: count them all, so a thousand pages of one-stream bombs stop too
            contents = page.get_contents()
            unpacked += len(contents.get_data()) if contents is not None else 0
            if unpacked > MAX_UNPACKED_BYTES:
                raise _too_large_unpacked(p)
            text = page.extract_text() or ""
            unpacked += len(text)
            if unpacked > MAX_UNPACKED_BYTES:
                raise _too_large_unpacked(p)
            pages.append(text)
    except DocumentError:
        raise
    except (LimitReachedError, MemoryError):
        raise _too_large_unpacked(p) from None
    except RecursionError:
        raise DocumentError(f"{p.name} is damaged or not a PDF (its objects nest too deeply).", "corrupt",
                            name=p.name) from None
    except Exception as exc:  # noqa: BLE001 - pypdf raises many types (and bare ones) for broken files
        raise DocumentError(f"{p.name} is damaged or not a PDF ({_reason(exc)}).", "corrupt",
                            name=p.name) from None
    page_texts = [t.strip() for t in pages]
    text = "\n\n".join(t for t in page_texts if t)
    if not text.strip():
        raise DocumentError(f"{p.name} looks like a scanned PDF with no text layer; run OCR on it first "
                            "(no text could be extracted).", "no_text", name=p.name)
    return Document(p, "pdf", text, pages=len(pages), page_texts=page_texts)


def _reason(exc: BaseException) -> str:
    """A short, human reason from a library exception: its message, else its kind in words."""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if message and len(message) <= 120:
        return message
    return re.sub(r"(?<!^)(?=[A-Z])", " ", type(exc).__name__).lower()


# -- DOCX --------------------------------------------------------------------------------------
def _docx(p: Path, f: BinaryIO) -> Document:
    import zipfile

    import docx

    damaged = f"{p.name} is damaged or not a Word .docx document"
    try:
        _check_zip_unpacked_size(p, f)
        f.seek(0)
        d = docx.Document(f)
    except DocumentError:
        raise
    except (MemoryError, zipfile.LargeZipFile):
        raise _too_large_unpacked(p) from None
    except Exception as exc:  # noqa: BLE001 - zip, OPC and lxml errors for broken parts
        raise DocumentError(f"{damaged} ({_reason(exc)}).", "corrupt", name=p.name) from None
    parts = [para.text for para in d.paragraphs]
    headings = [(level, para.text.strip()) for para in d.paragraphs
                if (level := _docx_heading_level(para)) and para.text.strip()]
    for table in d.tables:
        for row in table.rows:
            parts.append(" | ".join(cell.text.strip() for cell in row.cells))
    text = "\n".join(parts).strip()
    if not text:
        raise DocumentError(f"{p.name} contains no text.", "empty", name=p.name)
    return Document(p, "docx", text, headings=headings)


def _docx_heading_level(para: object) -> int:
    """1-6 for a paragraph in Word's built-in "Heading N" (or "Title") style, else 0."""
    try:
        name = (para.style.name or "") if para.style is not None else ""
    except Exception:  # noqa: BLE001 - a damaged style part must not lose the text
        return 0
    if name == "Title":
        return 1
    m = re.fullmatch(r"Heading ([1-6])", name)
    return int(m.group(1)) if m else 0


def _check_zip_unpacked_size(p: Path, f: BinaryIO) -> None:
    """Refuse a zip whose members unpack past :data:`MAX_UNPACKED_BYTES`.

    Both the sizes the zip declares and the bytes that really come out are counted: a forged
    header may claim small members (Python's zipfile stops at the declared size, but another
    reader might not, and a CRC error then reads as "damaged" instead of "too large").
    """
    import zipfile

    with zipfile.ZipFile(f) as zf:
        infos = zf.infolist()
        if len(infos) > MAX_DOCX_MEMBERS:
            raise _too_large_unpacked(p)
        if sum(i.file_size for i in infos) > MAX_UNPACKED_BYTES:
            raise _too_large_unpacked(p)
        total = 0
        for info in infos:
            if info.is_dir():
                continue
            with zf.open(info) as member:
                while chunk := member.read(1024 * 1024):
                    total += len(chunk)
                    if total > MAX_UNPACKED_BYTES:
                        raise _too_large_unpacked(p)
