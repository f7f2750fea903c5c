"""Checks that a file is exactly what we expected: size, sha256, and the format's magic bytes.

Why all three: size catches truncation cheaply, sha256 catches corruption and tampering, and the
magic/structure check catches the classic "the server sent an HTML error page with status 200"
(which has no expected hash when the hub gives none) and files that are not the format their name
says. The checks return *every* difference as a readable line (expected vs got) so the user is
told exactly what was wrong.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from runtime.hub.errors import DownloadCancelledError, VerificationError

HASH_CHUNK = 4 * 1024 * 1024
GGUF_MAGIC = b"GGUF"
TERNARY_MAGIC = b"BONSAI2\x00"
SAFETENSORS_MAX_HEADER = 100 * 1024 * 1024


def file_format(path: str | os.PathLike[str]) -> str | None:
    """"gguf", "ternary", "safetensors" or None (no structural check) from the file name."""
    name = os.fspath(path).lower()
    for ext in ("gguf", "ternary", "safetensors"):
        if name.endswith("." + ext):
            return ext
    return None


def sha256_file(path: str | os.PathLike[str], *, cancel: threading.Event | None = None,
                progress: Callable[[int, int], None] | None = None) -> str:
    """Hex sha256 of a file, streamed in 4 MiB blocks; ``progress(done, total)`` per block."""
    h = hashlib.sha256()
    total = os.path.getsize(path)
    done = 0
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK):
            if cancel is not None and cancel.is_set():
                raise DownloadCancelledError("hashing cancelled")
            h.update(chunk)
            done += len(chunk)
            if progress:
                progress(done, total)
    return h.hexdigest()


def _describe_bytes(head: bytes) -> str:
    stripped = head.lstrip().lower()
    if stripped.startswith((b"<!doctype", b"<html", b"<?xml", b"<head", b"<body")):
        return "an HTML/XML page (the server sent an error or login page instead of the file)"
    if stripped.startswith((b"{", b"[")):
        return "JSON text (probably an error message from the server)"
    if head.startswith(b"version https://git-lfs"):
        return "a Git LFS pointer file, not the file's content"
    return repr(head[:16])


def check_gguf(f, size: int) -> list[str]:
    head = f.read(24)
    if head[:4] != GGUF_MAGIC:
        return [f"magic: expected GGUF header b'GGUF', got {_describe_bytes(head)}"]
    if len(head) < 24:
        return [f"structure: GGUF header needs 24 bytes, file has {size}"]
    version, n_tensors, n_kv = struct.unpack("<IQQ", head[4:24])
    if version & 0xFFFF == 0:  # big-endian file: version field byte-swapped
        version, n_tensors, n_kv = struct.unpack(">IQQ", head[4:24])
    problems = []
    if version not in (2, 3):
        problems.append(f"version: expected GGUF version 2 or 3, got {version}")
    if n_tensors > 1_000_000 or n_kv > 1_000_000:
        problems.append(f"structure: implausible GGUF counts (tensors={n_tensors}, metadata keys={n_kv})")
    return problems


def check_ternary(f, size: int) -> list[str]:
    head = f.read(12)
    if head[:8] != TERNARY_MAGIC:
        return [f"magic: expected .ternary header b'BONSAI2\\0', got {_describe_bytes(head)}"]
    if len(head) < 12:
        return [f"structure: .ternary header needs 12 bytes, file has {size}"]
    (version,) = struct.unpack("<I", head[8:12])
    if not 1 <= version <= 1000:
        return [f"version: expected a .ternary format version >= 1, got {version}"]
    return []


def check_safetensors(f, size: int) -> list[str]:
    head = f.read(8)
    if len(head) < 8:
        return [f"structure: safetensors needs an 8-byte header length, file has {size} bytes"]
    (n,) = struct.unpack("<Q", head)
    if n > SAFETENSORS_MAX_HEADER or 8 + n > size:
        first = head + f.read(8)
        return [f"magic: expected a safetensors header (8-byte length, then JSON), got {_describe_bytes(first)} "
                f"(header length field {n}, file size {size})"]
    raw = f.read(n)
    if not raw.lstrip().startswith(b"{"):
        return [f"magic: safetensors header is not JSON, got {_describe_bytes(raw[:16])}"]
    try:
        header = json.loads(raw)
    except ValueError as exc:
        return [f"structure: safetensors JSON header does not parse ({exc})"]
    except RecursionError:
        return ["structure: safetensors JSON header is nested too deeply"]
    if not isinstance(header, dict):
        return ["structure: safetensors JSON header is not an object"]
    buffer = size - 8 - n
    end_max = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            begin, end = info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            return [f"structure: safetensors tensor {name!r} has no data_offsets"]
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (begin, end)):
            return [f"structure: safetensors tensor {name!r} data_offsets are not whole numbers"]
        if not 0 <= begin <= end <= buffer:
            return [f"structure: safetensors tensor {name!r} offsets [{begin}, {end}] outside the {buffer}-byte buffer"]
        end_max = max(end_max, end)
    if end_max != buffer:
        return [f"size: safetensors tensors end at byte {end_max} of the buffer but the buffer has {buffer} bytes"]
    return []


_CHECKS = {"gguf": check_gguf, "ternary": check_ternary, "safetensors": check_safetensors}


def check_structure(path: str | os.PathLike[str], fmt: str | None = None) -> list[str]:
    """Magic-byte and header checks for the file's format; [] when fine or format unknown."""
    fmt = fmt or file_format(path)
    check = _CHECKS.get(fmt or "")
    if check is None:
        return []
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        return check(f, size)


