"""The summary's progress dialog and the summary's texts in the user's language.

Why a dialog of its own: a long summary runs for minutes. Its label says which step runs, of
about how many, and the time left from the measured speed (:class:`app.core.summarize.SummaryProgress`).
Enter and Return do nothing here: with Cancel as the default button a stray Enter (typing in the
chat box a moment earlier) threw away ten minutes of work. Cancel takes a click, Space on the
focused button, or Esc — each a deliberate act.
"""

from __future__ import annotations

import time
from typing import Any

from PySide6.QtCore import QCoreApplication, Qt, QTimer
from PySide6.QtGui import QKeyEvent, QShortcut
from PySide6.QtWidgets import QProgressDialog, QPushButton, QWidget


def format_duration(seconds: float) -> str:
    """A time left for people: "45 s", "3 min 20 s", "1 h 5 min" (rounded up to whole seconds)."""
    s = max(0, int(seconds + 0.999))
    if s < 60:
        return QCoreApplication.translate("SummaryProgressDialog", "%1 s").replace("%1", str(s))
    if s < 3600:
        text = QCoreApplication.translate("SummaryProgressDialog", "%1 min %2 s")
        return text.replace("%1", str(s // 60)).replace("%2", str(s % 60))
    text = QCoreApplication.translate("SummaryProgressDialog", "%1 h %2 min")
    return text.replace("%1", str(s // 3600)).replace("%2", str(s % 3600 // 60))


def time_left_text(eta_s: float | None) -> str:
    if eta_s is None:
        return QCoreApplication.translate("SummaryProgressDialog", "Estimating the time left…")
    text = QCoreApplication.translate("SummaryProgressDialog", "About %1 left")
    return text.replace("%1", format_duration(eta_s))


def summary_error_text(error: Any) -> str:
    """A summary problem in the user's language: :class:`app.core.summarize.SummaryError` by its code,
    any other exception or :class:`app.errors.UserError` through :func:`app.errors.error_text`."""
    from app.core.summarize import SummaryError
    from app.errors import UserError, describe, error_text

    if isinstance(error, SummaryError):
        p = {k: str(v) for k, v in error.params.items()}
        if error.code == "context_too_small":
            text = QCoreApplication.translate(
                "SummaryProgressDialog",
                "The context (%1 tokens) is too small to summarize: the instructions and a %2-token answer "
                "leave only %3 tokens for the text. Choose a longer context in Settings → Hardware.")
            return (text.replace("%1", p.get("context", "?")).replace("%2", p.get("answer", "?"))
                    .replace("%3", p.get("room", "?")))
        if error.code == "part_too_long":
            text = QCoreApplication.translate(
                "SummaryProgressDialog",
                "A partial summary (%1 tokens) is too long to combine in this context (room for %2 tokens), "
                "so the partial summaries are shown uncombined. Choose a longer context in Settings → "
                "Hardware to combine them.")
            return text.replace("%1", p.get("tokens", "?")).replace("%2", p.get("room", "?"))
        return str(error)
    if isinstance(error, UserError):
        return error_text(error)
    if isinstance(error, BaseException):
        return error_text(describe(error))
    return str(error)


class SummaryProgressDialog(QProgressDialog):
    """Step, stage and time left of a running summary; Enter never cancels (see the module docstring)."""

    def __init__(self, name: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.name = name
        button = QPushButton(self.tr("Cancel"))
        button.setAutoDefault(False)  # QDialog would otherwise make it the default button when shown
        button.setDefault(False)
        button.setAccessibleName(self.tr("Cancel summarizing (what is done is kept)"))
        self.setCancelButton(button)
        self.cancel_button = button
        self.setWindowTitle(self.tr("Summarizing"))
        self.setAccessibleName(self.tr("Summarizing progress"))
        self.setLabelText(self.tr("Summarizing %1…").replace("%1", name))
        self.setRange(0, 0)
        self.setWindowModality(Qt.WindowModality.WindowModal)
        self.setMinimumDuration(0)
        self.setAutoClose(False)
        self.setAutoReset(False)
        self.eta_s: float | None = None
        self._eta_at = 0.0
        self._step_text = ""
        self._countdown = QTimer(self)  # the time left counts down between steps (a step can take minutes)
        self._countdown.setInterval(1000)
        self._countdown.timeout.connect(self._show_label)
        # QProgressDialog's own Esc shortcut does not emit ``canceled`` once a custom button is set (seen
        # with Qt 6 here): Esc would do nothing. keyPressEvent handles Esc instead.
        for shortcut in self.findChildren(QShortcut):
            shortcut.setEnabled(False)

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 - Qt override
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            event.accept()  # swallowed: neither Cancel nor the main window gets it
            return
        if event.key() == Qt.Key.Key_Escape:  # Esc is Cancel, as everywhere (keeps the parts done)
            event.accept()
            self.canceled.emit()
            return
        super().keyPressEvent(event)

    def reject(self) -> None:
        """Esc (and closing the dialog) cancels like the Cancel button. QDialog's own reject would only
        hide the dialog and leave the summary running with no way to stop it."""
        self.canceled.emit()

    def show_progress(self, p: Any) -> None:
        """Step N of about M, the stage, and the time left from the measured speed."""
        stage = self.tr("reading the parts") if p.stage == "map" else self.tr("combining the summaries")
        self.eta_s = p.eta_s
        self._eta_at = time.monotonic()
        self._step_text = (self.tr("Summarizing %1: step %2 of about %3 (%4)").replace("%1", self.name)
                           .replace("%2", str(p.done)).replace("%3", str(p.total)).replace("%4", stage))
        self._show_label()
        if not self._countdown.isActive():
            self._countdown.start()
        self.setMaximum(max(p.total, 1))
        self.setValue(min(p.done, p.total))  # may process events (modal dialog): nothing may follow

    def time_left(self) -> float | None:
        """Seconds left now: the last estimate minus the time since it was made."""
        if self.eta_s is None:
            return None
        return max(0.0, self.eta_s - (time.monotonic() - self._eta_at))

    def _show_label(self) -> None:
        self.setLabelText(self._step_text + "\n" + time_left_text(self.time_left()))

    def done_with(self) -> None:
        """Stop the countdown before the dialog goes (its timer must not touch a closed dialog)."""
        self._countdown.stop()
