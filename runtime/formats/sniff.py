"""Say what a file *is* from its first bytes, for error messages that help ("this is an HTML page").

Why: the commonest broken "model" is a download gone wrong (an HTML error page, a Git LFS
pointer, an empty file); telling the user that beats "bad magic".
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

TERNARY_MAGIC = b"BONSAI2\0"
SNIFF_BYTES = 512


def describe_bytes(head: bytes, size: int) -> str:
    """Human description of a file starting with ``head`` (at most a few hundred bytes) of ``size`` bytes."""
    if size == 0:
        return "an empty file"
    if head.startswith(TERNARY_MAGIC):
        return "a .ternary model file"
    if head.startswith(b"BONSAI"):
        return "a .ternary model file of another format generation"
    if head.startswith(b"GGUF"):
        return "a GGUF model file"
    if head.startswith(b"GGML") or head.startswith(b"ggjt") or head.startswith(b"ggml"):
        return "an old GGML/GGJT model file (pre-GGUF)"
    if len(head) >= 9:
        (n,) = struct.unpack("<Q", head[:8])
        if 2 <= n <= size - 8 and head[8:9] == b"{":
            return "a safetensors file"
    if head.startswith(b"PK\x03\x04"):
        return "a zip archive (for example a PyTorch .bin/.pt checkpoint)"
    if head.startswith(b"\x1f\x8b"):
        return "a gzip-compressed file"
    if head.startswith(b"\x80") and len(head) > 1 and head[1] in range(2, 6):
        return "a Python pickle (PyTorch checkpoint)"
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if text.startswith(b"<!doctype html") or text.startswith(b"<html") or b"<html" in text[:200]:
        return "an HTML page (probably an error page saved by a failed download, not a model)"
    if text.startswith(b"version https://git-lfs"):
        return "a Git LFS pointer file (only the pointer was downloaded, not the model)"
    if text.startswith(b"<?xml"):
        return "an XML document"
    if text.startswith(b"{") or text.startswith(b"["):
        return "a JSON document"
    try:
        decoded = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        decoded = head[:exc.start].decode("utf-8") if exc.start > len(head) - 4 else None
    if decoded is not None and all(c.isprintable() or c in "\r\n\t" for c in decoded):
        return "a text file"
    return f"an unknown binary file (starts with {head[:8].hex(' ')})"


def describe_file(path: str | os.PathLike[str]) -> str:
    p = Path(path)
    if p.is_dir():
        return "a folder"
    if not p.exists():
        return "a missing file"
    size = p.stat().st_size
    with open(p, "rb") as f:
        head = f.read(SNIFF_BYTES)
    return describe_bytes(head, size)
