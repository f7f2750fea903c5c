"""Refuse paths that are not what a reader expects *before* opening them.

Why: ``open()`` on a FIFO blocks until a writer appears (forever, for a model picked in a file
dialog), a character device such as ``/dev/zero`` never ends, and ``Path.exists()`` answers False
for a symbolic-link loop, so the user was told "no such file" about a file that is right there.
Every reader of model files, safetensors shards and tokenizer/config JSON goes through
:func:`require_file` / :func:`optional_file` / :func:`path_kind`, which ``stat`` the path (that
never blocks) and say exactly what it is when it is not a regular file or folder.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from runtime.errors import ModelFormatError


def _kind_of_mode(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    return "a special file"


def _stat(path: Path) -> os.stat_result | None:
    """``os.stat`` (following links); None when nothing is there; clear errors for the rest."""
    try:
        return path.stat()
    except FileNotFoundError:
        if path.is_symlink():
            raise ModelFormatError(f"{path}: a symbolic link whose target does not exist "
                                   f"({os.readlink(path)})") from None
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ModelFormatError(f"{path}: a loop of symbolic links (it never reaches a file)") from None
        if exc.errno == errno.ENAMETOOLONG:
            raise ModelFormatError(f"{path}: the path is too long") from None
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise ModelFormatError(f"{path}: permission denied") from None
        if exc.errno == errno.ENOTDIR:
            return None
        raise ModelFormatError(f"{path}: cannot be read ({exc.strerror or exc})") from None


def path_kind(path: str | os.PathLike[str]) -> str:
    """``"file"`` or ``"folder"``; anything else (missing, FIFO, device, link loop) is refused by name."""
    p = Path(path)
    st = _stat(p)
    if st is None:
        raise ModelFormatError(f"{p}: no such file or folder")
    if stat.S_ISREG(st.st_mode):
        return "file"
    if stat.S_ISDIR(st.st_mode):
        return "folder"
    raise ModelFormatError(f"{p}: this is {_kind_of_mode(st.st_mode)}, not a model file or folder; "
                           "reading it could wait forever, so it is refused")


def require_file(path: str | os.PathLike[str], what: str = "file") -> Path:
    """``path`` when it is a regular file (after following links); ModelFormatError naming what it is."""
    p = Path(path)
    st = _stat(p)
    if st is None:
        raise ModelFormatError(f"{p}: no such {what}")
    if not stat.S_ISREG(st.st_mode):
        raise ModelFormatError(f"{p}: the {what} is {_kind_of_mode(st.st_mode)}, not a regular file")
    return p


def optional_file(path: str | os.PathLike[str], what: str = "file") -> Path | None:
    """None when nothing is at ``path``, the path when it is a regular file, else ModelFormatError."""
    p = Path(path)
    if _stat(p) is None:
        return None
    return require_file(p, what)