@dataclass
class VerifyReport:
    path: Path
    size: int
    sha256: str
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def message(self) -> str:
        return f"{self.path.name}: " + "; ".join(self.problems) if self.problems else f"{self.path.name}: OK"


def compare(path: str | os.PathLike[str], *, actual_size: int, actual_sha256: str, expected_size: int | None,
            expected_sha256: str | None, fmt: str | None = None) -> VerifyReport:
    """Build the report from already-computed size/hash (the downloader hashes while streaming)."""
    path = Path(path)
    report = VerifyReport(path=path, size=actual_size, sha256=actual_sha256)
    if expected_size is not None and actual_size != expected_size:
        report.problems.append(f"size: expected {expected_size} bytes, got {actual_size}")
    if expected_sha256 and actual_sha256.lower() != expected_sha256.lower():
        report.problems.append(f"sha256: expected {expected_sha256.lower()}, got {actual_sha256.lower()}")
    report.problems.extend(check_structure(path, fmt))
    return report


def verify_file(path: str | os.PathLike[str], *, expected_size: int | None = None,
                expected_sha256: str | None = None, fmt: str | None = None,
                cancel: threading.Event | None = None,
                progress: Callable[[int, int], None] | None = None) -> VerifyReport:
    """Hash ``path`` fully and compare it; returns the report (does not raise on mismatch)."""
    if not os.path.isfile(path):
        raise VerificationError(f"{os.fspath(path)}: no such file")
    digest = sha256_file(path, cancel=cancel, progress=progress)
    return compare(path, actual_size=os.path.getsize(path), actual_sha256=digest, expected_size=expected_size,
                   expected_sha256=expected_sha256, fmt=fmt)


def _kind_of_special(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def check_local_model(path: str | os.PathLike[str]) -> list[str]:
    """Everything that can be checked about a local model before it is loaded; [] when it can be.

    Why before loading: loading replaces the model in use, and an import is remembered in the
    model list; a file that cannot load must do neither. The checks are the cheap ones that
    catch real-world breakage: a regular file (a FIFO would block forever), the format's magic
    and version, then the whole header through the format's own reader (config, tensor table,
    every tensor's bytes inside the file, known architecture). No tensor data is read.
    """
    from runtime.errors import TernaryError
    from runtime.formats.loader import open_source

    p = Path(path)
    name = p.name or str(p)
    try:
        st = p.stat()
    except FileNotFoundError:
        return [f"{name}: no such file or folder"]
    except OSError as exc:
        return [f"{name}: cannot be read ({exc.strerror or exc})"]
    if stat.S_ISDIR(st.st_mode):
        if not (p / "config.json").is_file():
            return [f"{name}: a folder without config.json is not a Hugging Face model folder"]
        problems = []
        for shard in sorted(p.glob("*.safetensors")):
            mode = shard.stat().st_mode
            if not stat.S_ISREG(mode):
                problems.append(f"{shard.name}: {_kind_of_special(mode)}, not a model file")
            else:
                problems.extend(f"{shard.name}: {problem}" for problem in check_structure(shard, "safetensors"))
        if problems:
            return problems
    elif not stat.S_ISREG(st.st_mode):
        return [f"{name}: {_kind_of_special(st.st_mode)}, not a model file"]
    else:
        if st.st_size == 0:
            return [f"{name}: the file is empty"]
        problems = check_structure(p)
        if any(problem.startswith("magic:") for problem in problems):
            from runtime.formats.sniff import describe_file

            fmt = {"gguf": "GGUF", "ternary": ".ternary"}.get(file_format(p) or "", "model")
            return [f"{name}: not a {fmt} file: it is {describe_file(p)}"]
        if problems:  # "version: expected …" -> "expected …": the label is for the verify report's table
            return [f"{name}: {problem.split(': ', 1)[-1]}" for problem in problems]
    try:
        source = open_source(p)
    except TernaryError as exc:
        return [str(exc)]
    except OSError as exc:
        return [f"{name}: cannot be read ({exc.strerror or exc})"]
    except MemoryError:
        return [f"{name}: its header asks for more memory than this computer has; the file is damaged"]
    except Exception as exc:  # noqa: BLE001 - any header the readers choke on is a damaged file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "unreadable header"
        return [f"{name}: the header is damaged ({first})"]
    try:
        source.close()
    except Exception:  # noqa: BLE001 - closing a mapping cannot make the file bad
        pass
    return []
