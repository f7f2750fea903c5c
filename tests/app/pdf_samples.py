"""Small PDFs built byte by byte (pypdf cannot draw text), shared by the app and GUI tests."""

from __future__ import annotations

from pathlib import Path


def pages_pdf(path: Path, pages: list[list[str]]) -> Path:
    """A PDF with one page per entry of ``pages``, each a list of ASCII lines in Helvetica (a text layer)."""
    n = len(pages)
    objects: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>",
                            b"<< /Type /Pages /Kids [" + b" ".join(b"%d 0 R" % (4 + 2 * i) for i in range(n))
                            + b"] /Count %d >>" % n,
                            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    for i, lines in enumerate(pages):
        ops = ["BT", "/F1 12 Tf", "14 TL", "72 720 Td"]
        ops += ["(" + line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ") Tj T*"
                for line in lines]
        stream = "\n".join([*ops, "ET"]).encode("latin-1")
        objects.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
                       b"/Resources << /Font << /F1 3 0 R >> >> >>" % (5 + 2 * i))
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % off for off in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    path.write_bytes(bytes(out))
    return path


def text_pdf(path: Path, lines: list[str]) -> Path:
    """A one-page PDF whose text layer holds ``lines`` (ASCII) in Helvetica."""
    return pages_pdf(path, [lines])


def blank_pdf(path: Path, password: str | None = None) -> Path:
    """A page with no text layer (like a scan), optionally encrypted with a user password."""
    from pypdf import PdfWriter

    w = PdfWriter()
    w.add_blank_page(612, 792)
    if password:
        w.encrypt(user_password=password, owner_password=password + "-owner")
    with open(path, "wb") as f:
        w.write(f)
    return path
