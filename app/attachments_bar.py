"""The row above the message input: what this chat answers from, and the indexing progress.

Why always visible: a question is answered from the attached files and the chosen knowledge bases,
so the user must see what those are (and remove one with ×) before sending — an answer from a
forgotten attachment would be a surprise. While files are indexed, a progress row with Cancel
shows here too, next to what it is indexing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.chat_view import RETURN_PRESSES


@dataclass
class AttachedItem:
    """One chip: an attached file or folder (``path``) or a chosen knowledge base (``base_id``)."""

    label: str
    tooltip: str
    path: Path | None = None
    base_id: int | None = None
    problem: bool = False  # a file that could not be indexed (the tooltip says why)


class Chip(QFrame):
    """A name with a × button that asks to remove it."""

    removeRequested = Signal()

    def __init__(self, item: AttachedItem, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.item = item
        self.setObjectName("attachmentChip")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        row = QHBoxLayout(self)
        row.setContentsMargins(6, 0, 0, 0)
        row.setSpacing(2)
        prefix = "⚠ " if item.problem else ("📚 " if item.base_id is not None else "")
        self.label = QLabel(prefix + item.label)
        self.label.setToolTip(item.tooltip)
        self.remove_button = QToolButton()
        self.remove_button.setText("×")
        self.remove_button.setAutoRaise(True)
        self.remove_button.installEventFilter(RETURN_PRESSES)
        self.remove_button.clicked.connect(self.removeRequested)
        self.retranslate()
        row.addWidget(self.label)
        row.addWidget(self.remove_button)

    def retranslate(self) -> None:
        text = (self.tr("Stop using the knowledge base %1 in this chat") if self.item.base_id is not None
                else self.tr("Remove %1 from this chat")).replace("%1", self.item.label)
        self.remove_button.setAccessibleName(text)
        self.remove_button.setToolTip(text)


class AttachmentsBar(QWidget):
    """Chips for the chat's attachments and knowledge bases, a Knowledge bases… button, and progress."""

    removeFileRequested = Signal(object)  # Path
    removeBaseRequested = Signal(int)
    chooseBasesRequested = Signal()
    cancelRequested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("attachmentsBar")
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(2)
        top = QHBoxLayout()
        top.setSpacing(6)
        self.caption = QLabel()
        self.caption.setObjectName("attachmentsCaption")
        self.chips_area = QScrollArea()  # many chips scroll sideways instead of widening the window
        self.chips_area.setFrameShape(QFrame.Shape.NoFrame)
        self.chips_area.setWidgetResizable(True)
        self.chips_area.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.chips_area.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        inner = QWidget()
        self.chips_layout = QHBoxLayout(inner)
        self.chips_layout.setContentsMargins(0, 0, 0, 0)
        self.chips_layout.setSpacing(4)
        self.chips_layout.addStretch(1)
        self.chips_area.setWidget(inner)
        self.bases_button = QPushButton()
        self.bases_button.setObjectName("chatBasesButton")
        self.bases_button.installEventFilter(RETURN_PRESSES)
        self.bases_button.clicked.connect(self.chooseBasesRequested)
        top.addWidget(self.caption)
        top.addWidget(self.chips_area, 1)
        top.addWidget(self.bases_button)
        outer.addLayout(top)

        self.progress_row = QWidget()
        prow = QHBoxLayout(self.progress_row)
        prow.setContentsMargins(0, 0, 0, 0)
        self.progress_label = QLabel()
        self.progress_label.setObjectName("indexProgressLabel")
        self.progress_bar = QProgressBar()
        self.progress_bar.setMaximumWidth(240)
        self.cancel_button = QPushButton()
        self.cancel_button.installEventFilter(RETURN_PRESSES)
        self.cancel_button.clicked.connect(self.cancelRequested)
        prow.addWidget(self.progress_label, 1)
        prow.addWidget(self.progress_bar)
        prow.addWidget(self.cancel_button)
        self.progress_row.setVisible(False)
        outer.addWidget(self.progress_row)
        self.chips: list[Chip] = []
        self.retranslate()
        self._fit_height()

    def retranslate(self) -> None:
        self.caption.setText(self.tr("Answers from:") if self.chips else self.tr("No documents attached"))
        self.bases_button.setText(self.tr("Knowledge bases…"))
        self.bases_button.setAccessibleName(self.tr("Choose the knowledge bases this chat answers from"))
        self.bases_button.setToolTip(self.tr("Choose the knowledge bases this chat answers from"))
        self.cancel_button.setText(self.tr("Cancel"))
        self.cancel_button.setAccessibleName(self.tr("Cancel indexing"))
        self.progress_bar.setAccessibleName(self.tr("Indexing progress"))
        for chip in self.chips:
            chip.retranslate()

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt override
        if event.type() == QEvent.Type.LanguageChange:
            self.retranslate()
        super().changeEvent(event)

    def set_items(self, items: list[AttachedItem]) -> None:
        for chip in self.chips:
            # not setParent(None): that makes the chip a hidden top-level window, whose deletion
            # closes an open popup menu (the drop menu that may open right after a chat switch)
            self.chips_layout.removeWidget(chip)
            chip.hide()
            chip.deleteLater()
        self.chips = []
        for item in items:
            chip = Chip(item)
            if item.base_id is not None:
                chip.removeRequested.connect(lambda b=item.base_id: self.removeBaseRequested.emit(b))
            else:
                chip.removeRequested.connect(lambda p=item.path: self.removeFileRequested.emit(p))
            self.chips_layout.insertWidget(self.chips_layout.count() - 1, chip)
            self.chips.append(chip)
        self.caption.setText(self.tr("Answers from:") if self.chips else self.tr("No documents attached"))
        self._fit_height()

    def _fit_height(self) -> None:
        h = max([c.sizeHint().height() for c in self.chips] + [self.bases_button.sizeHint().height()])
        self.chips_area.setFixedHeight(h + 2)

    def focus_chain(self) -> list[QWidget]:
        """Keyboard stops in reading order: each chip's ×, then Knowledge bases…, then Cancel."""
        return [c.remove_button for c in self.chips] + [self.bases_button, self.cancel_button]

    def show_progress(self, text: str, done: int, total: int) -> None:
        self.progress_label.setText(text)
        self.progress_bar.setRange(0, max(total, 0))  # total 0: still counting the files (busy)
        self.progress_bar.setValue(min(done, total) if total else 0)
        self.progress_row.setVisible(True)
        self.cancel_button.setEnabled(True)

    def hide_progress(self) -> None:
        self.progress_row.setVisible(False)
