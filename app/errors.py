"""Errors as language-neutral data: a code and its values, turned into words only when shown.

Why: the worker thread and the history must not freeze a message in whatever language was active
when it happened. An error travels (and is stored with a reply) as :class:`UserError` — a code,
its parameters and the English line for logs — and :func:`error_text` translates it through
``QCoreApplication.translate`` each time it is displayed, so switching to 简体中文 also changes
the errors already on screen or in the history.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PySide6.QtCore import QCoreApplication

from app.core.documents import DocumentError
from runtime.errors import (
    CancelledError,
    ContextOverflowError,
    ModelFormatError,
    OutOfMemoryError,
    TernaryError,
    UnsupportedModelError,
)

_CONTEXT_NUMBERS = re.compile(r"prompt is (\d+) tokens but the context holds (\d+)")


@dataclass(frozen=True)
class UserError:
    """What went wrong, as a code (see :func:`error_text`), its values and the English line."""

    code: str
    english: str
    params: dict[str, str] = field(default_factory=dict)

    def to_stats(self) -> dict[str, Any]:
        """The fields stored with a failed reply (``error`` stays English for exports and old readers)."""
        return {"error": self.english, "error_code": self.code, "error_params": dict(self.params)}

    @classmethod
    def from_stats(cls, stats: dict[str, Any]) -> UserError:
        """Back from stored stats; replies stored before codes existed keep their English line."""
        params = stats.get("error_params")
        return cls(str(stats.get("error_code") or "other"), str(stats.get("error", "")),
                   {str(k): str(v) for k, v in params.items()} if isinstance(params, dict) else {})


def readable_error(exc: BaseException) -> str:
    """One line a user can act on. Runtime errors already are; others get their type named."""
    if isinstance(exc, TernaryError):
        return str(exc)
    name = type(exc).__name__
    if isinstance(exc, MemoryError) or "OutOfMemory" in name:
        return f"Out of memory: {exc}".strip().rstrip(":")
    if isinstance(exc, FileNotFoundError):
        return f"File not found: {exc.filename or exc}"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{name}: {text}" if text else f"Unexpected error ({name})."


def describe(exc: BaseException) -> UserError:
    """Classify an exception from the engine, the loader or the file system."""
    english = readable_error(exc)
    if isinstance(exc, CancelledError):
        return UserError("cancelled", english)
    if isinstance(exc, ContextOverflowError):
        m = _CONTEXT_NUMBERS.search(str(exc))
        if m:
            return UserError("context_overflow", english, {"prompt": m.group(1), "context": m.group(2)})
        return UserError("other", english, {"detail": str(exc)})
    name = type(exc).__name__
    if isinstance(exc, OutOfMemoryError | MemoryError) or "OutOfMemory" in name:
        gpu = any(w in str(exc).upper() for w in ("CUDA", "GPU", "VRAM"))
        return UserError("out_of_memory_gpu" if gpu else "out_of_memory", english)
    if isinstance(exc, ModelFormatError):
        return UserError("bad_model_file", english, {"detail": str(exc)})
    if isinstance(exc, UnsupportedModelError):
        return UserError("unsupported_model", english, {"detail": str(exc)})
    if isinstance(exc, OSError) and not isinstance(exc, TernaryError):
        name_of = Path(str(exc.filename)).name if exc.filename else ""
        if isinstance(exc, FileNotFoundError):
            return UserError("file_not_found", english, {"name": name_of})
        if isinstance(exc, PermissionError):
            return UserError("permission_denied", english, {"name": name_of})
        if isinstance(exc, IsADirectoryError):
            return UserError("is_a_folder", english, {"name": name_of})
        return UserError("file_error", english, {"name": name_of, "detail": exc.strerror or str(exc)})
    if isinstance(exc, TernaryError):
        return UserError("other", english, {"detail": str(exc)})
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else name
    return UserError("unexpected", english, {"detail": first})


def simple(code: str) -> UserError:
    """An error the app itself raises (no exception): ``no_model`` or ``engine_stopped``."""
    english = {"no_model": "No model is loaded. Choose a model first.",
               "engine_stopped": "The engine stopped without finishing the reply."}[code]
    return UserError(code, english)


def error_text(err: UserError) -> str:
    """The error in the interface's language (English text as the fallback for unknown codes)."""
    def tr(text: str) -> str:
        return QCoreApplication.translate("Errors", text)

    p = err.params
    texts = {
        "cancelled": tr("Cancelled."),
        "no_model": tr("No model is loaded. Choose a model first."),
        "engine_stopped": tr("The engine stopped without finishing the reply."),
        "out_of_memory": tr("The computer ran out of memory. Choose a smaller context length in Settings → "
                            "Hardware, or close other programs."),
        "out_of_memory_gpu": tr("The GPU ran out of memory. Choose a smaller context length or a VRAM cap in "
                                "Settings → Hardware, or close other programs that use the GPU."),
        "context_overflow": tr("The conversation is %1 tokens long but the context holds %2. Start a new chat, "
                               "or choose a larger context length in Settings → Hardware."),
        "bad_model_file": tr("The file is damaged or is not a model file this app can read (%1)."),
        "unsupported_model": tr("This kind of model is not supported (%1)."),
        "file_not_found": tr("%1: file not found."),
        "permission_denied": tr("%1: permission denied (the file cannot be read)."),
        "is_a_folder": tr("%1 is a folder, not a file."),
        "file_error": tr("%1 cannot be read (%2)."),
        "unexpected": tr("Something unexpected went wrong (%1). The log file has the details."),
    }
    text = texts.get(err.code)
    if text is None:
        return str(p.get("detail") or err.english)
    if err.code == "context_overflow":
        return text.replace("%1", p.get("prompt", "?")).replace("%2", p.get("context", "?"))
    if err.code in ("bad_model_file", "unsupported_model"):
        return text.replace("%1", p.get("detail", ""))
    if err.code == "file_error":
        return text.replace("%1", p.get("name", "")).replace("%2", p.get("detail", ""))
    if err.code == "unexpected":
        return text.replace("%1", p.get("detail", ""))
    return text.replace("%1", p.get("name", ""))


