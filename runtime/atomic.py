"""Atomic file writes: a temporary file beside the target, fsync, then rename over it.

Why one module: model conversions, downloads' sidecars, settings, the catalog and chat exports must
never be left half-written by a crash, a full disk or a cancellation; readers see either the old
file or the new one. The temporary name ends in ``.tmp`` and is removed on any error.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO


def temp_path_for(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        dfd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """Yield a binary file; on clean exit it atomically becomes ``path``, on error it vanishes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path_for(path)
    f = open(tmp, "wb")  # noqa: SIM115 - closed below on every path
    try:
        yield f
        f.flush()
        os.fsync(f.fileno())
        f.close()
        os.replace(tmp, path)
    except BaseException:
        f.close()
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    _fsync_dir(path.parent)


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> Path:
    """Replace ``path`` with ``data`` atomically; returns the path."""
    with atomic_output(path) as f:
        f.write(data)
    return Path(path)


def write_text_atomic(path: str | os.PathLike[str], text: str, encoding: str = "utf-8") -> Path:
    """Replace ``path`` with ``text`` atomically (``\\n`` line endings); returns the path."""
    return write_bytes_atomic(path, text.encode(encoding))


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> None:
    """Write ``data`` as indented, key-sorted JSON atomically."""
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def read_json(path: str | os.PathLike[str], default: Any = None) -> Any:
    """Parsed JSON, or ``default`` when the file is missing or not valid JSON."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return default
