"""The passage behind a citation: file, location, the whole passage with the quoted part marked.

Why a dialog and not a tooltip: a passage is a few hundred words, and the user wants to check the
claim against it and then open the file itself. The text shown is the indexed copy (what the model
was given); when the file has since changed or vanished the dialog says so instead of pretending.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QLabel,
    QPushButton,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

HIGHLIGHT = "#fff3a3"
MATCH_CHARS = 60  # how much of the saved quote must be found in the passage to mark it


@dataclass
class PassageView:
    """What the dialog shows, resolved from a stored source (see :func:`resolve_source`)."""

    number: int | None  # the [n] of the answer; None for a passage that was left out
    path: Path
    location: str
    text: str  # the full passage (or the saved quote when the passage is gone from the index)
    quote: str
    in_index: bool  # False: the passage was removed or re-indexed since the answer
    file_state: str  # "same" | "changed" | "missing"
    # a left-out passage: why, as stored (reason_code + numbers; or an English ``reason`` of older answers)
    left_out: dict[str, Any] | None = None


def resolve_source(source: dict[str, Any], store: Any | None, base_ids: list[int] | None = None) -> PassageView:
    """Look the stored source up in the knowledge store and compare the file with what was indexed.

    ``base_ids``: the bases the answer came from (the chat's), searched for the file's record."""
    path = Path(str(source.get("path", "")))
    quote = str(source.get("quote", ""))
    passage = None
    if store is not None and source.get("passage_id") is not None:
        try:
            passage = store.passage(int(source["passage_id"]))
        except Exception:  # noqa: BLE001 - a damaged or closed store still shows the saved quote
            passage = None
    text = passage.text if passage is not None else quote
    state = "missing" if not path.is_file() else "same"
    if state == "same":
        indexed = _indexed_file(store, passage, base_ids or [])
        if passage is None:
            state = "changed"  # the passage is gone from the index: the file was re-indexed or removed
        elif indexed is not None:
            st = path.stat()
            if st.st_size != indexed.size or abs(st.st_mtime_ns / 1e9 - indexed.mtime) > 1e-6:
                state = "changed"
    n = source.get("n")
    left_out = None
    if not source.get("used", True):
        left_out = {key: source[key] for key in ("reason_code", "needs_tokens", "left_tokens", "reason")
                    if key in source}
    return PassageView(n if source.get("used") and isinstance(n, int) else None, path,
                       str(source.get("location", "")) or path.name, text, quote, passage is not None, state,
                       left_out)


def _indexed_file(store: Any, passage: Any, base_ids: list[int]) -> Any:
    """The file record the passage came from (its size and mtime when indexed), if the store has it."""
    if store is None or passage is None:
        return None
    try:
        if hasattr(store, "file"):
            return store.file(passage.file_id)
        for base_id in dict.fromkeys([*base_ids, *(b.id for b in store.bases())]):
            for f in store.files(base_id):
                if f.id == passage.file_id:
                    return f
    except Exception:  # noqa: BLE001 - the comparison is a courtesy; the passage is still shown
        return None
    return None


def highlight_span(text: str, quote: str) -> tuple[int, int] | None:
    """Where the quote (possibly cut short with "…") starts and ends in the passage, or None."""
    probe = quote.strip().rstrip("…").strip()
    if not probe:
        return None
    start = text.find(probe)
    if start >= 0:
        return start, start + len(probe)
    head = " ".join(probe.split())[:MATCH_CHARS]
    flat = " ".join(text.split())
    if head and head in flat:
        # map the whitespace-normalised match back to the original text
        words_before = len(flat[:flat.index(head)].split())
        pos, seen = 0, 0
        for token in text.split():
            pos = text.index(token, pos)
            if seen == words_before:
                break
            pos += len(token)
            seen += 1
        return pos, min(len(text), pos + len(head))
    return None


class PassageDialog(QDialog):
    """Shows one source of an answer; "Open file" opens it in the desktop's viewer."""

    def __init__(self, view: PassageView, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.view = view
        name = view.path.name or str(view.path)
        title = self.tr("Source [%1]").replace("%1", str(view.number)) if view.number else self.tr("Passage")
        self.setWindowTitle(title + " — " + name)
        self.resize(640, 400)
        layout = QVBoxLayout(self)
        number = f"[{view.number}] " if view.number else ""
        self.location_label = QLabel(f"<b>{number}{html.escape(name)}</b><br>{html.escape(view.location)}")
        self.location_label.setToolTip(str(view.path))
        self.location_label.setWordWrap(True)
        layout.addWidget(self.location_label)
        self.state_label = QLabel(self._state_text())
        self.state_label.setObjectName("passageState")
        self.state_label.setWordWrap(True)
        self.state_label.setVisible(bool(self.state_label.text()))
        layout.addWidget(self.state_label)
        self.left_out_label = QLabel(self.left_out_text())
        self.left_out_label.setObjectName("passageLeftOut")
        self.left_out_label.setWordWrap(True)
        self.left_out_label.setVisible(view.left_out is not None)
        layout.addWidget(self.left_out_label)
        self.text_view = QTextBrowser()
        self.text_view.setAccessibleName(self.tr("Passage text"))
        self.highlighted = ""
        layout.addWidget(self.text_view, 1)
        self._show_text()
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.open_button = QPushButton(self.tr("Open file"))
        self.open_button.setAccessibleName(self.tr("Open the file in its application"))
        self.open_button.setEnabled(view.file_state != "missing")
        self.open_button.clicked.connect(self.open_file)
        buttons.addButton(self.open_button, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)

    def _state_text(self) -> str:
        v = self.view
        if v.file_state == "missing":
            return self.tr("The file is no longer at %1; the text below is the copy that was indexed.") \
                .replace("%1", str(v.path))
        if not v.in_index:
            return self.tr("This passage is no longer in the index (the file was changed or removed since this "
                           "answer); the text below is the quote saved with the answer.")
        if v.file_state == "changed":
            return self.tr("The file has changed since it was indexed; the text below is the indexed copy and may "
                           "differ from the file now.")
        return ""

    def left_out_text(self) -> str:
        """Why this passage is not in the answer, in the interface's language ("" for a used one).

        Stored as a code with numbers; answers saved before the codes carry an English ``reason``,
        shown as it is."""
        why = self.view.left_out
        if why is None:
            return ""
        if why.get("reason_code") == "did_not_fit":
            try:
                needs, left = int(why["needs_tokens"]), int(why["left_tokens"])
            except (KeyError, TypeError, ValueError):
                return self.tr("Left out of the answer: it did not fit in the context.")
            return (self.tr("Left out of the answer: this passage needs %1 tokens and only %2 were left in the "
                            "context.").replace("%1", str(needs)).replace("%2", str(left)))
        if why.get("reason") and "reason_code" not in why:
            return self.tr("Left out of the answer: %1").replace("%1", str(why["reason"]))
        return self.tr("Left out of the answer: it did not fit in the context.")

    def _show_text(self) -> None:
        text = self.view.text
        span = highlight_span(text, self.view.quote)
        if span is None:
            body = html.escape(text)
        else:
            a, b = span
            self.highlighted = text[a:b]
            body = (html.escape(text[:a]) + f'<span style="background-color:{HIGHLIGHT}; color:#000">'
                    + html.escape(text[a:b]) + "</span>" + html.escape(text[b:]))
        self.text_view.setHtml(f'<div style="white-space: pre-wrap">{body}</div>')
        if span is not None:
            cursor = self.text_view.textCursor()
            cursor.setPosition(span[0])
            self.text_view.setTextCursor(cursor)
            self.text_view.ensureCursorVisible()

    def open_file(self) -> bool:
        """Open the file in the desktop's application for it; says so when it is gone."""
        if not self.view.path.is_file():
            self.state_label.setText(self._state_text() if self.view.file_state == "missing" else
                                     self.tr("The file is no longer at %1.").replace("%1", str(self.view.path)))
            self.state_label.setVisible(True)
            self.open_button.setEnabled(False)
            return False
        return QDesktopServices.openUrl(QUrl.fromLocalFile(str(self.view.path)))