def document_error_text(exc: DocumentError) -> str:
    """Translated message for a document problem (the English one comes from the exception)."""
    p = exc.params
    name = str(p.get("name", ""))
    texts = {
        "unsupported": QCoreApplication.translate("DocumentErrors", "%1: this file type is not supported. Use .txt, .md, .pdf, .docx or .html."),
        "missing": QCoreApplication.translate("DocumentErrors", "%1: file not found."),
        "unreadable": QCoreApplication.translate("DocumentErrors", "%1 cannot be read."),
        "too_large": QCoreApplication.translate("DocumentErrors", "%1 is too large (%2 MB); the limit is %3 MB. Split it into smaller files."),
        "binary": QCoreApplication.translate("DocumentErrors", "%1 is not a text file (it contains binary data; was it renamed?)."),
        "encrypted": QCoreApplication.translate("DocumentErrors", "%1 is password-protected. Save an unprotected copy and drop that."),
        "no_text": QCoreApplication.translate("DocumentErrors", "%1 looks like a scanned PDF with no text layer; run OCR on it first."),
        "corrupt": QCoreApplication.translate("DocumentErrors", "%1 is damaged or not the kind of file its name says."),
        "empty": QCoreApplication.translate("DocumentErrors", "%1 contains no text."),
        "too_large_unpacked": QCoreApplication.translate("DocumentErrors", "%1 is too large when unpacked (more than %3 MB of content); it may be a compression bomb, or split it into smaller files."),
        "folder": QCoreApplication.translate("DocumentErrors", "%1 is a folder, not a document; drop the files inside it instead."),
        "not_file": QCoreApplication.translate("DocumentErrors", "%1 is not a regular file (it is a pipe, socket or device), so it cannot be read as a document."),
    }
    text = texts.get(exc.code)
    if text is None:
        return str(exc)
    return (text.replace("%1", name).replace("%2", f"{float(p.get('size_mb', 0)):.0f}")
            .replace("%3", f"{float(p.get('limit_mb', 0)):.0f}"))

